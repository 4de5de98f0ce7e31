"""The log fields the dashboard and the alerts count (docs/operating.md): `lateness_seconds` and
`target_type` on the delivery line, and the audit's `unresolved` lines; and terraform's log-metric
filters (terraform/log_metrics.tf) matched against the lines runonce really writes. In process,
real SQLite store, the JSON formatter Cloud Run uses; the clock is the test's."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from runonce.api.answers import ANSWERS, INTERNAL_ERROR, SUCCESSES
from runonce.api.main import create_app
from runonce.logs import JsonFormatter
from runonce.missed.audit import body_sha256
from runonce.settings import Settings
from runonce.stores import Finish, NewRun
from runonce.stores.base import COMPLETED, IN_PROGRESS
from runonce.stores.sqlite import SQLiteStore
from runonce.targets import DispatchRequest, TargetFailed, TargetOutcomeUnknown, TargetThrottled
from runonce.targets.scripted import ScriptedTarget

REPO = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 3, 8, 12, 0, 42, 500000, tzinfo=UTC)
LEASE = timedelta(seconds=300)
ROUTES = """
routes:
  nightly: {target: {type: log}, namespace: {project: proj-1, location: us-central1}}
"""
NAMESPACE = "?project=proj-1&location=us-central1"


class Lines(logging.Handler):
    """Every line runonce logs, as Cloud Logging would receive it (JsonFormatter's JSON)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.entries: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.entries.append(json.loads(self.format(record)))

    def outcomes(self, outcome: str) -> list[dict[str, Any]]:
        return [e for e in self.entries if e.get("outcome") == outcome]


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler = Lines()
    root = logging.getLogger("runonce")
    root.addHandler(handler)
    previous = root.level
    root.setLevel(logging.INFO)
    yield handler
    root.removeHandler(handler)
    root.setLevel(previous)


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, SQLiteStore]]:
    store = SQLiteStore(str(tmp_path / "runs.db"))
    asgi = create_app(
        Settings(routes=ROUTES, auth="none", lease_seconds=LEASE.total_seconds()), store=store, clock=lambda: NOW
    )
    async with (
        asgi.router.lifespan_context(asgi),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://runonce") as client,
    ):
        yield client, store


def scheduler(job: str, schedule_time: str) -> dict[str, str]:
    return {"X-CloudScheduler-JobName": job, "X-CloudScheduler-ScheduleTime": schedule_time}


async def test_a_scheduled_delivery_line_carries_its_lateness_and_target_type(app, lines: Lines) -> None:
    client, _ = app
    late = await client.post(f"/v1/routes/nightly:run{NAMESPACE}", headers=scheduler("etl", "2026-03-08T12:00:00Z"))
    forced = await client.post(
        f"/v1/routes/nightly:run{NAMESPACE}", headers=scheduler("etl", "2026-03-08T13:00:00Z")
    )  # an hour ahead of receipt: a force run, never late
    tasks = await client.post(
        f"/v1/routes/nightly:run{NAMESPACE}",
        headers={"X-CloudTasks-QueueName": "q", "X-CloudTasks-TaskName": "t1"},
    )
    assert [r.status_code for r in (late, forced, tasks)] == [200, 200, 200]
    delivered = [e for e in lines.entries if e.get("logger") == "runonce.access"]
    assert [e["outcome"] for e in delivered] == ["processed", "processed", "processed"]
    assert delivered[0]["lateness_seconds"] == 42.5
    assert "lateness_seconds" not in delivered[1] and "lateness_seconds" not in delivered[2]
    assert {e["target_type"] for e in delivered} == {"log"}


async def claim(store: SQLiteStore, run_id: str, at: datetime) -> Any:
    new = NewRun(
        run_id=run_id,
        route="nightly",
        source="scheduler",
        project="proj-1",
        location="us-central1",
        job="etl",
        schedule_time="2026-03-08T11:00:00Z",
        task=None,
        body_sha256=body_sha256({}),
    )
    return await store.claim(new, at, LEASE, timedelta(days=1))


