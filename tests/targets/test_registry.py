"""The target registry (`app/targets/__init__.py: TARGET_TYPES`) is the one place a target type is
declared: routes validation, adapters, endpoint settings follow from it, and a type's name
appears nowhere else in app/."""

from __future__ import annotations

import re
from typing import get_args

import httpx
import pytest

from app.routes import parse_routes
from app.settings import ConfigError, Settings, load_settings
from app.targets import ENDPOINTS, TARGET_TYPES, TargetConfig, TargetContext, build_target
from app.targets.google import GoogleAuth
from tests.support.procs import REPO

EXAMPLE_TARGETS = {
    "log": {"type": "log"},
    "http": {"type": "http", "url": "https://report.example.com/run"},
    "workflows": {"type": "workflows", "workflow": "projects/p-123456/locations/us-central1/workflows/etl"},
    "cloud_run_job": {"type": "cloud_run_job", "job": "projects/p-123456/locations/us-central1/jobs/export"},
    "cloud_build_trigger": {"type": "cloud_build_trigger", "trigger": "projects/p-123456/locations/global/triggers/nightly"},
}


def test_every_registered_type_has_an_example_here() -> None:
    assert set(EXAMPLE_TARGETS) == set(TARGET_TYPES)


def test_the_routes_union_is_the_registry() -> None:
    union = get_args(get_args(TargetConfig)[0])
    assert list(union) == [entry.config for entry in TARGET_TYPES.values()]
    for name, entry in TARGET_TYPES.items():
        assert get_args(entry.config.model_fields["type"].annotation) == (name,)
        assert entry.adapter.type == name


@pytest.mark.parametrize("name", sorted(EXAMPLE_TARGETS))
async def test_a_route_of_each_type_builds_its_adapter_with_its_endpoint(name: str) -> None:
    import json

    route = parse_routes(json.dumps({"routes": {"r": {"target": EXAMPLE_TARGETS[name]}}}), "test")["r"]
    entry = TARGET_TYPES[name]
    override = f"http://127.0.0.1:9/{name}"
    async with httpx.AsyncClient() as http:
        context = TargetContext(http=http, google_auth=GoogleAuth(), endpoints={e: override for e in ENDPOINTS})
        target = build_target(route.target, context)
        try:
            assert type(target) is entry.adapter
            if entry.endpoint and hasattr(target, "_base"):  # the REST adapters: their base URL
                assert target._base == override.rstrip("/")
        finally:
            await target.aclose()


def test_an_unknown_type_is_refused_naming_the_registered_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_routes('{"routes": {"r": {"target": {"type": "pubsub"}}}}', "routes file r.yaml")
    message = str(caught.value)
    assert "route 'r'" in message and "'pubsub'" in message
    for name in TARGET_TYPES:
        assert repr(name) in message


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_each_endpoint_is_a_setting_read_and_checked_at_start_up(endpoint: str, monkeypatch) -> None:
    variable = f"RUNONCE_{endpoint.upper()}_ENDPOINT"
    monkeypatch.setenv(variable, "http://127.0.0.1:8085")
    assert Settings().endpoint_overrides()[endpoint] == "http://127.0.0.1:8085"
    monkeypatch.setenv(variable, "127.0.0.1:8085")
    with pytest.raises(ConfigError, match=f"{variable}: must be a URL without a path"):
        load_settings()


def test_the_existing_endpoint_settings_keep_their_names() -> None:
    assert {"workflows", "run", "cloudbuild"} <= set(ENDPOINTS)


# Words that are also a URL scheme or an ASGI scope type, so appear quoted for other reasons.
OTHER_MEANINGS = {"http"}


@pytest.mark.parametrize("name", sorted(set(TARGET_TYPES) - OTHER_MEANINGS))
def test_a_type_name_appears_in_app_only_in_its_own_module(name: str) -> None:
    own = REPO / "app" / "targets" / f"{name}.py"
    elsewhere = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "app").rglob("*.py"))
        if path != own
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(rf"[\"']{name}[\"']", line)
    ]
    assert elsewhere == [], f"{name!r} is named outside {own.relative_to(REPO)}"
