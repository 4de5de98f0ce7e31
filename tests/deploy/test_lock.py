"""requirements/*.txt: the lock files `make`, CI and the image install from, with hashes."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_tools import REPO

pytestmark = pytest.mark.deploy

PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", re.MULTILINE)


def pins(path: Path) -> dict[str, str]:
    return dict(PIN.findall(path.read_text()))


def test_the_locks_match_pyproject_toml() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "requirements" / "stamp.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_a_dependency_added_without_relocking_fails_loudly_with_the_fix(tmp_path: Path) -> None:
    """What a merge that adds a test dependency to pyproject.toml meets in `make` and CI."""
    copy = tmp_path / "repo"
    (copy / "requirements").mkdir(parents=True)
    for name in ("pyproject.toml", "requirements/stamp.py", "requirements/test.txt", "requirements/runtime.txt"):
        shutil.copy(REPO / name, copy / name)
    pyproject = copy / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("test = [\n", 'test = [\n    "hypothesis>=6",\n', 1))
    result = subprocess.run(
        [sys.executable, str(copy / "requirements" / "stamp.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: requirements/test.txt, requirements/runtime.txt do not match pyproject.toml's dependencies: "
        "run `make lock` (pip-tools; about 2 minutes) and commit requirements/"
    )


def test_every_pin_has_hashes_and_the_image_gets_the_tested_versions() -> None:
    test, runtime = (REPO / "requirements" / name for name in ("test.txt", "runtime.txt"))
    for lock in (test, runtime):
        blocks = re.split(r"\n(?=[A-Za-z0-9_.-]+==)", lock.read_text())
        for block in blocks[1:]:
            assert "--hash=sha256:" in block, block.splitlines()[0]
    assert pins(runtime).items() <= pins(test).items()
    assert {"fastapi", "setuptools"} <= set(pins(runtime)) and "pytest" not in pins(runtime)
    assert {"pytest", "fastapi"} <= set(pins(test))
