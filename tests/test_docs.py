"""What the README and the documentation site promise that can drift from the code: the set-up
commands, the command list, the site building strictly and offline, and text that says what the
product does rather than how it was built."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
LOCAL = (REPO / "docs" / "getting-started" / "local.md").read_text()
MAKEFILE = (REPO / "Makefile").read_text()


def test_the_readme_stays_short() -> None:
    assert len(README.splitlines()) <= 200


def test_readme_gives_the_two_set_up_commands_and_the_fast_target() -> None:
    assert "make run" in README and "make test" in README and "make test-fast" in README
    assert "\nrun:" in MAKEFILE and "\ntest:" in MAKEFILE


def _commands(group: click.Group, prefix: str) -> list[str]:
    found = []
    for name, command in group.commands.items():
        path = f"{prefix} {name}"
        found += _commands(command, path) if isinstance(command, click.Group) else [path]
    return found


def test_the_readme_lists_every_command() -> None:
    from runonce.cli import main

    block = README.split("## Command line", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    listed = lambda command: any(line == command or line.startswith(command + " ") for line in lines)  # noqa: E731
    assert [command for command in _commands(main, "runonce") if not listed(command)] == []
    assert "runonce lint" in block and "runonce schedule next" in block


def test_the_local_page_lists_what_make_test_needs_on_the_path() -> None:
    """.ci/deploy-checks refuses to run without these; the set-up page must say so."""
    checks = (REPO / ".ci" / "deploy-checks").read_text()
    for command in ("terraform", "npm", "gcloud"):
        assert command in checks and f"`{command}`" in LOCAL, command


def test_the_local_page_says_where_the_demo_store_lives_and_how_to_reset_it() -> None:
    assert "RUNONCE_STORE=sqlite:///runonce.db" in MAKEFILE and "rm -rf $(VENV) runonce.db" in MAKEFILE
    assert "`runonce.db`" in LOCAL and "`make clean`" in LOCAL and "`duplicate`" in LOCAL
    assert "`.venv/bin/runonce`" in LOCAL and "/docs" in LOCAL and "/openapi.json" in LOCAL


def test_nothing_refers_to_a_removed_document() -> None:
    stale = sorted(
        str(path.relative_to(REPO))
        for pattern in ("runonce/**/*.py", "guard/**/*.py", "terraform/**/*.tf", "deploy/**/*", "*.md", "docs/**/*.md")
        for path in REPO.glob(pattern)
        if path.is_file()
        and path.suffix != ".pyc"
        and re.search(
            r"DESIGN\.md|docs/contract\.md|README's (IAM table|Targets section)", path.read_text(errors="replace")
        )
    )
    assert stale == []


# -- text a user reads ------------------------------------------------------------------------------

SLIPS = re.compile(
    r"\b[Ii]ssues? \d+"  # "issue 14"
    r"|\bseed(?:s|'s|ed)?\b"  # the codebase this grew from, or a random seed in prose
    r"|\brounds?\b(?![-\s]+trips?)(?!\()"  # a development round (a round trip is fine, and round())
    r"|\bI\d{1,2}(?:[\u2013-]I?\d{1,2})?\b"  # invariant codes without their meaning (I1, I1-I11)
)
"""Words that say how or when runonce was built, not what it does."""


def _prose(markdown: str) -> str:
    """Markdown without fenced blocks and inline code: commands and file names may say `--seed`."""
    without_blocks = re.sub(r"^(```|~~~).*?^\1", "", markdown, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", without_blocks)


def _comments(python: str) -> str:
    """A Python file's comments and docstrings (string literals alone on their lines)."""
    import io
    import tokenize

    kept = []
    for token in tokenize.generate_tokens(io.StringIO(python).readline):
        if token.type == tokenize.COMMENT or (token.type == tokenize.STRING and token.line.strip() == token.string):
            kept.append(token.string)
    return "\n".join(kept)


def _user_text() -> dict[str, str]:
    texts = {
        str(path.relative_to(REPO)): _prose(path.read_text())
        for path in [
            REPO / "README.md",
            REPO / "CONTRIBUTING.md",
            REPO / "CHANGELOG.md",
            REPO / "bench" / "README.md",
            REPO / "guard" / "README.md",
            REPO / "terraform" / "README.md",
            *sorted((REPO / "docs").rglob("*.md")),
        ]
        if path.exists()
    }
    texts["Makefile (## help)"] = "\n".join(line.split("##", 1)[1] for line in MAKEFILE.splitlines() if "##" in line)
    for name in ("pyproject.toml", "guard/pyproject.toml", "mkdocs.yml", "cloudbuild.yaml"):
        lines = (REPO / name).read_text().splitlines()
        texts[f"{name} (comments)"] = "\n".join(line.split("#", 1)[1] for line in lines if "#" in line)
    deployment = [*(REPO / "deploy").rglob("*"), *(REPO / "terraform").rglob("*.tf"), *(REPO / "examples").rglob("*")]
    for path in sorted(path for path in [*deployment, REPO / "Dockerfile"] if path.is_file() and path.suffix != ".pyc"):
        texts[str(path.relative_to(REPO))] = path.read_text(errors="replace")  # --help texts, comments, descriptions
    for path in sorted([*(REPO / "runonce").rglob("*.py"), *(REPO / "guard" / "runonce_guard").rglob("*.py")]):
        texts[f"{path.relative_to(REPO)} (comments, docstrings)"] = _comments(path.read_text())
    return texts


