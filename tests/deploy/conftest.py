"""Deployment checks (Dockerfile, deploy/ scripts, terraform/): slow, tool-heavy, and run by
`.ci/deploy-checks`, not by the default `make test` (pyproject deselects the `deploy` marker)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from deploy_tools import run, tool


@pytest.fixture(scope="session")
def hcl_trees() -> dict[str, dict]:
    """Every .tf file of terraform/ parsed by python-hcl2, by path relative to the repo."""
    result = run([tool("hcl2/bin/python"), str(Path(__file__).parent / "hcl_dump.py"), "terraform"])
    return json.loads(result.stdout)
