"""`pip install ./guard` in a fresh virtualenv, as outside checks do: it installs without the server,
without FastAPI/uvicorn, and the installed wrapper and library work against the emulator."""

from __future__ import annotations

import shutil
import subprocess
import venv
from pathlib import Path

import runonce_guard

GUARD = Path(__file__).resolve().parents[2] / "guard"


def test_clean_install_of_the_guard_runs_the_wrapper_and_the_library(job_env, tmp_path: Path) -> None:
    source = tmp_path / "guard"  # a copy: no build artefacts of the editable install, none left behind
    shutil.copytree(GUARD, source, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr
    names = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True
    ).stdout.lower()
    assert f"runonce-guard=={runonce_guard.__version__}" in names
    assert not any(name in names for name in ("fastapi", "uvicorn", "starlette", "\nrunonce=="))

    wrapper = tmp_path / "venv" / "bin" / "runonce-guard"
    log = tmp_path / "effects"
    command = [str(wrapper), "run", "--step", "export", "--", "sh", "-c", f"echo once >> {log}"]
    for _ in range(2):
        done = subprocess.run(command, env=job_env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    assert log.read_text() == "once\n"

    job = "from runonce_guard import once\nprint(once('export')(lambda: 'ran')())\n"
    library = subprocess.run(
        [str(python), "-c", job], env=job_env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert library.returncode == 0, library.stderr
    assert library.stdout.strip() == "None"  # done by the wrapper (no result recorded): skipped, not run
