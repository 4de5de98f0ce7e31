"""The `bigquery_job` target through a real `runonce serve` process, as Cloud Scheduler sees it,
against the fake BigQuery API: the figure that matters is BigQuery jobs per scheduled run = 1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.bigquery import GET, INSERT, FakeBigQuery
from tests.fakes.metadata import FakeMetadataServer
from tests.support.procs import ServerProcess, start_server

from .harness import (
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

ROUTE = "rollup"
ROUTES = {
    "routes": {
        ROUTE: {
            "target": {
                "type": "bigquery_job",
                "project": PROJECT,
                "location": "EU",
                "configuration": {
                    "query": {
                        "query": "MERGE d USING s ON d.day = DATE(@schedule_time) WHEN NOT MATCHED THEN INSERT ROW"
                    }
                },
            },
            "namespace": {"project": PROJECT, "location": "europe-west1"},
        }
    }
}


@pytest.fixture(scope="module")
def bigquery(metadata: FakeMetadataServer) -> Iterator[FakeBigQuery]:
    fake = FakeBigQuery(metadata)
    yield fake
    fake.close()


def env_for(tmp: Path, metadata, fakes, bigquery: FakeBigQuery) -> dict[str, str]:
    return {**server_env(tmp, metadata, fakes, routes=ROUTES), "RUNONCE_BIGQUERY_ENDPOINT": bigquery.url}


@pytest.fixture(scope="module")
def server(tmp_path_factory, metadata, fakes, bigquery) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("runonce-bigquery")
    proc = start_server(env_for(tmp, metadata, fakes, bigquery), tmp)
    yield proc
    proc.stop()


@pytest.fixture(autouse=True)
def nothing_left_scripted(bigquery: FakeBigQuery) -> Iterator[None]:
    yield
    assert bigquery.pending_steps() == 0, "a scripted misbehaviour was never triggered"


def jobs_for(bigquery: FakeBigQuery, run_id: str) -> list[str]:
    return bigquery.created_for(run_id)


def test_a_run_inserts_one_job_with_its_id_and_replays(server, bigquery) -> None:
    when = new_schedule_time()
    response = deliver(server.url, ROUTE, when)
    assert response.status_code == 200, response.text
    body = response.json()
    run_id = body["run_id"]
    assert body["status"] == "processed"
    assert body["target"] == {"type": "bigquery_job", "resource": f"{PROJECT}:EU.runonce_{run_id}"}
    [created] = [c for c in bigquery.created if c.token == run_id]
    parameters = {
        p["name"]: p["parameterValue"] for p in created.data["body"]["configuration"]["query"]["queryParameters"]
    }
    assert parameters == {"run_id": {"value": run_id}, "schedule_time": {"value": when}}
    assert created.data["body"]["configuration"]["labels"] == {"runonce-run-id": run_id[:63]}

    again = deliver(server.url, ROUTE, when)
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    assert again.json()["target"] == body["target"]
    assert len(jobs_for(bigquery, run_id)) == 1


async def test_a_32_way_storm_inserts_one_job(server, bigquery) -> None:
    bigquery.create_delay = 0.3  # the insert takes a moment: the storm overlaps it
    responses = await storm(server.url, ROUTE, new_schedule_time(), 32)
    statuses, run_id = answers(responses), responses[0].json()["run_id"]
    print(f"\nbigquery_job: 32 concurrent deliveries -> {dict(statuses)}; jobs: {len(jobs_for(bigquery, run_id))}")
    assert statuses["200 processed"] == 1
    assert set(statuses) <= {"200 processed", "200 duplicate", "409 in_progress"}
    assert bigquery.calls[INSERT] >= 1
    assert len(jobs_for(bigquery, run_id)) == 1


@pytest.mark.parametrize("failure", ["reset", "timeout", "backend_error"])
def test_a_lost_answer_is_one_job_answered_200_on_the_retry(server, bigquery, failure: str) -> None:
    """BigQuery inserted the job but runonce never learned it: 504, claim kept; after the lease
    the retry finds the job by its id (jobs.get) and completes the run with it."""
    if failure == "reset":
        bigquery.drop_after_create(INSERT)
    elif failure == "timeout":
        bigquery.hang_after_create(INSERT, 3.5)  # past the 2 s dispatch timeout
    else:
        bigquery.fail_after_create(
            INSERT, "INTERNAL", "An internal error occurred and the request could not be completed."
        )
    when = new_schedule_time()
    response = deliver(server.url, ROUTE, when)
    assert response.status_code == 504, response.text
    assert response.json()["status"] == "unknown"
    run_id = response.json()["run_id"]
    [created] = jobs_for(bigquery, run_id)
    assert run_record(server.url, run_id)["status"] == "in_progress"
    inserts = bigquery.calls[INSERT]

    wait_for_lease_expiry(run_record(server.url, run_id))
    retry = deliver(server.url, ROUTE, when)
    assert retry.status_code == 200, retry.text
    assert retry.json()["status"] == "processed"
    assert retry.json()["target"]["resource"] == created
    assert jobs_for(bigquery, run_id) == [created]
    assert bigquery.calls[INSERT] == inserts  # found by jobs.get, not inserted again


def test_a_lookup_that_lags_the_insert_meets_409_and_completes_with_the_job(server, bigquery) -> None:
    """Reconciliation's jobs.get says 404 (it lags), so the run is inserted again with the same id:
    BigQuery answers 409 ALREADY_EXISTS, and the run completes with the existing job."""
    bigquery.drop_after_create(INSERT)
    when = new_schedule_time()
    run_id = deliver(server.url, ROUTE, when).json()["run_id"]
    [created] = jobs_for(bigquery, run_id)

    wait_for_lease_expiry(run_record(server.url, run_id))
    bigquery.fail(GET, "NOT_FOUND", f"Not found: Job {PROJECT}:EU.runonce_{run_id}")
    inserts = bigquery.calls[INSERT]
    retry = deliver(server.url, ROUTE, when)
    assert retry.status_code == 200, retry.text
    assert retry.json()["target"]["resource"] == created
    assert bigquery.calls[INSERT] == inserts + 1  # the duplicate insert, refused with 409
    assert jobs_for(bigquery, run_id) == [created]


def test_a_reconciliation_that_cannot_read_never_inserts_blind(server, bigquery) -> None:
    bigquery.drop_after_create(INSERT)
    when = new_schedule_time()
    run_id = deliver(server.url, ROUTE, when).json()["run_id"]
    wait_for_lease_expiry(run_record(server.url, run_id))
    bigquery.fail(GET, "PERMISSION_DENIED", "Access Denied: User does not have bigquery.jobs.get permission")
    inserts = bigquery.calls[INSERT]
    blocked = deliver(server.url, ROUTE, when)
    assert blocked.status_code == 504, blocked.text
    assert "cannot tell" in blocked.json()["error"]["message"]
    assert bigquery.calls[INSERT] == inserts
    assert run_record(server.url, run_id)["status"] == "in_progress"


@pytest.mark.parametrize(
    ("code", "http_status", "answer"),
    [
        ("RESOURCE_EXHAUSTED", 403, (429, "throttled")),  # rateLimitExceeded
        ("RESOURCE_EXHAUSTED", 429, (429, "throttled")),
        ("INVALID_ARGUMENT", None, (502, "failed")),
        ("PERMISSION_DENIED", None, (502, "failed")),
        ("NOT_FOUND", None, (502, "failed")),
    ],
)
def test_a_refusal_releases_the_claim_and_the_retry_inserts(server, bigquery, code: str, http_status, answer) -> None:
    message = f"BigQuery refuses: {code}"
    bigquery.fail(INSERT, code, message, http_status=http_status, retry_after="7" if answer[0] == 429 else None)
    when = new_schedule_time()
    response = deliver(server.url, ROUTE, when)
    assert (response.status_code, response.json()["status"]) == answer, response.text
    if answer[0] == 429:
        assert response.headers["Retry-After"] == "7"
    run_id = response.json()["run_id"]
    record = run_record(server.url, run_id)
    assert record["status"] == "failed" and message in record["last_error"]  # released
    assert jobs_for(bigquery, run_id) == []

    retry = deliver(server.url, ROUTE, when)
    assert retry.status_code == 200 and retry.json()["status"] == "processed"
    assert len(jobs_for(bigquery, run_id)) == 1


@pytest.mark.parametrize("code", ["INTERNAL", "UNAVAILABLE"])
def test_a_backend_error_keeps_the_claim(server, bigquery, code: str) -> None:
    """5xx from BigQuery (backendError) may come after the job was created: unknown, kept."""
    bigquery.fail(INSERT, code, "Error encountered during execution. Retrying may solve the problem.")
    when = new_schedule_time()
    response = deliver(server.url, ROUTE, when)
    assert response.status_code == 504 and response.json()["status"] == "unknown", response.text
    assert run_record(server.url, response.json()["run_id"])["status"] == "in_progress"


def test_kill_9_after_the_insert_creates_nothing_new_on_the_retry(tmp_path, metadata, fakes, bigquery) -> None:
    first = start_server(env_for(tmp_path, metadata, fakes, bigquery), tmp_path)
    when = new_schedule_time()
    run_id = kill_9_during_create(first, bigquery, INSERT, ROUTE, when).token
    [created] = jobs_for(bigquery, run_id)
    inserts = bigquery.calls[INSERT]

    second = start_server(env_for(tmp_path, metadata, fakes, bigquery), tmp_path)
    try:
        record = run_record(second.url, run_id)
        assert record["status"] == "in_progress"
        wait_for_lease_expiry(record)
        response = deliver(second.url, ROUTE, when)
        assert response.status_code == 200, response.text
        assert response.json()["target"]["resource"] == created
        assert jobs_for(bigquery, run_id) == [created]
        assert bigquery.calls[INSERT] == inserts
        print(f"\nbigquery_job: kill -9 after insert -> jobs for the run: {len(jobs_for(bigquery, run_id))}")
    finally:
        second.stop()