async def test_each_audit_reports_runs_left_in_progress_three_leases_after_their_latest_attempt(
    app, lines: Lines
) -> None:
    client, store = app
    stuck = await claim(store, "a" * 64, NOW - 3 * LEASE)  # outcome unknown, three leases ago
    await store.finish(stuck, Finish(IN_PROGRESS, last_error="unknown: timeout"), NOW - 3 * LEASE)
    recent = await claim(store, "b" * 64, NOW - 2 * LEASE)  # lease ran out, but a retry may still come
    await store.finish(recent, Finish(IN_PROGRESS, last_error="unknown: timeout"), NOW - 2 * LEASE)
    done = await claim(store, "c" * 64, NOW - 5 * LEASE)
    await store.finish(done, Finish(COMPLETED, target={"type": "log", "resource": "log/c"}), NOW - 5 * LEASE)

    audit = await client.post(
        f"/v1/audit:run{NAMESPACE}", headers=scheduler("runonce-audit", "2026-03-08T12:00:00Z"), json={"since": "10m"}
    )
    assert audit.status_code == 200, audit.text
    [line] = lines.outcomes("unresolved")
    assert (line["run_id"], line["route"], line["status"]) == ("a" * 64, "nightly", "in_progress")
    assert line["age_seconds"] == 900 and line["severity"] == "WARNING" and line["logger"] == "runonce.audit"
    assert line["logging.googleapis.com/labels"] == {"run_id": "a" * 64, "route": "nightly"}


# --- terraform's filters against these lines ------------------------------------------------------

_TERM = re.compile(r'^(?P<field>[\w.]+)(?:(?P<has>:\*)|(?P<op>=|>)(?P<value>"[^"]*"|\d+))$')


def log_metric_filters() -> dict[str, list[str]]:
    """Each google_logging_metric's filter lines after the service's own two, from log_metrics.tf."""
    source = (REPO / "terraform" / "log_metrics.tf").read_text()
    delivery = ['jsonPayload.logger="runonce.access"', "jsonPayload.outcome:*"]
    filters = {}
    for name, body in re.findall(r'resource "google_logging_metric" "(\w+)" \{(.*?)\n\}', source, re.S):
        match = re.search(r'filter\s+= (?:"(.*)"|(local\.delivery_logs))\n', body)
        if match is None:
            continue
        text = match.group(1) or "${local.delivery_logs}"
        text = text.replace('\\"', '"').replace("\\n", "\n")
        text = text.replace("${local.delivery_logs}", "\n".join(delivery) + "\n")
        filters[name] = [t for t in text.replace("${local.service_logs}", "").splitlines() if t]
    assert filters
    return filters


def matches(entry: dict[str, Any], terms: list[str]) -> bool:
    """A Logging filter of one term per line (`a.b="v"`, `a.b:*`, `a.b>1`), ANDed, on `jsonPayload`."""
    for term in terms:
        found = _TERM.match(term)
        assert found is not None, f"not a simple term: {term}"
        value: Any = {"jsonPayload": entry}
        for part in found["field"].split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if found["has"]:
            if value is None:
                return False
        elif found["op"] == "=":
            if str(value) != found["value"].strip('"'):
                return False
        elif not (isinstance(value, (int, float)) and value > int(found["value"])):
            return False
    return True


async def test_terraforms_log_metrics_count_the_lines_runonce_writes(app, lines: Lines) -> None:
    client, store = app
    await client.post(f"/v1/routes/nightly:run{NAMESPACE}", headers=scheduler("etl", "2026-03-08T12:00:00Z"))
    again = await claim(store, "d" * 64, NOW - 4 * LEASE)  # an attempt whose outcome was lost...
    await store.finish(again, Finish(IN_PROGRESS), NOW - 4 * LEASE)
    await client.post(
        f"/v1/audit:run{NAMESPACE}", headers=scheduler("runonce-audit", "2026-03-08T12:00:00Z"), json={"since": "10m"}
    )
    filters = log_metric_filters()
    simple = ("deliveries", "lateness", "recovered_failures", "unresolved_runs")  # one term per line
    counted = {name: [e for e in lines.entries if matches(e, filters[name])] for name in simple}
    deliveries = [e for e in lines.entries if e.get("logger") == "runonce.access"]
    assert counted["deliveries"] == deliveries and len(deliveries) == 2  # the run's, the audit's
    assert [e["lateness_seconds"] for e in counted["lateness"]] == [42.5]
    assert [e["run_id"] for e in counted["unresolved_runs"]] == ["d" * 64]
    assert counted["recovered_failures"] == []  # both first attempts


