"""Every routes file under examples/ loads with the real loader (what `runonce serve` reads), and
together they show every target type and a route that names its Scheduler job (audit, backfill)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runonce.routes import Route, load_routes
from runonce.settings import Settings
from runonce.targets import TARGET_TYPES

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
FILES = sorted(EXAMPLES.glob("*.yaml"))


def _load(path: Path) -> dict[str, Route]:
    return load_routes(Settings(routes_file=str(path), auth="none"))


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.name)
def test_each_example_loads(path: Path) -> None:
    assert _load(path)


def test_every_target_type_has_its_example_file() -> None:
    missing = sorted(name for name in TARGET_TYPES if not (EXAMPLES / f"{name}.yaml").exists())
    assert missing == [], f"add examples/<type>.yaml for: {', '.join(missing)}"
    for name in TARGET_TYPES:
        types = {route.target.type for route in _load(EXAMPLES / f"{name}.yaml").values()}  # type: ignore[union-attr]
        assert name in types, f"examples/{name}.yaml has no `{name}` route"


def test_an_example_names_its_scheduler_job_for_the_audit_and_backfill() -> None:
    routes = _load(EXAMPLES / "audit-backfill.yaml")
    assert any(
        route.job and route.schedule and route.namespace and route.catch_up != "none" for route in routes.values()
    )
