"""End to end with a third-party Cloud Tasks: the `google-cloud-tasks` client library creates a queue
and HTTP tasks on gcloud-tasks-emulator, which dispatches them to a real `runonce serve` (SQLite),
whose `http` target calls a local downstream. The emulator sends `X-CloudTasks-QueueName` as the
queue's resource name, as some real dispatchers do."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.support.downstream import Downstream
from tests.support.procs import ServerProcess, start_server
from tests.support.tasks_emulator import TasksEmulator, start_tasks_emulator

pytestmark = pytest.mark.e2e

PROJECT, LOCATION, QUEUE_ID = "tasks-project", "europe-west1", "exports"
QUEUE = f"projects/{PROJECT}/locations/{LOCATION}/queues/{QUEUE_ID}"
TASKS = 8


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TasksEmulator, ServerProcess, Downstream]]:
    logs = tmp_path_factory.mktemp("cloud-tasks-e2e")
    with Downstream() as downstream:
        routes = {
            "routes": {
                # no namespace: the queue's resource name brings it
                "exports": {"target": {"type": "http", "url": f"{downstream.url}/exports"}},
            }
        }
        env = {
            "RUNONCE_AUTH": "none",
            "RUNONCE_ROUTES": json.dumps(routes),
            "RUNONCE_STORE": f"sqlite:///{logs / 'runs.db'}",
            "RUNONCE_LOG_FORMAT": "text",
        }
        emulator = start_tasks_emulator(logs)  # first: if it is missing, no server is left running
        try:
            server = start_server(env, logs)
            try:
                yield emulator, server, downstream
            finally:
                server.stop()
        finally:
            emulator.stop()


def http_task(server: ServerProcess, name: str, body: dict, schedule_in: float | None = None):
    from google.cloud import tasks_v2

    task = tasks_v2.Task(
        name=f"{QUEUE}/tasks/{name}",
        http_request=tasks_v2.HttpRequest(
            url=f"{server.url}/v1/routes/exports:run",
            http_method=tasks_v2.HttpMethod.POST,
            headers={"Content-Type": "application/json"},
            body=json.dumps(body).encode(),
        ),
    )
    if schedule_in is not None:  # the emulator's processor leaves it alone until then
        task.schedule_time = datetime.now(UTC) + timedelta(seconds=schedule_in)
    return task


def run_id(task_name: str) -> str:
    canonical = f"runonce/v1|tasks|{PROJECT}|{LOCATION}|exports|{QUEUE_ID}|{task_name}"
    return hashlib.sha256(canonical.encode()).hexdigest()


def wait_until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")


def duplicates_answered(server: ServerProcess) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    line = next(
        (ln for ln in text.splitlines() if ln.startswith("runonce_deliveries_total{") and 'outcome="duplicate"' in ln),
        None,
    )
    return float(line.rsplit(" ", 1)[1]) if line else 0.0


def test_tasks_from_a_cloud_tasks_client_reach_the_downstream_once_and_a_redelivery_is_a_duplicate(
    stack: tuple[TasksEmulator, ServerProcess, Downstream],
) -> None:
    from google.cloud import tasks_v2

    emulator, server, downstream = stack
    client = emulator.client()
    client.create_queue(parent=f"projects/{PROJECT}/locations/{LOCATION}", queue=tasks_v2.Queue(name=QUEUE))
    names = [f"task-{i}" for i in range(TASKS)]
    for i, name in enumerate(names):
        client.create_task(parent=QUEUE, task=http_task(server, name, {"n": i}))

    wait_until(
        lambda: downstream.calls["/exports"] >= TASKS and not list(client.list_tasks(parent=QUEUE)),
        30,
        f"{TASKS} tasks dispatched and acknowledged",
    )

    # every task reached the downstream exactly once, under its own run_id, with its own body
    keys = downstream.keys["/exports"]
    assert sorted(keys) == sorted(run_id(name) for name in names)
    assert sorted(call["payload"]["n"] for call in downstream.bodies["/exports"]) == list(range(TASKS))
    assert {call["task"] for call in downstream.bodies["/exports"]} == set(names)
    for name in names:
        record = httpx.get(f"{server.url}/v1/runs/{run_id(name)}").json()
        assert (record["status"], record["attempts"]) == ("completed", 1)
        assert (record["project"], record["location"], record["job"]) == (PROJECT, LOCATION, QUEUE_ID)

    # Cloud Tasks delivers at least once: the same task delivered again is answered duplicate
    before = duplicates_answered(server)
    client.create_task(parent=QUEUE, task=http_task(server, names[0], {"n": 0}, schedule_in=3600))
    redelivered = client.run_task(name=f"{QUEUE}/tasks/{names[0]}")
    assert redelivered.last_attempt.response_status.code == 200
    assert duplicates_answered(server) == before + 1
    assert downstream.calls["/exports"] == TASKS
    record = httpx.get(f"{server.url}/v1/runs/{run_id(names[0])}").json()
    assert (record["status"], record["attempts"]) == ("completed", 1)
