"""The version a build carries tells the truth, the release recipe's script does what the recipe
says, and every pin the docs show is one a user can resolve."""

from __future__ import annotations

import datetime
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import release  # noqa: E402  (scripts/ is not a package)

PLACEHOLDER = "<TAG-OR-COMMIT>"
DOCS = [REPO / "README.md", REPO / "terraform" / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
DOCS += sorted((REPO / "terraform" / "examples").rglob("*.md"))


def _copy(tmp_path: Path) -> Path:
    for name in ("CHANGELOG.md", *release.VERSION_FILES, release.MODULE_FILE):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, tmp_path / name)
    return tmp_path


def _honest(root: Path) -> bool:
    """A development version, or a release whose changelog section exists and nothing is unreleased."""
    version = release.current_version(root)
    changelog = (root / "CHANGELOG.md").read_text()
    if Version(version).is_devrelease:
        return True
    return version in release.released_versions(changelog) and release.unreleased_entries(changelog) == ""


def _carried(root: Path) -> set[str]:
    """Every place the version is written: the service, the guard, the Terraform module's name."""
    versions = {release.VERSION_LINE.search((root / name).read_text()).group(1) for name in release.VERSION_FILES}  # type: ignore[union-attr]
    versions.add(release.MODULE_LINE.search((root / release.MODULE_FILE).read_text()).group(2))  # type: ignore[union-attr]
    return versions


def test_the_version_here_does_not_claim_a_release_it_is_not() -> None:
    """An image built from this commit says what it is: a development version while the changelog
    has unreleased entries, and the service, the guard and the module carry the same one."""
    assert _honest(REPO), (
        release.current_version(REPO),
        release.unreleased_entries((REPO / "CHANGELOG.md").read_text()),
    )
    assert _carried(REPO) == {release.current_version(REPO)}
    from runonce import __version__
    from runonce_guard import __version__ as guard_version

    assert __version__ == guard_version == release.current_version(REPO)


def test_a_release_moves_the_unreleased_entries_under_the_version_and_writes_it_everywhere(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    before = (root / "CHANGELOG.md").read_text()
    entries = release.unreleased_entries(before)

    release.release(root, "9.4.0", datetime.date(2027, 1, 5))

    after = (root / "CHANGELOG.md").read_text()
    assert release.unreleased_entries(after) == ""
    assert after.index("## Unreleased") < after.index("## 9.4.0 - 2027-01-05") < after.index(entries)
    assert after.count(entries) == 1 and len(after) == len(before) + len("## 9.4.0 - 2027-01-05\n\n")
    assert release.released_versions(after)[:2] == ["9.4.0", *release.released_versions(before)[:1]]
    assert _carried(root) == {"9.4.0"} and _honest(root)

    release.dev(root, "9.5.0.dev0")
    assert _carried(root) == {"9.5.0.dev0"} and _honest(root)
    assert (root / "CHANGELOG.md").read_text() == after


@pytest.mark.parametrize(
    ("version", "refusal"),
    [
        ("v9.4.0", "X.Y.Z"),
        ("9.4.0rc1", "X.Y.Z"),
        ("0.0.1", "not above the last release"),
        ("0.1.0", "already has a section"),
    ],
)
def test_a_release_refuses_a_version_it_cannot_honestly_write(tmp_path: Path, version: str, refusal: str) -> None:
    root = _copy(tmp_path)
    before = {name: (root / name).read_text() for name in ("CHANGELOG.md", *release.VERSION_FILES)}
    with pytest.raises(release.ReleaseError, match=refusal):
        release.release(root, version, datetime.date(2027, 1, 5))
    assert {name: (root / name).read_text() for name in before} == before


def test_a_release_refuses_an_empty_unreleased_section(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    release.release(root, "9.4.0", datetime.date(2027, 1, 5))
    with pytest.raises(release.ReleaseError, match="empty"):
        release.release(root, "9.4.1", datetime.date(2027, 1, 6))


@pytest.mark.parametrize(("version", "refusal"), [("9.5.0", "X.Y.Z.devN"), ("0.0.1.dev0", "not above the current")])
def test_a_development_version_is_a_dev_release_above_the_current_one(
    tmp_path: Path, version: str, refusal: str
) -> None:
    root = _copy(tmp_path)
    with pytest.raises(release.ReleaseError, match=refusal):
        release.dev(root, version)
    assert _carried(root) == {release.current_version(REPO)}


@pytest.mark.subprocess
def test_the_script_prints_the_next_steps_and_refuses_in_one_line(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    script = [sys.executable, str(REPO / "scripts" / "release.py")]
    done = subprocess.run([*script, "release", "9.4.0", "--root", str(root)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "git tag -a v9.4.0" in done.stdout and "make dev-version VERSION=9.5.0.dev0" in done.stdout
    refused = subprocess.run([*script, "release", "9.4.0", "--root", str(root)], capture_output=True, text=True)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "already" in refused.stderr


def test_the_recipe_and_the_make_targets_name_the_script() -> None:
    makefile = (REPO / "Makefile").read_text()
    recipe = (REPO / "docs" / "how-to" / "release.md").read_text()
    assert "scripts/release.py release $(VERSION)" in makefile and "scripts/release.py dev $(VERSION)" in makefile
    assert "make release VERSION=" in recipe and "make dev-version VERSION=" in recipe and "git tag" in recipe


# -- pins -------------------------------------------------------------------------------------------

PIN = re.compile(r"\?ref=([^\s\"'`)#&]+)|\.git@([^\s\"'`#]+)")


def _pins() -> list[tuple[str, str]]:
    return [
        (str(path.relative_to(REPO)), next(group for group in match.groups() if group))
        for path in DOCS
        for match in PIN.finditer(path.read_text())
    ]


def _is_ref(name: str) -> bool:
    found = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"], cwd=REPO, capture_output=True
    )
    return found.returncode == 0


def test_every_pin_in_the_docs_is_the_placeholder_or_a_ref_that_exists() -> None:
    """`terraform init` and `pip install` fail on a tag that does not exist: a page shows either a tag
    of this repository or the placeholder a user fills with a tag or commit of their own copy."""
    pins = _pins()
    assert len(pins) >= 3  # the module in README, deploy.md and release.md, the guard in release.md
    assert [(page, ref) for page, ref in pins if ref != PLACEHOLDER and not _is_ref(ref)] == []


def test_each_page_with_the_placeholder_says_what_to_put_there() -> None:
    for page in {page for page, ref in _pins() if ref == PLACEHOLDER}:
        text = (REPO / page).read_text()
        assert re.search(r"<TAG-OR-COMMIT>`?[^\n]*\b(tag|commit)\b", text), page


@pytest.mark.subprocess
def test_the_pin_check_catches_a_tag_that_does_not_exist() -> None:
    assert not _is_ref("v0.0.0-no-such-tag") and _is_ref("HEAD")
    sample = 'source = "git::https://h/o/runonce.git//terraform?ref=v9.9.9"\npip install "g @ git+https://h/o/runonce.git@v9.9.9#subdirectory=guard"'
    assert [next(g for g in m.groups() if g) for m in PIN.finditer(sample)] == ["v9.9.9", "v9.9.9"]
