"""Overlap and lateness (issue 13) through a real `runonce serve` process, against the fakes of
Workflows, Cloud Run and Cloud Build, whose executions run until the test finishes them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.cloud_build import GET_BUILD
from tests.fakes.cloud_run import GET as GET_EXECUTION
from tests.fakes.workflows import GET as GET_WORKFLOW_EXECUTION
from tests.support.procs import REPO, ServerProcess, start_server

from .harness import LOCATION, PROJECT, Adapter, deliver, new_schedule_time, routes_config, run_record, server_env

pytestmark = pytest.mark.e2e

STATE_READ = {"workflows": GET_WORKFLOW_EXECUTION, "cloud_run_job": GET_EXECUTION, "cloud_build_trigger": GET_BUILD}
MAX_LATENESS = 600


def guarded_routes() -> dict[str, Any]:
    """Each adapter's route twice more: `ROUTE-skip` and `ROUTE-wait`; and `etl-late`."""
    routes = routes_config()["routes"]
    guarded = {}
    for name, route in routes.items():
        guarded[f"{name}-skip"] = {**route, "overlap": "skip"}
        guarded[f"{name}-wait"] = {**route, "overlap": "wait"}
    guarded["etl-late"] = {**routes["etl"], "max_lateness_seconds": MAX_LATENESS}
    return {"routes": guarded}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, metadata, fakes) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("guarded")
    env = {**server_env(tmp, metadata, fakes, guarded_routes()), "RUNONCE_LOG_FORMAT": "json"}
    proc = start_server(env, tmp)
    yield proc
    proc.stop()


def processed(server: ServerProcess, adapter: Adapter, route: str) -> str:
    """Deliver a fresh run that dispatches (every execution before it done): its execution."""
    for created in list(adapter.fake.created):
        adapter.fake.finish(created.resource)
    response = deliver(server.url, route, new_schedule_time())
    assert response.status_code == 200 and response.json()["status"] == "processed", response.text
    return response.json()["target"]["resource"]


def access_line(server: ServerProcess, run_id: str, outcome: str) -> dict[str, Any]:
    lines = [json.loads(line) for line in server.output().splitlines() if line.startswith("{")]
    return next(line for line in lines if line.get("run_id") == run_id and line.get("outcome") == outcome)


def test_skip_while_the_previous_execution_runs_then_dispatch_once_it_is_done(guarded, adapter: Adapter) -> None:
    route = f"{adapter.route}-skip"
    previous = processed(guarded, adapter, route)

    when = new_schedule_time()
    skipped = deliver(guarded.url, route, when)
    assert skipped.status_code == 200, skipped.text
    body = skipped.json()
    assert (body["status"], body["reason"]) == ("skipped", "overlap")
    assert f"previous execution {previous} is still running" in body["message"]
    assert "target" not in body and adapter.executions_for(body["run_id"]) == []
    record = run_record(guarded.url, body["run_id"])
    assert record["status"] == "skipped" and record["last_error"] == f"overlap: {body['message']}"
    line = access_line(guarded, body["run_id"], "skipped")
    assert (line["reason"], line["http_status"]) == ("overlap", 200)

    adapter.fake.finish(previous)
    retry = deliver(guarded.url, route, when)  # the same run again: its recorded outcome, not a dispatch
    assert retry.status_code == 200 and retry.headers["Runonce-Replayed"] == "true"
    assert retry.json() == body

    after = deliver(guarded.url, route, new_schedule_time())
    assert after.status_code == 200 and after.json()["status"] == "processed", after.text
    assert adapter.executions_for(after.json()["run_id"]) == [after.json()["target"]["resource"]]


def test_wait_answers_409_until_the_previous_execution_is_done(guarded, adapter: Adapter) -> None:
    route = f"{adapter.route}-wait"
    previous = processed(guarded, adapter, route)

    when = new_schedule_time()
    waiting = deliver(guarded.url, route, when)
    assert waiting.status_code == 409, waiting.text
    assert waiting.json()["status"] == "waiting"
    assert waiting.headers["Retry-After"] == "10"
    assert f"previous execution {previous} is still running" in waiting.json()["error"]["message"]
    run_id = waiting.json()["run_id"]
    assert run_record(guarded.url, run_id)["status"] == "failed"  # released: the retry decides at once
    assert adapter.executions_for(run_id) == []
    assert access_line(guarded, run_id, "waiting")["http_status"] == 409

    adapter.fake.finish(previous)
    retry = deliver(guarded.url, route, when)
    assert retry.status_code == 200 and retry.json()["status"] == "processed", retry.text
    assert adapter.executions_for(run_id) == [retry.json()["target"]["resource"]]


