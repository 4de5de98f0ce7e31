"""Pub/Sub push and CloudEvents routes through a real `runonce serve`, to every target type's fake:
each documented kind of duplicate (the same messageId, the same ce-id in either mode, one Cloud
Storage event under several message or event ids), delivered at once, is one execution."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.fakes.batch import FakeBatch
from tests.fakes.bigquery import FakeBigQuery
from tests.fakes.cloud_tasks import FakeCloudTasks
from tests.fakes.metadata import FakeMetadataServer
from tests.support.downstream import Downstream
from tests.support.events import (
    binary,
    cloudevent,
    envelope,
    storage_event,
    storage_notification,
    storage_object,
    structured,
)
from tests.support.procs import ServerProcess, start_server

from .harness import JOB, LOCATION, PROJECT, TRIGGER, WORKFLOW, server_env
from .run_named import TYPES

pytestmark = pytest.mark.e2e

STORM = 6
QUEUE = f"projects/{PROJECT}/locations/{LOCATION}/queues/events"
PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
BATCH_BODY = {
    "taskGroups": [{"taskSpec": {"runnables": [{"container": {"imageUri": "gcr.io/p/etl:1"}}]}}],
    "labels": {"runonce-run-id": "${run_id:63}"},
}


@dataclass
class Kind:
    """One target type: its target block and how to count the executions a run_id created."""

    type: str
    target: dict[str, Any]
    executions: Callable[[str], int]


@pytest.fixture(scope="module")
def others(metadata: FakeMetadataServer) -> Iterator[dict[str, Any]]:
    """The fakes the Google targets' conftest does not start: the batch workloads, BigQuery, an HTTP downstream."""
    started: dict[str, Any] = {name: kind.make_fake(metadata) for name, kind in TYPES.items()}
    started["bigquery_job"] = FakeBigQuery(metadata)
    started["cloud_tasks_task"] = FakeCloudTasks(metadata)
    started["cloud_tasks_task"].add_queue(QUEUE)
    started["google_api"] = FakeBatch(metadata)
    with Downstream() as downstream:
        started["http"] = downstream
        yield started
        for name, fake in started.items():
            if name != "http":
                fake.close()


@pytest.fixture(scope="module")
def kinds(fakes, others) -> dict[str, Kind]:
    http = others["http"]
    found = {
        "workflows": Kind(
            "workflows", {"type": "workflows", "workflow": WORKFLOW}, lambda r: len(fakes["workflows"].created_for(r))
        ),
        "cloud_run_job": Kind(
            "cloud_run_job", {"type": "cloud_run_job", "job": JOB}, lambda r: len(fakes["cloud_run_job"].created_for(r))
        ),
        "cloud_build_trigger": Kind(
            "cloud_build_trigger",
            {"type": "cloud_build_trigger", "trigger": TRIGGER, "branch": "main"},
            lambda r: len(fakes["cloud_build_trigger"].created_for(r)),
        ),
        "bigquery_job": Kind(
            "bigquery_job",
            {
                "type": "bigquery_job",
                "project": PROJECT,
                "location": "EU",
                "configuration": {"query": {"query": "SELECT 1"}},
            },
            lambda r: len(others["bigquery_job"].created_for(r)),
        ),
        "http": Kind(
            "http", {"type": "http", "url": f"{http.url}/events"}, lambda r: http.keys.get("/events", []).count(r)
        ),
        "cloud_tasks_task": Kind(
            "cloud_tasks_task",
            {"type": "cloud_tasks_task", "queue": QUEUE, "http_request": {"url": "https://worker.example.com/run"}},
            lambda r: len(others["cloud_tasks_task"].created_for(r)),
        ),
        "google_api": Kind(
            "google_api",
            {
                "type": "google_api",
                "api": "batch.v1",
                "method": "projects.locations.jobs.create",
                "params": {"parent": PARENT, "jobId": "r${run_id:62}"},
                "body": BATCH_BODY,
                "reconcile": {
                    "method": "projects.locations.jobs.get",
                    "params": {"name": f"{PARENT}/jobs/r${{run_id:62}}"},
                },
                "endpoint": others["google_api"].url,
            },
            lambda r: len(others["google_api"].created_with_id("r" + r[:62])),
        ),
    }
    for name, kind in TYPES.items():
        found[name] = Kind(name, kind.target, lambda r, fake=others[name]: len(fake.created_for(r[:63])))
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory, metadata, fakes, others, kinds) -> Iterator[ServerProcess]:
    routes = {}
    for name, kind in kinds.items():
        routes[f"ps-{name}"] = {"target": kind.target, "source": "pubsub"}
        routes[f"ce-{name}"] = {"target": kind.target, "source": "cloudevents"}
    tmp = tmp_path_factory.mktemp("runonce-sources")
    env = server_env(tmp, metadata, fakes, routes={"routes": routes})
    env.update({TYPES[name].endpoint_variable: others[name].url for name in TYPES})
    env["RUNONCE_BIGQUERY_ENDPOINT"] = others["bigquery_job"].url
    env["RUNONCE_CLOUDTASKS_ENDPOINT"] = others["cloud_tasks_task"].url
    proc = start_server(env, tmp)
    yield proc
    proc.stop()


