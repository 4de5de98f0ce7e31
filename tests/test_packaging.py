"""What `pip install runonce` puts on a user's path: the `runonce` package and its console script,
no other top-level name (a package called `app` would collide with users' own code)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.subprocess
def test_the_wheel_holds_the_runonce_package_and_its_store_url_reading_and_its_console_script(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "runonce", source / "runonce", ignore=shutil.ignore_patterns("__pycache__"))
    shared = REPO / "guard" / "runonce_store_url"  # the store-URL reading runonce-guard ships too
    shutil.copytree(shared, source / "guard" / "runonce_store_url", ignore=shutil.ignore_patterns("__pycache__"))
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
    built = subprocess.run(
        [*pip_wheel, "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("runonce-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (entry_points,) = (name for name in names if name.endswith(".dist-info/entry_points.txt"))
        scripts = archive.read(entry_points).decode()
    top_level = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert top_level == {"runonce", "runonce_store_url"}  # not runonce_guard: that is its own distribution
    assert "runonce = runonce.cli:main" in scripts
    assert "runonce/__main__.py" in names  # python -m runonce
    assert any(name.startswith("runonce/targets/discovery/") and name.endswith(".json.gz") for name in names)
    assert "runonce/targets/discovery/oneofs.json" in names  # the route checks read it with every document