def test_user_facing_text_says_what_the_product_does_not_how_it_was_built() -> None:
    slips = [
        f"{name}: {match.group(0)!r} in {text[max(0, match.start() - 40) : match.end() + 40]!r}"
        for name, text in _user_text().items()
        for match in SLIPS.finditer(text)
    ]
    assert slips == []


def test_the_slip_check_catches_each_kind() -> None:
    for slip in ("since issue 14", "the seed's handler", "this round", "invariants I1\u2013I11", "holds I3"):
        assert SLIPS.search(_prose(slip)), slip
    for fine in ("two round trips", "round-trip", "round(x, 3)", "`--seed N`", "`bench/seed_handler.py`"):
        assert not SLIPS.search(_prose(fine)), fine


def test_the_help_texts_carry_no_slips() -> None:
    from runonce.cli import main

    texts = []
    for path in _commands(main, "runonce"):
        command: click.Command = main
        context = click.Context(main, info_name="runonce")
        for name in path.split()[1:]:
            assert isinstance(command, click.Group)
            command = command.commands[name]
            context = click.Context(command, info_name=name, parent=context)
        texts.append(command.get_help(context))
    assert [match.group(0) for text in texts for match in SLIPS.finditer(text)] == []


# -- the site ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documentation site, built strictly (what `make docs` runs) into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    properdocs = Path(sys.executable).parent / "properdocs"
    if not properdocs.exists():
        pytest.fail("properdocs is missing: the `docs` extra is in requirements/test.txt; run make .venv/.installed")
    result = subprocess.run(
        [str(properdocs), "build", "--strict", "-f", str(REPO / "mkdocs.yml"), "-d", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.mark.subprocess
def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    pages = {str(path.relative_to(REPO / "docs").with_suffix("")) for path in (REPO / "docs").rglob("*.md")}
    built = {str(path.relative_to(site).with_suffix("")) for path in site.rglob("*.html") if path.name != "404.html"}
    assert pages <= built
    assert (site / "reference" / "routes.schema.json").exists()


def test_the_site_loads_nothing_from_another_host(site: Path) -> None:
    """Offline: no web fonts, no scripts or stylesheets from a CDN (links in the text are fine)."""
    remote = re.compile(r"<(?:script|link|img)\b[^>]*\b(?:src|href)=\"(?:https?:)?//", re.I)
    offenders = sorted(
        str(path.relative_to(site)) for path in site.rglob("*.html") if remote.search(path.read_text(errors="replace"))
    )
    assert offenders == []
    assert not any("fonts.googleapis" in path.read_text(errors="replace") for path in site.rglob("*.html"))
    assert "```mermaid" not in "".join(path.read_text() for path in (REPO / "docs").rglob("*.md"))  # from a CDN


def _routes_blocks() -> list[tuple[str, str]]:
    blocks = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for block in re.findall(r"```yaml\n(.*?)```", path.read_text(), flags=re.S):
            if block.lstrip().startswith(("routes:", "# routes.yaml\nroutes:")):
                blocks.append((str(path.relative_to(REPO)), block))
    return blocks


ROUTES_BLOCKS = _routes_blocks()


# Ids without a slash: mutmut runs a test again by its id, and pytest does not find one whose
# brackets hold a path.
@pytest.mark.parametrize(
    ("page", "block"), ROUTES_BLOCKS, ids=[f"{page.replace('/', '.')}-{i}" for i, (page, _) in enumerate(ROUTES_BLOCKS)]
)
def test_every_routes_file_shown_in_the_docs_loads(page: str, block: str) -> None:
    from runonce.routes import parse_routes

    assert parse_routes(block, page)


def test_the_metrics_page_lists_every_metric_and_its_labels() -> None:
    from runonce.metrics import Metrics

    metrics = Metrics()
    metrics.count_certs_fetches(lambda: 0)  # registered only with RUNONCE_AUTH=oidc
    page = (REPO / "docs" / "reference" / "metrics-logs.md").read_text()
    rows = {row.split("|")[1].strip(): row for row in page.splitlines() if row.startswith("| `runonce_")}
    missing = []
    for family in metrics.registry.collect():
        name = f"{family.name}_total" if family.type == "counter" else family.name
        row = next((row for cell, row in rows.items() if cell.startswith(f"`{name}`")), None)
        labels = {label for sample in family.samples for label in sample.labels if label not in ("le", "quantile")}
        if row is None or any(f"`{label}`" not in row for label in labels):
            missing.append(name)
    assert missing == []


def test_code_blocks_wrap_long_lines_and_diagrams_keep_their_columns(site: Path) -> None:
    """At 1280 px beside the navigation, or on a phone, a long command wraps under its own start
    rather than scrolling sideways; a diagram keeps its columns (docs/stylesheets/extra.css)."""
    css = (site / "stylesheets" / "extra.css").read_text()
    assert "white-space: pre-wrap" in css and "text-indent: -4ch" in css
    assert re.search(r"\.language-text pre > code \{[^}]*white-space: pre;", css)
    deploy = (site / "getting-started" / "deploy.html").read_text()
    assert 'href="../stylesheets/extra.css"' in deploy and '<span id="__span-' in deploy  # one element a line
    index = (site / "index.html").read_text()
    assert '<div class="language-text highlight">' in index and "Cloud Scheduler ──POST" in index
    assert 'data-md-type="toc" hidden>' in index  # the diagram gets the table of contents' width
