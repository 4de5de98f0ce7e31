"""What the README promises that can drift from the code."""

from __future__ import annotations

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
