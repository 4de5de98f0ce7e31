"""The Google targets through the running proxy, as Cloud Scheduler would see them.

Every scenario runs for each adapter (`workflows`, `cloud_run_job`, `cloud_build_trigger`) and
counts what the fake API created: the figure that matters is executions per scheduled run = 1.
"""

from __future__ import annotations

import json

import pytest

from tests.support.procs import start_server

from .harness import (
    JOB,
    TRIGGER,
    WORKFLOW,
    Adapter,
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


def assert_token_passed(adapter: Adapter, run_id: str, schedule_time: str) -> None:
    """The run_id reached the execution where the route config says (and the run's identity too)."""
    [created] = [c for c in adapter.fake.created if c.token == run_id]
    if adapter.type == "workflows":
        execution = created.data["execution"]
        argument = json.loads(execution["argument"])
        assert argument["idempotency_key"] == run_id
        assert argument["mode"] == "full"  # the route's argument
        assert argument["runonce"] == {"job": "nightly-job", "schedule_time": schedule_time, "source": "scheduler"}
        assert execution["labels"]["runonce-run-id"] == run_id[:63]
        assert execution["labels"]["team"] == "data"
    elif adapter.type == "cloud_run_job":
        [container] = created.data["execution"]["template"]["containers"]
        env = {v["name"]: v["value"] for v in container["env"]}
        assert env["IDEMPOTENCY_KEY"] == run_id
        assert env["RUNONCE_JOB"] == "nightly-job"
        assert env["RUNONCE_SCHEDULE_TIME"] == schedule_time
        assert env["RUNONCE_SOURCE"] == "scheduler"
        assert container["args"] == ["--all"]
    else:
        source = created.data["body"]["source"]
        assert source["substitutions"]["_IDEMPOTENCY_KEY"] == run_id
        assert source["substitutions"]["_RUNONCE_JOB"] == "nightly-job"
        assert source["substitutions"]["_RUNONCE_SCHEDULE_TIME"] == schedule_time
        assert source["branchName"] == "main"


def add_other_runs(adapter: Adapter) -> None:
    if adapter.type == "workflows":
        adapter.fake.add_unrelated_executions(WORKFLOW, 150)
    elif adapter.type == "cloud_run_job":
        adapter.fake.add_unrelated_executions(JOB, 250)
    else:
        adapter.fake.add_unrelated_builds(TRIGGER, 250)


def test_success_passes_the_token_and_replays(server, adapter: Adapter) -> None:
    when = new_schedule_time()
    response = deliver(server.url, adapter.route, when)
    assert response.status_code == 200, response.text
    body = response.json()
    run_id = body["run_id"]
    assert body["status"] == "processed"
    assert body["target"]["type"] == adapter.type
    assert adapter.executions_for(run_id) == [body["target"]["resource"]]
    assert_token_passed(adapter, run_id, when)

    record = run_record(server.url, run_id)
    assert record["status"] == "completed"
    assert record["target"] == body["target"]

    again = deliver(server.url, adapter.route, when)
    assert again.status_code == 200
    assert again.headers["Runonce-Replayed"] == "true"
    assert again.json()["status"] == "duplicate"
    assert again.json()["target"] == body["target"]
    assert len(adapter.executions_for(run_id)) == 1


async def test_duplicate_storm_creates_one_execution(server, adapter: Adapter) -> None:
    adapter.fake.create_delay = 0.3  # the API takes a moment: the storm overlaps the dispatch
    responses = await storm(server.url, adapter.route, new_schedule_time(), 50)
    statuses, run_id = answers(responses), responses[0].json()["run_id"]
    print(
        f"\n{adapter.type}: 50 concurrent deliveries -> {dict(statuses)}; "
        f"executions created: {len(adapter.executions_for(run_id))}"
    )
    assert statuses["200 processed"] == 1
    assert set(statuses) <= {"200 processed", "200 duplicate", "409 in_progress"}
    assert all(int(r.headers["Retry-After"]) >= 1 for r in responses if r.status_code == 409)
    assert len(adapter.executions_for(run_id)) == 1


def test_throttled_releases_the_claim_with_retry_after(server, adapter: Adapter) -> None:
    if adapter.type == "workflows":  # gRPC: the delay comes in google.rpc.RetryInfo
        adapter.fake.fail(adapter.create, "RESOURCE_EXHAUSTED", "Quota exceeded for executions", retry_delay=7)
    else:  # REST: in the Retry-After header
        adapter.fake.fail(adapter.create, "RESOURCE_EXHAUSTED", "Quota exceeded for runs", retry_after="7")
    when = new_schedule_time()
    response = deliver(server.url, adapter.route, when)
    assert response.status_code == 429, response.text
    assert response.json()["status"] == "throttled"
    assert response.headers["Retry-After"] == "7"
    run_id = response.json()["run_id"]
    assert run_record(server.url, run_id)["status"] == "failed"  # released: the retry dispatches at once
    assert adapter.executions_for(run_id) == []

    retry = deliver(server.url, adapter.route, when)
    assert retry.status_code == 200 and retry.json()["status"] == "processed"
    assert len(adapter.executions_for(run_id)) == 1


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("INVALID_ARGUMENT", "Invalid value at 'overrides.task_count'"),
        ("UNAUTHENTICATED", "Request had invalid authentication credentials."),
        ("PERMISSION_DENIED", "Permission 'run.jobs.runWithOverrides' denied on resource"),
        ("NOT_FOUND", "Resource 'nightly' was not found"),
    ],
)
def test_api_refusals_release_the_claim_with_the_apis_message(
    server, adapter: Adapter, code: str, message: str
) -> None:
    adapter.fake.fail(adapter.create, code, message)
    when = new_schedule_time()
    response = deliver(server.url, adapter.route, when)
    assert response.status_code == 502, response.text
    body = response.json()
    assert body["status"] == "failed"
    assert message in body["error"]["message"]
    record = run_record(server.url, body["run_id"])
    assert record["status"] == "failed"
    assert message in record["last_error"]
    assert adapter.executions_for(body["run_id"]) == []

    # The cause is fixed (say, the IAM binding): the next retry dispatches at once.
    retry = deliver(server.url, adapter.route, when)
    assert retry.status_code == 200 and retry.json()["status"] == "processed"
    assert len(adapter.executions_for(body["run_id"])) == 1