@pytest.fixture(
    params=[
        "workflows",
        "cloud_run_job",
        "cloud_build_trigger",
        "bigquery_job",
        "http",
        "cloud_tasks_task",
        "google_api",
        *sorted(TYPES),
    ]
)
def kind(request: pytest.FixtureRequest, kinds) -> Kind:
    return kinds[request.param]


_ids = itertools.count(1)


async def _post_all(url: str, requests: list[tuple[dict[str, str], bytes]]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=len(requests))) as client:
        return await asyncio.gather(*(client.post(url, headers=h, content=b) for h, b in requests))


def _settle(url: str, request: tuple[dict[str, str], bytes]) -> httpx.Response:
    """Redeliver as Pub/Sub would after a nack, until the run is done."""
    for _ in range(50):
        response = httpx.post(url, headers=request[0], content=request[1], timeout=30)
        if response.status_code == 200:
            return response
        assert response.status_code == 409, response.text
        asyncio.run(asyncio.sleep(0.1))
    raise AssertionError(f"never settled: {response.text}")


def _one_execution(server: ServerProcess, route: str, kind: Kind, requests: list[tuple[dict[str, str], bytes]]) -> str:
    url = f"{server.url}/v1/routes/{route}:run"
    storm = asyncio.run(_post_all(url, requests))
    assert {r.status_code for r in storm} <= {200, 409}, [r.text for r in storm]
    assert len({r.json()["run_id"] for r in storm}) == 1
    final = _settle(url, requests[-1])
    run_id = final.json()["run_id"]
    assert final.json()["status"] in ("processed", "duplicate")
    assert kind.executions(run_id) == 1, f"{kind.type}: {kind.executions(run_id)} executions of {run_id}"
    return run_id


def _push(body: dict[str, Any]) -> tuple[dict[str, str], bytes]:
    return {"content-type": "application/json"}, json.dumps(body).encode()


def test_pubsub_redeliveries_and_one_storage_event_under_several_ids_are_one_execution(server, kind: Kind) -> None:
    message_id = f"m{next(_ids)}"
    _one_execution(server, f"ps-{kind.type}", kind, [_push(envelope(message_id))] * STORM)
    obj = storage_object(generation=str(1700000000000000 + next(_ids)))
    notifications = [_push(storage_notification(f"s{next(_ids)}", obj=obj)) for _ in range(STORM)]
    _one_execution(server, f"ps-{kind.type}", kind, notifications)


def test_cloudevents_in_both_modes_and_one_storage_event_under_several_ids_are_one_execution(
    server, kind: Kind
) -> None:
    event = cloudevent(f"e{next(_ids)}")
    _one_execution(server, f"ce-{kind.type}", kind, [binary(event), structured(event)] * (STORM // 2))
    obj = storage_object(generation=str(1700000000000000 + next(_ids)))
    events = [(binary if n % 2 else structured)(storage_event(f"g{next(_ids)}", obj=obj)) for n in range(STORM)]
    _one_execution(server, f"ce-{kind.type}", kind, events)


def test_the_message_reaches_an_http_target_with_the_run_id(server, others) -> None:
    message_id = f"m{next(_ids)}"
    body = envelope(message_id, attributes={"k": "v"})
    response = httpx.post(f"{server.url}/v1/routes/ps-http:run", json=body, timeout=30)
    assert response.json()["status"] == "processed", response.text
    run_id = response.json()["run_id"]
    [sent] = [b for b in others["http"].bodies["/events"] if b["run_id"] == run_id]
    assert sent["source"] == "pubsub"
    assert sent["task"] == message_id
    assert sent["payload"]["data"] == {"order": 7}
    assert sent["payload"]["attributes"] == {"k": "v"}
