"""Where a target type is documented: its section in the README's Targets chapter, or its own
page, `docs/how-to/targets/<type>.md` (config, call, id rule, answers, reconciliation, IAM). The
registry tests hold every registered type to one of the two."""

from __future__ import annotations

import re

from tests.support.procs import REPO

PAGES = REPO / "docs" / "how-to" / "targets"


def readme_targets_section() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Targets") :]
    return section[: section.index("\n## ", 1)]


def pages() -> dict[str, str]:
    """Each type's own page, by type (the file's name)."""
    return {path.stem: path.read_text() for path in sorted(PAGES.glob("*.md"))}


def documented_types() -> set[str]:
    """Types with a README section (`### \\`TYPE\\``) or a page of their own that names itself."""
    found = set(re.findall(r"^### `([a-z_]+)`", readme_targets_section(), flags=re.M))
    found |= {name for name, text in pages().items() if text.startswith(f"# `{name}`")}
    return found


def yaml_examples() -> list[str]:
    """The YAML blocks of the README's Targets section, then of each type's page."""
    texts = [readme_targets_section(), *pages().values()]
    return [block for text in texts for block in re.findall(r"```yaml\n(.*?)```", text, flags=re.S)]


def iam_tables() -> list[str]:
    """The README's IAM-per-target table, then each page's IAM section (its table's rows are
    `| runtime account, `TYPE` routes | …`, as the README's)."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("### IAM per target") :]
    tables = [section[: section.index("\n\n", section.index("|"))]]
    tables += [text[text.index("## IAM") :] for text in pages().values() if "## IAM" in text]
    return tables
