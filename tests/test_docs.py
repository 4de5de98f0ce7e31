"""What the README promises that can drift from the code."""

from __future__ import annotations

import asyncio
from pathlib import Path

from runonce.settings import Settings

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_every_setting_is_documented_in_the_readme() -> None:
    """In the README, or (a target type's endpoint) on that type's own page under docs/how-to/targets/."""
    pages = "".join(
        path.read_text() for path in (Path(__file__).resolve().parents[1] / "docs/how-to/targets").glob("*.md")
    )
    missing = [
        f"RUNONCE_{name.upper()}"
        for name in Settings.model_fields
        if f"`RUNONCE_{name.upper()}`" not in README
        and not (name.endswith("_endpoint") and f"`RUNONCE_{name.upper()}`" in pages)
    ]
    assert missing == []


def test_readme_gives_the_two_set_up_commands() -> None:
    assert "make run" in README and "make test" in README
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    assert "\nrun:" in makefile and "\ntest:" in makefile


def test_readme_lists_what_make_test_needs_on_the_path() -> None:
    """.ci/deploy-checks refuses to run without these; the set-up section must say so."""
    checks = (Path(__file__).resolve().parents[1] / ".ci" / "deploy-checks").read_text()
    setup = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    for command in ("terraform", "npm", "gcloud"):
        assert command in checks and f"`{command}`" in setup, command


def test_readme_says_where_the_demo_store_lives_and_how_to_reset_it() -> None:
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    setup = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    assert "RUNONCE_STORE=sqlite:///runonce.db" in makefile and "rm -rf $(VENV) runonce.db" in makefile
    assert "`runonce.db`" in setup and "`make clean`" in setup and "`duplicate`" in setup
    assert "`.venv/bin/runonce`" in setup


def test_readme_points_at_the_served_api_docs() -> None:
    import httpx

    from runonce.api.main import create_app

    setup = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    assert "/docs" in setup and "/openapi.json" in setup
    from runonce.stores.memory import MemoryStore

    settings = Settings(routes='{"routes": {"demo": {"target": {"type": "log"}}}}', auth="none")
    app = create_app(settings, store=MemoryStore())

    async def fetch() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://runonce") as client:
            return [(await client.get(path)).status_code for path in ("/docs", "/openapi.json")]

    assert asyncio.run(fetch()) == [200, 200]


CONTRACT = (Path(__file__).resolve().parents[1] / "docs" / "contract.md").read_text()


def _contract_section(number: int) -> str:
    return CONTRACT.split(f"\n## {number}. ", 1)[1].split("\n## ", 1)[0]


def test_the_contract_lists_every_setting() -> None:
    settings = _contract_section(5)
    missing = [
        f"RUNONCE_{name.upper()}" for name in Settings.model_fields if f"`RUNONCE_{name.upper()}`" not in settings
    ]
    assert missing == []


def test_the_contract_lists_every_record_field() -> None:
    from dataclasses import fields

    from runonce.stores.base import RunRecord

    record = _contract_section(3)
    assert [f.name for f in fields(RunRecord) if f"`{f.name}`" not in record] == []


def test_the_contract_lists_every_route_field() -> None:
    from runonce.routes import Route

    routes = _contract_section(4)
    assert [name for name in Route.model_fields if f"`{name}`" not in routes] == []


def test_the_contract_lists_every_command() -> None:
    import click

    from runonce.cli import main

    def commands(group: click.Group, prefix: str) -> list[str]:
        found = []
        for name, command in group.commands.items():
            path = f"{prefix} {name}"
            found += commands(command, path) if isinstance(command, click.Group) else [path]
        return found

    lines = _contract_section(6).splitlines()
    listed = lambda command: any(line == command or line.startswith(command + " ") for line in lines)  # noqa: E731
    assert [command for command in commands(main, "runonce") if not listed(command)] == []


def test_the_readme_links_the_contract_and_nothing_refers_to_a_missing_design_document() -> None:
    repo = Path(__file__).resolve().parents[1]
    assert "(docs/contract.md)" in README
    stale = sorted(
        str(path.relative_to(repo))
        for pattern in (
            "runonce/**/*.py",
            "tests/**/*.py",
            "terraform/**/*.tf",
            "terraform/**/*.yaml",
            "deploy/**/*",
            "*.md",
            "docs/*.md",
        )
        for path in repo.glob(pattern)
        if path.is_file()
        and path.suffix != ".pyc"
        and "DESIGN" + ".md" in path.read_text(errors="replace")
        and path.name != "contract.md"
    )
    assert stale == []
