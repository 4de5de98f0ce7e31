"""The reference pages under docs/reference/ are generated from the code (scripts/reference.py):
a page that differs from what the code gives now is stale, and this test names the command."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reference", REPO / "scripts" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REFERENCE = _generator()


def test_every_generated_page_is_current() -> None:
    stale = REFERENCE.stale()
    assert stale == [], f"stale under docs/reference/: {', '.join(stale)}; run `make reference` and commit the pages"


def test_the_generator_is_deterministic() -> None:
    for name, make in REFERENCE.PAGES.items():
        assert make() == make(), name


def test_every_setting_and_route_field_is_on_its_page() -> None:
    from runonce.routes import Route
    from runonce.settings import Settings
    from runonce.targets import ENDPOINTS, TARGET_TYPES

    settings = (REPO / "docs" / "reference" / "settings.md").read_text()
    assert [name for name in Settings.model_fields if f"| `RUNONCE_{name.upper()}` |" not in settings] == []
    assert all(f"`RUNONCE_{name.upper()}_ENDPOINT`" in settings for name in ENDPOINTS)
    routes = (REPO / "docs" / "reference" / "routes.md").read_text()
    assert [name for name in Route.model_fields if f"| `{name}` |" not in routes] == []
    assert [name for name in TARGET_TYPES if f"## `{name}`" not in routes] == []


def test_every_status_is_on_its_page() -> None:
    from runonce.api.answers import ANSWERS, SUCCESSES

    statuses = (REPO / "docs" / "reference" / "statuses.md").read_text()
    for answer in (*SUCCESSES, *ANSWERS.values()):
        assert f"| {answer.http_status} | `{answer.status}` |" in statuses, answer


def test_every_command_is_on_its_page() -> None:
    import click

    from runonce.cli import main

    page = (REPO / "docs" / "reference" / "cli.md").read_text()

    def paths(group: click.Group, prefix: str) -> list[str]:
        found = []
        for name, command in group.commands.items():
            found.append(f"{prefix} {name}")
            if isinstance(command, click.Group):
                found += paths(command, f"{prefix} {name}")
        return found

    assert [path for path in paths(main, "runonce") if f"## `{path}`" not in page] == []


def test_the_published_schema_is_the_routes_models() -> None:
    from runonce.routes import RoutesConfig

    schema = json.loads((REPO / "docs" / "reference" / "routes.schema.json").read_text())
    models = REFERENCE.without_nulls(RoutesConfig.model_json_schema())
    assert schema["$defs"] == models["$defs"]
    assert schema["properties"]["routes"] == {**models["properties"]["routes"], "additionalProperties": False}
    assert set(schema["$defs"]) >= {"Route", "Namespace"}


def test_a_setting_without_a_description_stops_the_generator(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from runonce.settings import Settings

    info = Settings.model_fields["lease_seconds"]
    monkeypatch.setattr(info, "description", None)
    try:
        REFERENCE.settings_page()
    except SystemExit as exc:
        assert "lease_seconds" in str(exc)
    else:
        raise AssertionError("a setting without a description was accepted")


def _schema_validator():  # type: ignore[no-untyped-def]
    import jsonschema

    schema = json.loads((REPO / "docs" / "reference" / "routes.schema.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_an_editor_validating_with_the_schema_accepts_every_example() -> None:
    import yaml

    validator = _schema_validator()
    for path in sorted((REPO / "examples").glob("*.yaml")):
        errors = [error.message for error in validator.iter_errors(yaml.safe_load(path.read_text()))]
        assert errors == [], path.name


def test_an_editor_validating_with_the_schema_flags_what_the_loader_refuses() -> None:
    validator = _schema_validator()
    log = {"type": "log"}
    for bad in (
        {"routes": {"a": {"target": {"type": "nosuch"}}}},  # not a target type
        {"routes": {"a": {"target": log, "overlaps": "skip"}}},  # a typo'd field
        {"routes": {"a": {"target": log, "overlap": "sometimes"}}},  # not one of the values
        {"routes": {"Nightly ETL": {"target": log}}},  # not a route name
        {"routes": {}},  # no route
        {"route": {"a": {"target": log}}},  # no top-level `routes:`
        # an empty YAML key (null), which the loader refuses rather than take for the default
        {"routes": {"a": {"target": log, "max_lateness_seconds": None}}},
        {"routes": {"a": {"target": log, "namespace": None}}},
        {"routes": {"a": {"target": {"type": "cloud_run_job", "job": "projects/p/locations/l/jobs/j", "args": None}}}},
        {"routes": {"a": {"target": {"type": "http", "url": "https://example.com/run", "audience": None}}}},
    ):
        assert not validator.is_valid(bad), bad