def test_no_filter_looks_in_json_payload_for_a_field_cloud_logging_lifts_out_of_it() -> None:
    """Cloud Logging moves `httpRequest`, `severity`, `message`, `time` and `logging.googleapis.com/*`
    of a structured line into the LogEntry itself: a filter must name them there, or match nothing."""
    lifted = ("httpRequest", "severity", "message", "time", "logging.googleapis.com")
    for name in ("log_metrics.tf", "alerts.tf", "audit.tf", "dashboard.json"):
        source = (REPO / "terraform" / name).read_text()
        for field in lifted:
            assert f"jsonPayload.{field}" not in source, (name, field)
    assert "httpRequest.status>=500" in (REPO / "terraform" / "log_metrics.tf").read_text()


# --- the outcome list and the target-failures alert against a history the server really answers ---


def test_terraforms_outcome_list_is_every_outcome_a_delivery_line_carries() -> None:
    source = (REPO / "terraform" / "variables.tf").read_text()
    block = source[source.index('variable "log_based_metric_outcomes"') :]
    listed = re.findall(r'"(\w+)"', block[block.index("contains(") : block.index("], outcome")])
    written = {answer.status for answer in (*SUCCESSES, *ANSWERS.values())} | {INTERNAL_ERROR}
    assert sorted(listed) == sorted(written) and len(listed) == len(set(listed))
    assert {"skipped", "waiting"} <= set(listed)


ETL_ROUTES = """
routes:
  etl:
    target: {type: cloud_run_job, job: projects/proj-1/locations/us-central1/jobs/etl}
    namespace: {project: proj-1, location: us-central1}
    overlap: wait
"""


class History:
    """Route `etl` on a scripted target whose answer per fire time is queued: each delivery of that
    fire time takes the next one (`processed` when none is left). The clock is the test's."""

    def __init__(self) -> None:
        self.now = NOW
        self.answers: dict[str, list[str]] = {}
        self.state_unreadable = False
        self.target = ScriptedTarget(self._dispatch, self._reconcile, self._running)

    async def _dispatch(self, request: DispatchRequest) -> str:
        queued = self.answers.get(request.schedule_time or "", [])
        answer = queued.pop(0) if queued else "processed"
        if answer == "throttled":
            raise TargetThrottled("429 slow down", 1)
        if answer == "failed":
            raise TargetFailed("HTTP 400 bad request")
        if answer == "unknown":
            raise TargetOutcomeUnknown("timeout after sending")
        return f"executions/{request.run_id[:8]}"

    async def _reconcile(self, request: DispatchRequest) -> str | None:
        return f"executions/{request.run_id[:8]}"  # the unknown attempt did create it

    async def _running(self, resource: str) -> bool:
        if self.state_unreadable:
            raise TargetOutcomeUnknown("cannot read the execution's state")
        return False


@pytest.fixture
async def history(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, History]]:
    story = History()
    asgi = create_app(
        Settings(routes=ETL_ROUTES, auth="none", lease_seconds=LEASE.total_seconds()),
        store=SQLiteStore(str(tmp_path / "runs.db")),
        targets={"etl": story.target},
        clock=lambda: story.now,
    )
    async with (
        asgi.router.lifespan_context(asgi),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://runonce") as client,
    ):
        yield client, story


async def deliver(client: httpx.AsyncClient, fire: str) -> int:
    answer = await client.post(f"/v1/routes/etl:run{NAMESPACE}", headers=scheduler("etl", fire))
    return answer.status_code


