"""End to end: `runonce audit` and `runonce backfill` (real subprocesses) against the store a real
`runonce serve` writes (SQLite, the Firestore emulator), with Scheduler's deliveries sent over HTTP
and a real local downstream that counts what it receives."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from runonce.missed.audit import ScheduledRun, scheduled_runs
from runonce.routes import parse_routes
from runonce.run.delivery import format_schedule_time
from tests.support.downstream import Downstream
from tests.support.procs import REPO, ServerProcess, start_server, wait_for
from tests.support.stores import FIRESTORE_PROJECT

pytestmark = pytest.mark.e2e

LEASE_SECONDS = 6
DISPATCH_TIMEOUT_SECONDS = 1
NAMESPACE = {"project": "e2e-project", "location": "us-central1"}
BODY = {"mode": "full"}
ROUTE_NAMES = ("holes", "twice", "slow", "cut", "caught", "served")
CATCH_UP = {"caught": "latest"}


def routes_json(downstream: Downstream) -> str:
    return json.dumps(
        {
            "routes": {
                name: {
                    "target": {"type": "http", "url": f"{downstream.url}/{name}"},
                    "namespace": NAMESPACE,
                    "job": f"{name}-job",
                    "schedule": "* * * * *",
                    "time_zone": "Europe/Paris",
                    "body": BODY,
                    "catch_up": CATCH_UP.get(name, "none"),
                }
                for name in ROUTE_NAMES
            }
        }
    )


@pytest.fixture(scope="module")
def downstream() -> Iterator[Downstream]:
    with Downstream() as service:
        yield service


@pytest.fixture(scope="module", params=["sqlite", "firestore"])
def server(
    request: pytest.FixtureRequest, downstream: Downstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    logs = tmp_path_factory.mktemp(f"missed-{request.param}")
    if request.param == "sqlite":
        store_env = {"RUNONCE_STORE": f"sqlite:///{logs / 'runs.db'}", "RUNONCE_STORE_TIMEOUT_SECONDS": "0.5"}
    else:
        emulator = request.getfixturevalue("firestore_emulator")
        store_env = {
            "RUNONCE_STORE": "firestore",
            "RUNONCE_FIRESTORE_PROJECT": FIRESTORE_PROJECT,
            "RUNONCE_FIRESTORE_COLLECTION": f"missed_{uuid.uuid4().hex[:8]}",
            "RUNONCE_STORE_TIMEOUT_SECONDS": "2",
            "FIRESTORE_EMULATOR_HOST": emulator.host,
        }
    env = {
        "RUNONCE_AUTH": "none",
        "RUNONCE_ROUTES": routes_json(downstream),
        "RUNONCE_LOG_FORMAT": "text",
        "RUNONCE_LEASE_SECONDS": str(LEASE_SECONDS),
        "RUNONCE_DISPATCH_TIMEOUT_SECONDS": str(DISPATCH_TIMEOUT_SECONDS),
        **store_env,
    }
    proc = start_server(env, logs)
    yield proc
    proc.stop()


def runonce(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """A `runonce` command with the server's own settings (store, routes), as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "runonce.cli", *args],
        cwd=REPO,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def fire_times(server: ServerProcess, route: str, start: datetime, end: datetime) -> list[ScheduledRun]:
    routes = parse_routes(server.env["RUNONCE_ROUTES"], "test")
    return scheduled_runs({route: routes[route]}, start, end)


def deliver(server: ServerProcess, run: ScheduledRun) -> httpx.Response:
    """Scheduler's delivery of `run`: its job's headers, the namespace in the URL, its body; retried
    on 503 as Scheduler does (the emulator's first requests can be slow)."""
    for _ in range(5):
        response = httpx.post(
            f"{server.url}/v1/routes/{run.route}:run?project={NAMESPACE['project']}&location={NAMESPACE['location']}",
            headers={
                "X-CloudScheduler-JobName": run.delivery.job,
                "X-CloudScheduler-ScheduleTime": run.time.astimezone(run.zone).isoformat(),
            },
            json=BODY,
            timeout=30,
        )
        if response.status_code != 503:
            break
    return response


def minutes_ago(count: int) -> datetime:
    now = datetime.now(UTC)
    return now.replace(second=0, microsecond=0) - timedelta(minutes=count)


def test_the_audit_of_a_store_with_holes_reports_exactly_the_holes(server: ServerProcess) -> None:
    start, end = minutes_ago(12), minutes_ago(1)
    runs = fire_times(server, "holes", start, end)
    holes = {runs[2].run_id, runs[7].run_id}
    for run in runs:
        if run.run_id not in holes:
            assert deliver(server, run).json()["status"] == "processed"

    result = runonce(
        server,
        "audit",
        "--route",
        "holes",
        "--from",
        format_schedule_time(start),
        "--to",
        format_schedule_time(end),
        "--format",
        "json",
    )
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert {run["run_id"] for run in report["missed"]} == holes and report["checked"] == len(runs) == 11
    text = runonce(server, "audit", "--since", "15m")
    assert text.returncode == 1 and {line.split()[-1] for line in text.stdout.splitlines()} >= holes