@pytest.mark.parametrize("policy", ["skip", "wait"])
def test_a_state_read_that_fails_waits_for_both_policies(guarded, adapter: Adapter, policy: str) -> None:
    route = f"{adapter.route}-{policy}"
    previous = processed(guarded, adapter, route)
    adapter.fake.fail(STATE_READ[adapter.type], "PERMISSION_DENIED", "Permission denied on the execution")

    when = new_schedule_time()
    response = deliver(guarded.url, route, when)
    assert response.status_code == 409, response.text
    assert response.json()["status"] == "waiting" and response.headers["Retry-After"] == "10"
    message = response.json()["error"]["message"]
    assert f"cannot tell whether {previous} still runs" in message and "Permission denied on the execution" in message
    assert run_record(guarded.url, response.json()["run_id"])["status"] == "failed"
    assert adapter.executions_for(response.json()["run_id"]) == []

    adapter.fake.finish(previous)  # readable again, and done: the retry dispatches
    retry = deliver(guarded.url, route, when)
    assert retry.status_code == 200 and retry.json()["status"] == "processed", retry.text


def _ago(seconds: float) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_late_run_is_skipped_and_its_retries_replay_the_skip(guarded, fakes) -> None:
    workflows = fakes["workflows"]
    when = _ago(MAX_LATENESS + 120)
    late = deliver(guarded.url, "etl-late", when)
    assert late.status_code == 200, late.text
    body = late.json()
    assert (body["status"], body["reason"]) == ("skipped", "late")
    assert (
        f"after its schedule time {when}" in body["message"]
        and f"max_lateness_seconds ({MAX_LATENESS})" in body["message"]
    )
    assert workflows.created_for(body["run_id"]) == []
    assert run_record(guarded.url, body["run_id"])["status"] == "skipped"
    assert access_line(guarded, body["run_id"], "skipped")["reason"] == "late"

    for _ in range(2):
        retry = deliver(guarded.url, "etl-late", when)
        assert retry.status_code == 200 and retry.headers["Runonce-Replayed"] == "true"
        assert retry.json() == body
    assert workflows.created_for(body["run_id"]) == []

    on_time = deliver(guarded.url, "etl-late", _ago(5))
    assert on_time.status_code == 200 and on_time.json()["status"] == "processed", on_time.text
    assert len(workflows.created_for(on_time.json()["run_id"])) == 1


def test_skipped_runs_are_counted_by_route_and_reason(guarded) -> None:
    deliver(guarded.url, "etl-late", _ago(MAX_LATENESS * 3))
    metrics = httpx.get(f"{guarded.url}/metrics", timeout=10).text
    assert 'runonce_runs_skipped_total{reason="late",route="etl-late"}' in metrics
    assert 'runonce_deliveries_total{outcome="skipped",route="etl-late"}' in metrics


@pytest.mark.parametrize(("target", "policy"), [("http", "skip"), ("log", "wait")])
def test_overlap_on_a_target_that_cannot_read_state_stops_start_up(tmp_path: Path, target: str, policy: str) -> None:
    block = {"type": "log"} if target == "log" else {"type": "http", "url": "https://example.test/run"}
    routes = {
        "routes": {
            "pinger": {"target": block, "overlap": policy, "namespace": {"project": PROJECT, "location": LOCATION}}
        }
    }
    routes_file = tmp_path / "routes.json"
    routes_file.write_text(json.dumps(routes))
    env = {
        "RUNONCE_AUTH": "none",
        "RUNONCE_STORE": f"sqlite:///{tmp_path / 'r.db'}",
        "RUNONCE_ROUTES_FILE": str(routes_file),
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [sys.executable, "-m", "runonce.cli", "serve", "--port", "0"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert f"routes file {routes_file}: route 'pinger': overlap '{policy}'" in output
    assert f"a '{target}' target cannot tell" in output
    assert "Traceback" not in output
