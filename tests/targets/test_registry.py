"""The target registry (`runonce/targets/__init__.py: TARGET_TYPES`) is the one place a target type is
declared: routes validation, adapters, endpoint settings follow from it, and a type's name
appears nowhere else in runonce/."""

from __future__ import annotations

import json
import re
from typing import get_args

import httpx
import pytest
import yaml

from runonce.routes import parse_routes
from runonce.settings import ConfigError, Settings, load_settings
from runonce.targets import ENDPOINTS, TARGET_TYPES, TargetConfig, TargetContext, build_target
from runonce.targets.google import GoogleAuth
from tests.support.procs import REPO
from tests.support.target_grants import custom_roles, registry_grants


def readme_examples() -> dict[str, dict]:
    """The target block of each YAML example on the targets' pages (docs/how-to/targets/<type>.md),
    by type: every registered type must have one, and each must be a valid route."""
    pages = sorted((REPO / "docs" / "how-to" / "targets").glob("*.md"))
    section = "\n".join(page.read_text() for page in pages)
    examples: dict[str, dict] = {}
    for block in re.findall(r"```yaml\n(.*?)```", section, flags=re.S):
        for route in yaml.safe_load(block)["routes"].values():
            examples.setdefault(route["target"]["type"], route["target"])
    return examples


EXAMPLE_TARGETS = readme_examples()


def test_the_readme_shows_a_valid_route_of_every_registered_type() -> None:
    assert sorted(EXAMPLE_TARGETS) == sorted(TARGET_TYPES)
    routes = {name: {"target": target} for name, target in EXAMPLE_TARGETS.items()}
    assert set(parse_routes(json.dumps({"routes": routes}), "docs/how-to/targets")) == set(TARGET_TYPES)


def test_the_routes_union_is_the_registry() -> None:
    union = get_args(get_args(TargetConfig)[0])
    assert list(union) == [entry.config for entry in TARGET_TYPES.values()]
    for name, entry in TARGET_TYPES.items():
        assert get_args(entry.config.model_fields["type"].annotation) == (name,)
        assert entry.adapter.type == name


@pytest.mark.parametrize("name", sorted(EXAMPLE_TARGETS))
async def test_a_route_of_each_type_builds_its_adapter_with_its_endpoint(name: str) -> None:
    route = parse_routes(json.dumps({"routes": {"r": {"target": EXAMPLE_TARGETS[name]}}}), "test")["r"]
    entry = TARGET_TYPES[name]
    override = f"http://127.0.0.1:9/{name}"
    async with httpx.AsyncClient() as http:
        context = TargetContext(http=http, google_auth=GoogleAuth(), endpoints=dict.fromkeys(ENDPOINTS, override))
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
    with pytest.raises(ConfigError, match=rf"{variable}: .*use https://HOST"):
        load_settings()


def test_the_existing_endpoint_settings_keep_their_names() -> None:
    assert {"workflows", "run", "cloudbuild"} <= set(ENDPOINTS)


# Words that are also a URL scheme or an ASGI scope type, so appear quoted for other reasons.
OTHER_MEANINGS = {"http"}


@pytest.mark.parametrize("name", sorted(set(TARGET_TYPES) - OTHER_MEANINGS))
def test_a_type_name_appears_in_app_only_in_its_own_module(name: str) -> None:
    own = REPO / "runonce" / "targets" / f"{name}.py"
    elsewhere = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "runonce").rglob("*.py"))
        if path != own
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(rf"[\"']{name}[\"']", line)
    ]
    assert elsewhere == [], f"{name!r} is named outside {own.relative_to(REPO)}"


# --- what the registry's grants must agree with ----------------------------------------------------


def routes_iam():
    """deploy/lib/routes_iam.py, a standalone script (the deploy scripts run it without the app)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("routes_iam", REPO / "deploy" / "lib" / "routes_iam.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_routes_iam_declares_what_the_registry_declares() -> None:
    script = routes_iam()
    assert set(script.TARGETS) == set(TARGET_TYPES)
    for name, entry in TARGET_TYPES.items():
        declared = script.TARGETS[name]
        if entry.resource_field is None:
            assert declared is None, name
            continue
        field, _pattern, roles = declared
        assert field == entry.resource_field, name
        assert roles == [(g.role, g.on) if g.field is None else (g.role, g.on, g.field) for g in entry.grants], name
    assert {role: tuple(p) for role, p in script.CUSTOM_ROLES.items()} == custom_roles()


def test_routes_iam_prints_the_registry_grants_for_a_route_of_every_type(capsys) -> None:
    routes = {name: {"target": target} for name, target in EXAMPLE_TARGETS.items()}
    lines = routes_iam().grants({"routes": routes}, "test")
    definitions = {
        role.rsplit("/", 1)[1]: tuple(permissions.split(","))
        for role, kind, permissions in lines
        if kind == "custom-role"
    }
    assert [line for line in lines if line[1] != "custom-role"] == registry_grants(routes)
    assert definitions == custom_roles()


def readme_iam_rows() -> dict[str, str]:
    """The IAM table's rows for target types, by type (`runtime account, `TYPE` routes …`)."""
    page = (REPO / "docs" / "how-to" / "iam.md").read_text()
    section = page[page.index("| who |") :]
    section = section[: section.index("\n\n")]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"\| runtime account, `([a-z_]+)` routes", line)
        if match:
            rows.setdefault(match.group(1), line)
    return rows


@pytest.mark.parametrize("name", sorted(TARGET_TYPES))
def test_the_readme_iam_table_names_each_types_roles(name: str) -> None:
    row = readme_iam_rows().get(name)
    assert row is not None, f"docs/how-to/iam.md's IAM table has no row 'runtime account, `{name}` routes'"
    for grant in TARGET_TYPES[name].grants:
        assert f"`{grant.role}`" in row, f"{name}: the IAM table's row lacks {grant.role}"
        for permission in grant.permissions:
            assert permission.rsplit(".", 1)[1] in row, f"{name}: the IAM table's row lacks {permission}"


def test_can_reconcile_and_reads_state_follow_what_the_adapter_implements() -> None:
    """Derived from the adapter class, so an entry cannot claim what its adapter does not do."""
    reconciling = {name for name, entry in TARGET_TYPES.items() if entry.can_reconcile}
    assert {"workflows", "cloud_run_job", "cloud_build_trigger"} <= reconciling
    assert not {"http", "log"} & reconciling
    assert not TARGET_TYPES["http"].reads_state and not TARGET_TYPES["log"].reads_state