def test_backfill_twice_executes_once_and_schedulers_delivery_of_a_backfilled_time_is_a_duplicate(
    server: ServerProcess,
    downstream: Downstream,
) -> None:
    start, end = minutes_ago(8), minutes_ago(2)
    runs = fire_times(server, "twice", start, end)
    seen = len(downstream.keys.get("/twice", []))  # the downstream is shared with the other store's run
    already = deliver(server, runs[1])  # Scheduler delivered this one
    assert already.json()["status"] == "processed"
    calls = downstream.calls["/twice"]
    args = (
        "backfill",
        "twice",
        "--from",
        format_schedule_time(start),
        "--to",
        format_schedule_time(end),
        "--format",
        "json",
    )

    dry = runonce(server, *args, "--dry-run")
    assert dry.returncode == 0 and [r["run_id"] for r in json.loads(dry.stdout)["runs"]] == [r.run_id for r in runs]
    assert downstream.calls["/twice"] == calls

    first = runonce(server, *args)
    assert first.returncode == 0, first.stderr
    outcomes = [row["outcome"] for row in json.loads(first.stdout)["runs"]]
    assert outcomes == ["processed", "duplicate", "processed", "processed", "processed", "processed"]
    assert downstream.calls["/twice"] - calls == len(runs) - 1
    assert sorted(downstream.keys["/twice"][seen:]) == sorted(
        run.run_id for run in runs
    )  # Scheduler's run_id, each once
    assert (
        downstream.bodies["/twice"][-1]["payload"] == BODY and downstream.bodies["/twice"][-1]["source"] == "scheduler"
    )

    again = runonce(server, *args)
    assert [row["outcome"] for row in json.loads(again.stdout)["runs"]] == ["duplicate"] * len(runs)
    late = deliver(server, runs[-1])
    assert late.status_code == 200 and late.json()["status"] == "duplicate"
    assert downstream.calls["/twice"] - calls == len(runs) - 1


def live_claims(server: ServerProcess, route: str) -> list[dict]:
    listed = runonce(server, "runs", "list", "--route", route, "--json")
    records = [json.loads(line) for line in listed.stdout.splitlines()]
    now = datetime.now(UTC)
    return [r for r in records if r["status"] == "in_progress" and datetime.fromisoformat(r["lease_expires"]) > now]


def interrupted_backfill(
    server: ServerProcess, downstream: Downstream, route: str, delay: float, signals: int
) -> tuple[int, dict]:
    """Start a backfill of ten runs against a slow downstream, send SIGINT `signals` times once
    the first runs are in flight; its exit code and JSON output."""
    downstream.set(f"/{route}", 200, delay)
    before = downstream.calls[f"/{route}"]
    start = minutes_ago(11)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runonce.cli",
            "backfill",
            route,
            "--from",
            format_schedule_time(start),
            "--to",
            format_schedule_time(start + timedelta(minutes=10)),
            "--concurrency",
            "2",
            "--format",
            "json",
        ],
        cwd=REPO,
        env=server.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: downstream.calls[f"/{route}"] > before, 30, "the first backfilled run", proc)
    for _ in range(signals):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.1)
    out, err = proc.communicate(timeout=60)
    report = json.loads(out) if out else {"stderr": err}
    report["calls"] = downstream.calls[f"/{route}"] - before
    return proc.returncode, report


def test_ctrl_c_starts_no_more_runs_and_leaves_no_claim_held(server: ServerProcess, downstream: Downstream) -> None:
    code, report = interrupted_backfill(server, downstream, "slow", 0.6, signals=1)
    assert code == 130, report
    outcomes = [row["outcome"] for row in report["runs"]]
    assert report["interrupted"] and "not_started" in outcomes and outcomes.count("processed") >= 1
    assert set(outcomes) <= {"processed", "not_started"}  # those in flight finished
    assert live_claims(server, "slow") == []
    assert report["calls"] == outcomes.count("processed")


def test_a_second_ctrl_c_cuts_the_dispatches_short_and_releases_their_claims(
    server: ServerProcess, downstream: Downstream
) -> None:
    code, report = interrupted_backfill(server, downstream, "cut", 30, signals=2)
    assert code == 130, report
    outcomes = [row["outcome"] for row in report["runs"]]
    assert "unknown" in outcomes and "processed" not in outcomes, outcomes
    assert live_claims(server, "cut") == []  # released: the next delivery reconciles at once
    cut = next(row for row in report["runs"] if row["outcome"] == "unknown")
    listed = runonce(server, "runs", "show", cut["run_id"])
    assert json.loads(listed.stdout)["status"] == "in_progress"