def alert_values(entries: list[dict[str, Any]]) -> dict[str, float]:
    """target_failures' query evaluated per route over `entries` (all inside its hour), with the
    metrics its locals name counted by terraform's own filters."""
    alerts = (REPO / "terraform" / "alerts.tf").read_text()
    failed_metric = re.search(r'promql_failed\s+= "(.*)"', alerts)[1].replace('\\"', '"')  # type: ignore[index]
    recovered_metric = re.search(r'promql_recovered\s+= "(.*)"', alerts)[1].replace('\\"', '"')  # type: ignore[index]
    assert 'user_runonce_deliveries{outcome="failed"' in failed_metric
    assert recovered_metric.startswith("logging_googleapis_com:user_runonce_recovered_failures{")
    query = alerts[alerts.index('resource "google_monitoring_alert_policy" "target_failures"') :]
    query = " ".join(query[query.index("query") : query.index("EOT\n", query.index("<<-EOT") + 6)].split())
    assert (
        "(sum by (route) (increase(${local.promql_failed}[1h])) - on (route) sum by (route) "
        "(increase(${local.promql_recovered}[1h]))) or sum by (route) (increase(${local.promql_failed}[1h]))"
    ) in query, query
    filters = log_metric_filters()
    failed: dict[str, float] = {}
    recovered: dict[str, float] = {}
    for entry in entries:
        if matches(entry, filters["deliveries"]) and entry["outcome"] == "failed":
            failed[entry["route"]] = failed.get(entry["route"], 0) + 1
        if matches(entry, filters["recovered_failures"]):
            recovered[entry["route"]] = recovered.get(entry["route"], 0) + 1
    return {route: count - recovered.get(route, 0) for route, count in failed.items()}


async def test_recovered_throttled_unknown_and_waiting_runs_do_not_hide_a_failed_one(history, lines: Lines) -> None:
    """Beside one run that failed for good: runs that answered 429, 504 and 409 waiting before a
    retry completed them, and one whose failure a retry made good. Before, each retried success
    subtracted all its earlier attempts (4 here) from the route's 2 failed answers: no alert."""
    client, story = history
    story.answers = {
        "2026-03-08T10:00:00Z": ["throttled"],
        "2026-03-08T10:05:00Z": ["unknown"],
        "2026-03-08T10:15:00Z": ["failed", "failed", "failed"],  # never made good
        "2026-03-08T10:20:00Z": ["failed"],  # made good by its retry
    }
    assert await deliver(client, "2026-03-08T10:00:00Z") == 429
    assert await deliver(client, "2026-03-08T10:00:00Z") == 200
    assert await deliver(client, "2026-03-08T10:05:00Z") == 504
    story.now += LEASE + timedelta(seconds=1)  # the unknown attempt's lease ends: the retry reconciles
    assert await deliver(client, "2026-03-08T10:05:00Z") == 200
    story.state_unreadable = True  # overlap: wait cannot read the previous execution's state
    assert await deliver(client, "2026-03-08T10:10:00Z") == 409
    story.state_unreadable = False
    assert await deliver(client, "2026-03-08T10:10:00Z") == 200
    for _ in range(3):
        assert await deliver(client, "2026-03-08T10:15:00Z") == 502
    assert await deliver(client, "2026-03-08T10:20:00Z") == 502
    assert await deliver(client, "2026-03-08T10:20:00Z") == 200

    delivered = [e for e in lines.entries if e.get("logger") == "runonce.access"]
    assert [e["outcome"] for e in delivered] == [
        "throttled", "processed", "unknown", "processed", "waiting", "processed",
        "failed", "failed", "failed", "failed", "processed",
    ]  # fmt: skip
    assert [e["attempt"] for e in delivered if e["outcome"] == "processed"] == [2, 2, 2, 2]
    assert [bool(e.get("recovered_failure")) for e in delivered if e["outcome"] == "processed"] == [
        False, False, False, True,
    ]  # fmt: skip
    assert alert_values(delivered) == {"etl": 3}  # the three failed answers of 10:15
    assert alert_values(delivered[:6] + delivered[9:]) == {"etl": 0}  # without it: every failure made good
