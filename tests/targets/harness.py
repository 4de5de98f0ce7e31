"""Helpers of the Google targets' end-to-end tests: a real `runonce serve` process with a SQLite
store, and fakes at the network edge where Google's servers would be (Workflows gRPC, Cloud Run and
Cloud Build REST, the metadata server for ADC). Lease 4 s and dispatch timeout 2 s, so waiting for
a lease to expire costs seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from runonce.targets import DispatchRequest
from tests.fakes.google_api import Created, FakeGoogleApi
from tests.fakes.metadata import FakeMetadataServer
from tests.support.procs import ServerProcess

LEASE_SECONDS = 4
DISPATCH_TIMEOUT_SECONDS = 2
PROJECT = "runonce-test"
LOCATION = "us-central1"
WORKFLOW = f"projects/{PROJECT}/locations/{LOCATION}/workflows/etl"
JOB = f"projects/{PROJECT}/locations/{LOCATION}/jobs/nightly"
TRIGGER = f"projects/{PROJECT}/locations/{LOCATION}/triggers/nightly-build"


@dataclass
class Adapter:
    """One target type under test: its route, its fake, and the fake's names for its calls."""

    type: str
    route: str
    fake: FakeGoogleApi
    create: str  # the call that creates an execution
    lookup: str  # the listing that reconciliation uses

    def executions_for(self, run_id: str) -> list[str]:
        return self.fake.created_for(run_id)


def request_for(name: str, payload: dict | None = None) -> DispatchRequest:
    """A run of its own for each `name`, as an adapter receives it."""
    return DispatchRequest(
        run_id=hashlib.sha256(name.encode()).hexdigest(),
        route="r",
        job="nightly-job",
        schedule_time="2026-10-16T12:00:00Z",
        source="scheduler",
        payload=payload or {},
    )


def routes_config() -> dict[str, Any]:
    namespace = {"project": PROJECT, "location": LOCATION}
    return {
        "routes": {
            "etl": {
                "target": {
                    "type": "workflows",
                    "workflow": WORKFLOW,
                    "argument": {"mode": "full"},
                    "labels": {"team": "data"},
                },
                "namespace": namespace,
            },
            "nightly": {"target": {"type": "cloud_run_job", "job": JOB, "args": ["--all"]}, "namespace": namespace},
            "build": {
                "target": {"type": "cloud_build_trigger", "trigger": TRIGGER, "branch": "main"},
                "namespace": namespace,
            },
        }
    }


def server_env(
    tmp_path: Path,
    metadata: FakeMetadataServer,
    fakes: dict[str, Any],
    routes: dict[str, Any] | None = None,
    db: str = "runonce.db",
) -> dict[str, str]:
    routes_file = tmp_path / "routes.json"
    routes_file.write_text(json.dumps(routes or routes_config()))
    gcloud_config = tmp_path / "gcloud"
    gcloud_config.mkdir(exist_ok=True)
    return {
        **metadata.env(),
        "CLOUDSDK_CONFIG": str(gcloud_config),  # no developer ADC file may stand in for the metadata server
        "RUNONCE_AUTH": "none",
        "RUNONCE_STORE": f"sqlite:///{tmp_path / db}",
        "RUNONCE_ROUTES_FILE": str(routes_file),
        "RUNONCE_LEASE_SECONDS": str(LEASE_SECONDS),
        "RUNONCE_DISPATCH_TIMEOUT_SECONDS": str(DISPATCH_TIMEOUT_SECONDS),
        "RUNONCE_STORE_TIMEOUT_SECONDS": "0.5",  # the lease must cover 2 s + 2 x 0.5 s + 1 s (settings.py)
        "RUNONCE_LOG_FORMAT": "text",
        "RUNONCE_WORKFLOWS_ENDPOINT": fakes["workflows"].url,
        "RUNONCE_RUN_ENDPOINT": fakes["cloud_run_job"].url,
        "RUNONCE_CLOUDBUILD_ENDPOINT": fakes["cloud_build_trigger"].url,
    }


_schedule_counter = iter(range(10**6))


def new_schedule_time() -> str:
    """A schedule time no other test uses: every test delivers its own run."""
    base = datetime(2026, 10, 16, tzinfo=UTC) + timedelta(minutes=next(_schedule_counter))
    return base.strftime("%Y-%m-%dT%H:%M:%SZ")


def deliver(
    base_url: str,
    route: str,
    schedule_time: str,
    *,
    job: str = "nightly-job",
    body: Any = None,
    client: httpx.Client | None = None,
) -> httpx.Response:
    """POST a delivery as Cloud Scheduler would."""
    headers = {"X-CloudScheduler-JobName": job, "X-CloudScheduler-ScheduleTime": schedule_time}
    url = f"{base_url}/v1/routes/{route}:run"
    if client is not None:
        return client.post(url, headers=headers, json=body)
    return httpx.post(url, headers=headers, json=body, timeout=30)


async def storm(base_url: str, route: str, schedule_time: str, count: int) -> list[httpx.Response]:
    """`count` deliveries of one run at once, as Scheduler's retries and a force run might overlap."""
    headers = {"X-CloudScheduler-JobName": "nightly-job", "X-CloudScheduler-ScheduleTime": schedule_time}
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=count)) as client:
        responses = await asyncio.gather(
            *(client.post(f"{base_url}/v1/routes/{route}:run", headers=headers) for _ in range(count))
        )
    return responses


def answers(responses: list[httpx.Response]) -> Counter[str]:
    """How many got each answer: `{"200 processed": 1, "409 in_progress": 40, …}`."""
    return Counter(f"{r.status_code} {r.json()['status']}" for r in responses)


def run_record(base_url: str, run_id: str) -> dict[str, Any]:
    response = httpx.get(f"{base_url}/v1/runs/{run_id}", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def wait_for_lease_expiry(record: dict[str, Any]) -> None:
    """Sleep until the record's lease has run out (the test's one unavoidable wait)."""
    expires = datetime.fromisoformat(record["lease_expires"].replace("Z", "+00:00"))
    left = (expires - datetime.now(UTC)).total_seconds()
    if left > 0:
        time.sleep(left + 0.2)


def kill_9_during_create(server: ServerProcess, fake: FakeGoogleApi, create: str, route: str, when: str) -> Created:
    """Deliver the run at `when` to `server` and kill -9 it while `fake` holds the answer to the
    create it has done, so nothing after the create runs in the proxy. Returns what was created."""
    fake.hold_after_create(create)
    outcome: dict[str, Any] = {}

    def attempt() -> None:
        try:
            outcome["response"] = deliver(server.url, route, when)
        except httpx.HTTPError as exc:
            outcome["error"] = exc

    caller = threading.Thread(target=attempt)
    caller.start()
    assert fake.created_event.wait(20), "the fake API never received the create"
    server.kill()
    fake.release()
    caller.join(10)
    assert "error" in outcome, "the killed proxy cannot have answered"
    return fake.created[-1]
