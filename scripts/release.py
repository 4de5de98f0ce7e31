"""Set runonce's version for a release, or for the development that follows one.

    .venv/bin/python scripts/release.py release 0.2.0      # `make release VERSION=0.2.0`
    .venv/bin/python scripts/release.py dev 0.3.0.dev0     # `make dev-version VERSION=0.3.0.dev0`

`release X.Y.Z` moves the entries under `## Unreleased` in CHANGELOG.md into a new section
`## X.Y.Z - DATE` (leaving an empty Unreleased section on top) and writes the version everywhere it
is carried: `runonce/__init__.py`, `guard/runonce_guard/__init__.py` and the Terraform module's
`provider_meta` name. `dev X.Y.Z.devN` writes a development version in the same places and leaves
the changelog alone. Neither commits nor tags: the recipe (docs/how-to/release.md) says when.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from pathlib import Path

from packaging.version import InvalidVersion, Version

REPO = Path(__file__).resolve().parents[1]
VERSION_FILES = ("runonce/__init__.py", "guard/runonce_guard/__init__.py")
MODULE_FILE = "terraform/versions.tf"
UNRELEASED = "## Unreleased\n"
RELEASE_HEADING = re.compile(r"^## (\d+\.\d+\.\d+)\b", re.M)
VERSION_LINE = re.compile(r'^__version__ = "([^"]*)"$', re.M)
MODULE_LINE = re.compile(r'^(\s*module_name = "runonce/terraform/v)([^"]*)(")$', re.M)


class ReleaseError(Exception):
    """A refusal: the message says what to change."""


def current_version(root: Path = REPO) -> str:
    """The version `runonce --version` prints: `__version__` in runonce/__init__.py."""
    found = VERSION_LINE.search((root / VERSION_FILES[0]).read_text())
    if found is None:
        raise ReleaseError(f"{VERSION_FILES[0]} has no __version__ line")
    return found.group(1)


def released_versions(changelog: str) -> list[str]:
    """The versions CHANGELOG.md has a section for, newest first."""
    return RELEASE_HEADING.findall(changelog)


def unreleased_entries(changelog: str) -> str:
    """The text between `## Unreleased` and the next `## ` heading, stripped."""
    if UNRELEASED not in changelog:
        raise ReleaseError("CHANGELOG.md has no '## Unreleased' section")
    after = changelog.split(UNRELEASED, 1)[1]
    return re.split(r"^## ", after, maxsplit=1, flags=re.M)[0].strip()


def _parse(version: str) -> Version:
    try:
        return Version(version)
    except InvalidVersion:
        raise ReleaseError(f"{version!r} is not a version (X.Y.Z, or X.Y.Z.devN for development)") from None


def _write_version(root: Path, version: str) -> None:
    for name in VERSION_FILES:
        path = root / name
        text, count = VERSION_LINE.subn(f'__version__ = "{version}"', path.read_text())
        if count != 1:
            raise ReleaseError(f"{name} has no single __version__ line")
        path.write_text(text)
    path = root / MODULE_FILE
    text, count = MODULE_LINE.subn(rf"\g<1>{version}\g<3>", path.read_text())
    if count != 1:
        raise ReleaseError(f'{MODULE_FILE} has no module_name = "runonce/terraform/v…" line')
    path.write_text(text)


def release(root: Path, version: str, date: datetime.date) -> None:
    """Move Unreleased into `## version - date` and write the version; refuse anything else."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ReleaseError(f"a release is X.Y.Z (no 'v', no suffix), not {version!r}")
    changelog_path = root / "CHANGELOG.md"
    changelog = changelog_path.read_text()
    released = released_versions(changelog)
    if version in released:
        raise ReleaseError(f"CHANGELOG.md already has a section for {version}")
    if released and _parse(version) <= _parse(released[0]):
        raise ReleaseError(f"{version} is not above the last release, {released[0]}")
    entries = unreleased_entries(changelog)
    if not entries:
        raise ReleaseError("the Unreleased section of CHANGELOG.md is empty: nothing to release")
    before, after = changelog.split(UNRELEASED, 1)
    parts = re.split(r"^(?=## )", after, maxsplit=1, flags=re.M)
    rest = f"\n\n{parts[1]}" if len(parts) > 1 else "\n"
    changelog_path.write_text(f"{before}{UNRELEASED}\n## {version} - {date.isoformat()}\n\n{entries}{rest}")
    _write_version(root, version)


def dev(root: Path, version: str) -> None:
    """Write a development version (X.Y.Z.devN) above the current one; the changelog is untouched."""
    parsed = _parse(version)
    if not parsed.is_devrelease or parsed.local or parsed.pre or parsed.post:
        raise ReleaseError(f"a development version is X.Y.Z.devN, not {version!r}")
    current = current_version(root)
    if parsed <= _parse(current):
        raise ReleaseError(f"{version} is not above the current version, {current}")
    _write_version(root, version)


NEXT_STEPS = """\
{version} is written in CHANGELOG.md, runonce/__init__.py, guard/runonce_guard/__init__.py and
terraform/versions.tf. Now:
  git diff                                  # read the changelog section once more
  make test                                 # the release commit passes the whole suite
  git commit -am "Release {version}"
  git tag -a v{version} -m "runonce {version}" && git push origin v{version}
then build the image from the tag (docs/how-to/release.md) and move main to the next development
version: make dev-version VERSION={next_dev}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("kind", choices=("release", "dev"), help="a release X.Y.Z, or a development version X.Y.Z.devN")
    parser.add_argument("version")
    parser.add_argument("--date", type=datetime.date.fromisoformat, default=datetime.date.today(), help="YYYY-MM-DD")
    parser.add_argument("--root", type=Path, default=REPO, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        if args.kind == "release":
            release(args.root, args.version, args.date)
            major, minor, _ = (int(part) for part in args.version.split("."))
            print(NEXT_STEPS.format(version=args.version, next_dev=f"{major}.{minor + 1}.0.dev0"), end="")
        else:
            dev(args.root, args.version)
            print(f"{args.version} is written; commit it: git commit -am 'Start {args.version}'")
    except ReleaseError as error:
        print(f"release.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