def audit_run(server: ServerProcess, at: datetime) -> httpx.Response:
    """The audit job's delivery for schedule time `at` (its body: the job's period)."""
    return httpx.post(
        f"{server.url}/v1/audit:run?project={NAMESPACE['project']}&location={NAMESPACE['location']}",
        headers={
            "X-CloudScheduler-JobName": "runonce-audit",
            "X-CloudScheduler-ScheduleTime": format_schedule_time(at),
        },
        json={"since": "10m"},
        timeout=60,
    )


def caught_run(server: ServerProcess, at: datetime) -> ScheduledRun:
    """The run catch_up: latest dispatches at an audit at `at`: the fire time a minute before."""
    [run] = fire_times(server, "caught", at - timedelta(minutes=1), at - timedelta(seconds=LEASE_SECONDS))
    return run


def test_catch_up_and_a_late_scheduler_delivery_are_one_execution_in_either_order_and_at_once(
    server: ServerProcess,
    downstream: Downstream,
) -> None:
    now = minutes_ago(0)
    before = downstream.calls["/caught"]
    # the audit first, then Scheduler's late retry: a duplicate
    first = audit_run(server, now - timedelta(minutes=2))
    run = caught_run(server, now - timedelta(minutes=2))
    assert first.status_code == 200 and first.json()["status"] == "processed", first.text
    assert [(c["run_id"], c["outcome"]) for c in first.json()["caught_up"]] == [(run.run_id, "processed")]
    assert run.run_id in {m["run_id"] for m in first.json()["missed"]}
    assert deliver(server, run).json()["status"] == "duplicate"
    # Scheduler's late delivery first, then the audit: nothing left to catch up
    run = caught_run(server, now - timedelta(minutes=1))
    assert deliver(server, run).json()["status"] == "processed"
    assert audit_run(server, now - timedelta(minutes=1)).json()["caught_up"] == []
    # both at once, while the target takes a moment
    downstream.set("/caught", 200, 0.5)
    run = caught_run(server, now)
    with ThreadPoolExecutor(2) as pool:
        audited, late = pool.map(lambda send: send(), [lambda: audit_run(server, now), lambda: deliver(server, run)])
    caught = audited.json()["caught_up"]
    if caught:  # the audit found no record yet: its catch-up and the delivery raced for the claim
        assert [c["run_id"] for c in caught] == [run.run_id], audited.text
        assert {caught[0]["outcome"], late.json()["status"]} in (
            {"processed", "in_progress"},
            {"processed", "duplicate"},
        )
    else:  # the delivery's claim came first: the run was not missed
        assert late.json()["status"] == "processed"
    assert downstream.calls["/caught"] - before == 3  # one execution per run
    assert deliver(server, run).json()["status"] == "duplicate"
    assert downstream.calls["/caught"] - before == 3


def test_a_duplicated_audit_delivery_replays_and_catches_up_nothing(
    server: ServerProcess, downstream: Downstream
) -> None:
    at = minutes_ago(3)
    first = audit_run(server, at)
    again = audit_run(server, at)
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    assert again.headers["runonce-replayed"] == "true" and "caught_up" not in again.json()
    assert again.json()["target"] == first.json()["target"] and again.json()["run_id"] == first.json()["run_id"]
    refused = httpx.post(
        f"{server.url}/v1/audit:run",
        json={"since": "soon"},
        timeout=30,
        headers={
            "X-CloudScheduler-JobName": "runonce-audit",
            "X-CloudScheduler-ScheduleTime": format_schedule_time(at),
        },
    )
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "body.since"


def test_the_backfill_endpoint_runs_and_replays_like_the_command(server: ServerProcess, downstream: Downstream) -> None:
    start, end = minutes_ago(6), minutes_ago(3)
    url = f"{server.url}/v1/routes/served:backfill"
    body = {"from": format_schedule_time(start), "to": format_schedule_time(end)}
    dry = httpx.post(url, json={**body, "dry_run": True}, timeout=60).json()
    expected = [run.run_id for run in fire_times(server, "served", start, end)]
    assert [r["run_id"] for r in dry["runs"]] == expected
    before = downstream.calls["/served"]
    first = httpx.post(url, json=body, timeout=60).json()
    again = httpx.post(url, json=body, timeout=60).json()
    assert [r["outcome"] for r in first["runs"]] == ["processed"] * 3 and [r["outcome"] for r in again["runs"]] == [
        "duplicate"
    ] * 3
    assert downstream.calls["/served"] - before == 3
    bad = httpx.post(url, json={**body, "to": "tomorrow"}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "body.to"
    future = httpx.post(url, json={**body, "to": "2999-01-01T00:00:00Z"}, timeout=30)
    assert future.status_code == 400 and future.json()["error"]["field"] == "body.to"
