"""The `cloud_tasks_task` target through a real `runonce serve`, as Cloud Scheduler sees it, against
the fake Cloud Tasks API: the figure that matters is tasks per scheduled run = 1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.cloud_tasks import CREATE, GET, FakeCloudTasks
from tests.fakes.metadata import FakeMetadataServer
from tests.support.procs import ServerProcess, start_server

from .harness import (
    LOCATION,
    PROJECT,
    answers,
    deliver,
    kill_9_during_create,
    new_schedule_time,
    run_record,
    server_env,
    storm,
    wait_for_lease_expiry,
)

pytestmark = pytest.mark.e2e

QUEUE = f"projects/{PROJECT}/locations/{LOCATION}/queues/exports"
URL = "https://export-abc123-uc.a.run.app/run"
INVOKER = f"export-invoker@{PROJECT}.iam.gserviceaccount.com"
ROUTE = "exports"


@pytest.fixture(scope="module")
def tasks(metadata: FakeMetadataServer) -> Iterator[FakeCloudTasks]:
    fake = FakeCloudTasks(metadata)
    fake.add_queue(QUEUE)
    yield fake
    fake.close()


def env_for(tmp: Path, metadata: FakeMetadataServer, fakes: dict, tasks: FakeCloudTasks) -> dict[str, str]:
    target = {
        "type": "cloud_tasks_task",
        "queue": QUEUE,
        "http_request": {"url": URL, "headers": {"X-Team": "data"}, "oidc_token": {"service_account_email": INVOKER}},
    }
    routes = {"routes": {ROUTE: {"target": target, "namespace": {"project": PROJECT, "location": LOCATION}}}}
    return {**server_env(tmp, metadata, fakes, routes), "RUNONCE_CLOUDTASKS_ENDPOINT": tasks.url}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, metadata, fakes, tasks) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("runonce-tasks")
    proc = start_server(env_for(tmp, metadata, fakes, tasks), tmp)
    yield proc
    proc.stop()


@pytest.fixture(autouse=True)
def every_script_used(tasks: FakeCloudTasks) -> Iterator[None]:
    yield
    assert tasks.pending_steps() == 0, "a scripted misbehaviour was never triggered"


def test_one_task_carries_the_run_and_the_retry_replays(server, tasks: FakeCloudTasks) -> None:
    when = new_schedule_time()
    response = deliver(server.url, ROUTE, when, body={"mode": "full"})
    assert response.status_code == 200, response.text
    body = response.json()
    run_id = body["run_id"]
    assert body["status"] == "processed"
    assert body["target"] == {"type": "cloud_tasks_task", "resource": f"{QUEUE}/tasks/{run_id}"}
    delivered = tasks.delivered(body["target"]["resource"])
    assert delivered["headers"] == {"X-Team": "data", "Idempotency-Key": run_id, "Content-Type": "application/json"}
    assert delivered["oidcToken"] == {"serviceAccountEmail": INVOKER}
    assert delivered["body"] == {
        "run_id": run_id,
        "job": "nightly-job",
        "schedule_time": when,
        "source": "scheduler",
        "payload": {"mode": "full"},
    }
    assert run_record(server.url, run_id)["status"] == "completed"

    again = deliver(server.url, ROUTE, when, body={"mode": "full"})
    assert (again.status_code, again.json()["status"], again.headers["Runonce-Replayed"]) == (200, "duplicate", "true")
    assert again.json()["target"] == body["target"]
    assert len(tasks.created_for(run_id)) == 1


async def test_a_storm_of_32_deliveries_creates_one_task(server, tasks: FakeCloudTasks) -> None:
    tasks.create_delay = 0.3  # the API takes a moment: the storm overlaps the dispatch
    responses = await storm(server.url, ROUTE, new_schedule_time(), 32)
    statuses = answers(responses)
    run_id = responses[0].json()["run_id"]
    print(f"\ncloud_tasks_task: 32 concurrent deliveries -> {dict(statuses)}; tasks: {len(tasks.created_for(run_id))}")
    assert statuses["200 processed"] == 1
    assert set(statuses) <= {"200 processed", "200 duplicate", "409 in_progress"}
    assert len(tasks.created_for(run_id)) == 1


def test_throttled_releases_the_claim_with_retry_after(server, tasks: FakeCloudTasks) -> None:
    tasks.fail(CREATE, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Task create requests'", retry_after="7")
    when = new_schedule_time()
    response = deliver(server.url, ROUTE, when)
    assert (response.status_code, response.json()["status"], response.headers["Retry-After"]) == (429, "throttled", "7")
    run_id = response.json()["run_id"]
    assert run_record(server.url, run_id)["status"] == "failed"  # released: the retry dispatches at once
    assert tasks.created_for(run_id) == []

    retry = deliver(server.url, ROUTE, when)
    assert (retry.status_code, retry.json()["status"]) == (200, "processed")
    assert len(tasks.created_for(run_id)) == 1


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("INVALID_ARGUMENT", "Task size too large"),
        ("PERMISSION_DENIED", 'The principal (user or service account) lacks IAM permission "cloudtasks.tasks.create"'),
        ("NOT_FOUND", "Queue does not exist."),
        ("FAILED_PRECONDITION", "The queue is being deleted."),
    ],
)
def test_refusals_release_the_claim_with_the_apis_message(
    server, tasks: FakeCloudTasks, code: str, message: str
) -> None:
    tasks.fail(CREATE, code, message)
    when = new_schedule_time()
    response = deliver(server.url, ROUTE, when)
    assert (response.status_code, response.json()["status"]) == (502, "failed"), response.text
    assert message in response.json()["error"]["message"]
    run_id = response.json()["run_id"]
    record = run_record(server.url, run_id)
    assert record["status"] == "failed" and message in record["last_error"]
    assert tasks.created_for(run_id) == []

    retry = deliver(server.url, ROUTE, when)  # the cause is fixed: the next retry dispatches at once
    assert (retry.status_code, retry.json()["status"]) == (200, "processed")
    assert len(tasks.created_for(run_id)) == 1


@pytest.mark.parametrize(("code", "created"), [("UNAVAILABLE", True), ("INTERNAL", False)])
def test_a_5xx_keeps_the_claim_and_the_retry_after_the_lease_ends_with_one_task(
    server, tasks, code: str, created: bool
) -> None:
    """A 5xx does not prove nothing was created: 504 `unknown`, the claim kept. After the lease the
    retry reads the task: found (the API had created it) or not (re-sent). One task either way."""
    if created:
        tasks.fail_after_create(CREATE, code, "The service is currently unavailable.")
    else:
        tasks.fail(CREATE, code, "Internal error encountered.")
    when = new_schedule_time()
    response = deliver(server.url, ROUTE, when)
    assert (response.status_code, response.json()["status"]) == (504, "unknown"), response.text
    run_id = response.json()["run_id"]
    assert run_record(server.url, run_id)["status"] == "in_progress"
    assert len(tasks.created_for(run_id)) == int(created)

    wait_for_lease_expiry(run_record(server.url, run_id))
    retry = deliver(server.url, ROUTE, when)
    assert (retry.status_code, retry.json()["status"]) == (200, "processed"), retry.text
    [task] = tasks.created_for(run_id)
    assert retry.json()["target"]["resource"] == task


@pytest.mark.parametrize("failure", ["timeout", "reset", "gateway_timeout"])
def test_ambiguous_outcomes_keep_the_claim(server, tasks: FakeCloudTasks, failure: str) -> None:
    if failure == "timeout":
        tasks.hang_after_create(CREATE, 3.5)  # past the 2 s dispatch timeout
    elif failure == "reset":
        tasks.drop_after_create(CREATE)
    else:
        tasks.fail_after_create(CREATE, "DEADLINE_EXCEEDED", "Deadline expired before operation could complete.")
    when = new_schedule_time()
    response = deliver(server.url, ROUTE, when)
    assert (response.status_code, response.json()["status"]) == (504, "unknown"), response.text
    assert int(response.headers["Retry-After"]) >= 1
    run_id = response.json()["run_id"]
    assert run_record(server.url, run_id)["status"] == "in_progress"

    again = deliver(server.url, ROUTE, when)  # within the lease: wait; past it (a slow machine): reconciled
    assert (again.status_code, again.json()["status"]) in {(409, "in_progress"), (200, "processed")}
    assert len(tasks.created_for(run_id)) == 1


@pytest.mark.parametrize("task_state", ["queued", "delivered"])
def test_a_lost_response_is_one_task_answered_200(server, tasks: FakeCloudTasks, task_state: str) -> None:
    """The create's answer is lost. After the lease the retry reconciles: a queued task is found
    (tasks.get); a task Cloud Tasks already delivered and deleted is not, so the task is sent again
    and answered ALREADY_EXISTS. Either way the run completes with the one task."""
    tasks.drop_after_create(CREATE)
    when = new_schedule_time()
    response = deliver(server.url, ROUTE, when)
    assert response.status_code == 504, response.text
    run_id = response.json()["run_id"]
    [created] = tasks.created_for(run_id)
    if task_state == "delivered":
        tasks.finish(created)

    wait_for_lease_expiry(run_record(server.url, run_id))
    gets = tasks.calls[GET]
    retry = deliver(server.url, ROUTE, when)
    assert (retry.status_code, retry.json()["status"]) == (200, "processed"), retry.text
    assert retry.json()["target"] == {"type": "cloud_tasks_task", "resource": created}
    assert tasks.calls[GET] == gets + 1
    assert tasks.created_for(run_id) == [created]
    assert run_record(server.url, run_id)["status"] == "completed"


def test_a_failed_reconciliation_never_dispatches(server, tasks: FakeCloudTasks) -> None:
    tasks.drop_after_create(CREATE)
    when = new_schedule_time()
    run_id = deliver(server.url, ROUTE, when).json()["run_id"]
    creates = tasks.calls[CREATE]

    wait_for_lease_expiry(run_record(server.url, run_id))
    tasks.fail(GET, "PERMISSION_DENIED", 'The principal lacks IAM permission "cloudtasks.tasks.get"')
    blocked = deliver(server.url, ROUTE, when)
    assert (blocked.status_code, blocked.json()["status"]) == (504, "unknown"), blocked.text
    assert "cannot tell whether this run already started" in blocked.json()["error"]["message"]
    assert "cloudtasks.tasks.get" in blocked.json()["error"]["message"]
    assert tasks.calls[CREATE] == creates
    assert run_record(server.url, run_id)["status"] == "in_progress"


def test_kill_9_after_create_creates_nothing_new(tmp_path, metadata, fakes, tasks: FakeCloudTasks) -> None:
    """kill -9 while the API holds the answer to a create it has done; the restarted proxy
    reconciles after the lease and creates nothing."""
    env = env_for(tmp_path, metadata, fakes, tasks)
    when = new_schedule_time()
    created = kill_9_during_create(start_server(env, tmp_path), tasks, CREATE, ROUTE, when)
    creates = tasks.calls[CREATE]

    second = start_server(env, tmp_path)
    try:
        record = run_record(second.url, created.token)
        assert record["status"] == "in_progress"  # the crash left the claim as it was
        wait_for_lease_expiry(record)
        response = deliver(second.url, ROUTE, when)
        assert (response.status_code, response.json()["status"]) == (200, "processed"), response.text
        assert response.json()["target"]["resource"] == created.resource
        assert tasks.created_for(created.token) == [created.resource]
        assert tasks.calls[CREATE] == creates  # found by tasks.get: not even a second create
        print(f"\ncloud_tasks_task: crash after create -> tasks for the run: {len(tasks.created_for(created.token))}")
    finally:
        second.stop()
