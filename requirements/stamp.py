#!/usr/bin/env python3
"""Do the lock files still match pyproject.toml's dependencies?

`make lock` compiles requirements/test.txt (runtime + the `test` extra + build requirements) and
requirements/runtime.txt (the image's: runtime + build, pinned as in test.txt) with pip-tools, every
file with its sha256 hashes, then runs `stamp.py --write`: each lock gets a last line holding a
digest of the dependency lists it was made from. `stamp.py --check` (run by `make` before every
install, and by CI) recomputes that digest and fails, naming the fix, when someone changed the
dependencies without re-locking. Standard library only (Python 3.11+: tomllib).
"""

from __future__ import annotations

import hashlib
import json
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCKS = (ROOT / "requirements" / "test.txt", ROOT / "requirements" / "runtime.txt")
PREFIX = "# pyproject.toml dependencies sha256: "
FIX = "run `make lock` (pip-tools; about 2 minutes) and commit requirements/"


def digest(pyproject: Path = ROOT / "pyproject.toml") -> str:
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    project = data.get("project", {})
    inputs = {
        "build-system.requires": data.get("build-system", {}).get("requires", []),
        "requires-python": project.get("requires-python"),
        "dependencies": project.get("dependencies", []),
        "optional-dependencies": project.get("optional-dependencies", {}),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def stamped(lock: Path) -> str | None:
    if not lock.exists():
        return None
    lines = [line for line in lock.read_text(encoding="utf-8").splitlines() if line.startswith(PREFIX)]
    return lines[-1].removeprefix(PREFIX) if lines else None


def main(argv: list[str]) -> int:
    expected = digest()
    if argv[1:] == ["--write"]:
        for lock in LOCKS:
            text = "".join(
                line + "\n" for line in lock.read_text(encoding="utf-8").splitlines() if not line.startswith(PREFIX)
            )
            lock.write_text(text + PREFIX + expected + "\n", encoding="utf-8")
        return 0
    if argv[1:] != ["--check"]:
        print("usage: stamp.py --check | --write", file=sys.stderr)
        return 2
    stale = [str(lock.relative_to(ROOT)) for lock in LOCKS if stamped(lock) != expected]
    if stale:
        print(f"error: {', '.join(stale)} do not match pyproject.toml's dependencies: {FIX}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