@pytest.mark.parametrize("failure", ["timeout", "reset", "gateway_timeout", "UNAVAILABLE", "INTERNAL"])
def test_ambiguous_outcomes_keep_the_claim(server, adapter: Adapter, failure: str) -> None:
    """Timeouts, resets and a 5xx after the create (UNAVAILABLE "is not always safe to retry
    non-idempotent operations"): the execution may exist, so the claim is kept."""
    if failure == "timeout":
        adapter.fake.hang_after_create(adapter.create, 3.5)  # past the 2 s dispatch timeout
    elif failure == "reset":
        adapter.fake.drop_after_create(adapter.create)
    elif failure == "gateway_timeout":
        adapter.fake.fail_after_create(
            adapter.create, "DEADLINE_EXCEEDED", "Deadline expired before operation could complete."
        )
    else:
        adapter.fake.fail_after_create(adapter.create, failure, "The service broke after creating it.")
    when = new_schedule_time()
    response = deliver(server.url, adapter.route, when)
    assert response.status_code == 504, response.text
    body = response.json()
    assert body["status"] == "unknown"
    assert int(response.headers["Retry-After"]) >= 1
    record = run_record(server.url, body["run_id"])
    assert record["status"] == "in_progress"
    assert record["last_error"]

    # While the lease lasts, retries wait (409); on a loaded machine the 4 s lease may already be
    # over, and then the retry reconciles. Either way nothing new is created.
    again = deliver(server.url, adapter.route, when)
    assert (again.status_code, again.json()["status"]) in {(409, "in_progress"), (200, "processed")}
    assert len(adapter.executions_for(body["run_id"])) == 1


def test_lost_response_is_reconciled_and_reconciliation_errors_never_dispatch(server, adapter: Adapter) -> None:
    """The API created the execution but its answer was lost (504). After the lease, a retry whose
    reconciliation fails answers 504 again and creates nothing; the next one finds the execution,
    among hundreds of other runs' executions created since (reconciliation pages)."""
    adapter.fake.drop_after_create(adapter.create)
    when = new_schedule_time()
    response = deliver(server.url, adapter.route, when)
    assert response.status_code == 504, response.text
    run_id = response.json()["run_id"]
    [created] = adapter.executions_for(run_id)
    creates = adapter.fake.calls[adapter.create]

    wait_for_lease_expiry(run_record(server.url, run_id))
    adapter.fake.fail(adapter.lookup, "PERMISSION_DENIED", "Permission denied on listing")
    blocked = deliver(server.url, adapter.route, when)
    assert blocked.status_code == 504, blocked.text
    assert "cannot tell" in blocked.json()["error"]["message"]
    assert "Permission denied on listing" in blocked.json()["error"]["message"]
    assert adapter.fake.calls[adapter.create] == creates  # never dispatched blind
    assert run_record(server.url, run_id)["status"] == "in_progress"

    add_other_runs(adapter)
    wait_for_lease_expiry(run_record(server.url, run_id))
    reconciled = deliver(server.url, adapter.route, when)
    assert reconciled.status_code == 200, reconciled.text
    assert reconciled.json()["status"] == "processed"
    assert reconciled.json()["target"] == {"type": adapter.type, "resource": created}
    assert adapter.executions_for(run_id) == [created]
    assert adapter.fake.calls[adapter.create] == creates

    replay = deliver(server.url, adapter.route, when)
    assert replay.json()["status"] == "duplicate"
    assert replay.json()["target"]["resource"] == created


def test_crash_after_create_is_reconciled_after_the_lease(tmp_path, metadata, fakes, adapter: Adapter) -> None:
    """kill -9 while the API holds the answer to a create it has done; the restarted proxy
    reconciles after the lease and creates nothing."""
    env = server_env(tmp_path, metadata, fakes)
    when = new_schedule_time()
    crashed = kill_9_during_create(start_server(env, tmp_path), adapter.fake, adapter.create, adapter.route, when)
    creates = adapter.fake.calls[adapter.create]
    created, run_id = crashed.resource, crashed.token

    second = start_server(env, tmp_path)
    try:
        record = run_record(second.url, run_id)
        assert record["status"] == "in_progress"  # the crash left the claim as it was
        wait_for_lease_expiry(record)
        response = deliver(second.url, adapter.route, when)
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "processed"
        assert response.json()["target"]["resource"] == created
        assert adapter.executions_for(run_id) == [created]
        assert adapter.fake.calls[adapter.create] == creates
        print(f"\n{adapter.type}: crash after create -> executions for the run: {len(adapter.executions_for(run_id))}")
    finally:
        second.stop()
