"""What the README promises that can drift from the code."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.settings import Settings

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_every_setting_is_documented_in_the_readme() -> None:
    missing = [f"RUNONCE_{name.upper()}" for name in Settings.model_fields if f"`RUNONCE_{name.upper()}`" not in README]
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

    from app.main import create_app

    setup = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    assert "/docs" in setup and "/openapi.json" in setup
    from app.stores.memory import MemoryStore

    settings = Settings(routes='{"routes": {"demo": {"target": {"type": "log"}}}}', auth="none")
    app = create_app(settings, store=MemoryStore())

    async def fetch() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://runonce") as client:
            return [(await client.get(path)).status_code for path in ("/docs", "/openapi.json")]

    assert asyncio.run(fetch()) == [200, 200]
