"""`runonce key` on event routes gives the run_id the server gives; audit and backfill refuse event
routes in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.clock import Clock
from tests.support.events import (
    ROUTES,
    SUBSCRIPTION,
    binary,
    cloudevent,
    envelope,
    open_events_api,
    storage_event,
    storage_notification,
)


@pytest.fixture
def routes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    path = tmp_path / "routes.yaml"
    path.write_text(ROUTES)
    monkeypatch.setenv("RUNONCE_ROUTES_FILE", str(path))
    return path


async def served_run_id(route: str, body: bytes, headers: dict[str, str] | None = None) -> str:
    async with open_events_api(Clock()) as events:
        response = await events.client.post(f"/v1/routes/{route}:run", content=body, headers=headers or {})
        assert response.status_code == 200, response.text
        return str(response.json()["run_id"])


async def test_key_of_a_pubsub_message_matches_the_server(cli, routes: Path, tmp_path: Path) -> None:
    body = json.dumps(envelope("4711")).encode()
    expected = await served_run_id("orders", body)
    by_ids = cli("key", "--route", "orders", "--subscription", SUBSCRIPTION, "--message-id", "4711")
    assert (by_ids.exit_code, by_ids.output.strip()) == (0, expected)
    (tmp_path / "envelope.json").write_bytes(body)
    by_body = cli("key", "--route", "orders", "--body", str(tmp_path / "envelope.json"), "--canonical")
    assert by_body.output.splitlines()[0] == expected
    assert by_body.output.splitlines()[1].startswith("runonce/v1|pubsub|||orders|{")


async def test_key_of_a_storage_notification_and_of_a_cloudevent_match_the_server(cli, routes, tmp_path) -> None:
    body = json.dumps(storage_notification("1")).encode()
    (tmp_path / "n.json").write_bytes(body)
    assert cli("key", "--route", "orders", "--body", str(tmp_path / "n.json")).output.strip() == await served_run_id(
        "orders", body
    )
    headers, data = binary(storage_event("ev-9"))
    (tmp_path / "data.json").write_bytes(data)
    flags = [arg for name, value in headers.items() for arg in ("--header", f"{name}: {value}")]
    result = cli("key", "--route", "uploads", "--body", str(tmp_path / "data.json"), *flags)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == await served_run_id("uploads", data, headers)
    plain_headers, _ = binary(cloudevent("e-1"))
    plain = [arg for name, value in plain_headers.items() for arg in ("--header", f"{name}: {value}")]
    assert cli("key", "--route", "uploads", *plain).exit_code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--route", "orders", "--job", "nightly"], "--job: route 'orders' takes pubsub deliveries"),
        (["--route", "orders", "--message-id", "1"], "--subscription and --message-id go together"),
        (["--route", "orders", "--subscription", "x", "--message-id", "1"], "--subscription:"),
        (["--route", "uploads", "--header", "ce-id"], "--header: 'ce-id' is not NAME:VALUE"),
        (["--route", "uploads", "--header", "ce-id: 1"], "ce-source"),
        (["--route", "nightly", "--message-id", "1"], "--message-id: route 'nightly' takes Cloud Scheduler"),
    ],
)
def test_key_refuses_flags_of_the_wrong_source(cli, routes: Path, args: list[str], message: str) -> None:
    result = cli("key", *args)
    assert result.exit_code == 2
    assert message in result.output


def test_backfill_and_audit_refuse_an_event_route_in_one_line(cli, routes: Path) -> None:
    backfill = cli("backfill", "orders", "--from", "2026-10-16T00:00:00Z", "--to", "2026-10-16T01:00:00Z", "--dry-run")
    assert backfill.exit_code == 2
    assert (
        "route 'orders' takes pubsub events: audit, catch-up and backfill apply only to Scheduler routes"
        in backfill.output
    )
    audit = cli("audit", "--route", "uploads", "--since", "1h")
    assert audit.exit_code == 2
    assert "route 'uploads' takes cloudevents events" in audit.output


async def test_the_backfill_endpoint_refuses_an_event_route(clock: Clock) -> None:
    async with open_events_api(clock) as events:
        response = await events.client.post(
            "/v1/routes/orders:backfill", json={"from": "2026-10-16T00:00:00Z", "to": "2026-10-16T01:00:00Z"}
        )
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "route"
    assert "backfill applies only to Scheduler routes" in response.json()["error"]["message"]
