"""runonce-guard as a job's ENTRYPOINT runs it: the installed wrapper, a command with a side effect."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

WRAPPER = shutil.which("runonce-guard", path=str(Path(sys.executable).parent))


def guard(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    assert WRAPPER, "runonce-guard is not installed in this venv: make .venv/.installed (pip install -e ./guard)"
    return subprocess.run([WRAPPER, *args], env=env, capture_output=True, text=True, timeout=60)


def effect(log: Path, code: int = 0) -> list[str]:
    """A command with a side effect: appends a line to `log`, then exits with `code`."""
    return ["sh", "-c", f'echo "$CLOUD_RUN_TASK_ATTEMPT" >> {log}; exit {code}']
