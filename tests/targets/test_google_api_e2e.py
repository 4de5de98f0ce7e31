"""`google_api` routes through a real `runonce serve` process, on two APIs that dedupe differently,
against fakes that check every request against the API's discovery document:

- `batch`: Cloud Batch jobs.create with a client-chosen jobId, reconciled with jobs.get (and its
  `status.state` read for overlap);
- `spark`: Dataproc batches.create with a requestId (a UUID from the run) and a batchId, and no
  reconcile method: a re-sent create is answered by Dataproc's own dedupe.

Every fault ends with exactly one execution of the run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.batch import CREATE as BATCH_CREATE
from tests.fakes.batch import GET as BATCH_GET
from tests.fakes.batch import FakeBatch
from tests.fakes.dataproc import CREATE as DATAPROC_CREATE
from tests.fakes.dataproc import FakeDataproc
from tests.fakes.jobs import FakeJobsApi
from tests.support.procs import ServerProcess, start_server

from .harness import (
    LEASE_SECONDS,
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

PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
BATCH_JOB = {
    "taskGroups": [
        {
            "taskSpec": {"runnables": [{"container": {"imageUri": "gcr.io/p/etl:1", "commands": ["--day"]}}]},
            "taskCount": "1",
        }
    ],
    "labels": {"runonce-run-id": "${run_id:63}", "schedule": "nightly"},
    "logsPolicy": {"destination": "CLOUD_LOGGING"},
}


def batch_target(url: str) -> dict[str, Any]:
    return {
        "type": "google_api",
        "api": "batch.v1",
        "method": "projects.locations.jobs.create",
        "params": {"parent": PARENT, "jobId": "r${run_id:62}"},
        "body": BATCH_JOB,
        "reconcile": {"method": "projects.locations.jobs.get", "params": {"name": f"{PARENT}/jobs/r${{run_id:62}}"}},
        "running": {"field": "status.state", "values": ["QUEUED", "SCHEDULED", "RUNNING"]},
        "endpoint": url,
    }


def spark_target(url: str) -> dict[str, Any]:
    return {
        "type": "google_api",
        "api": "dataproc.v1",
        "method": "projects.locations.batches.create",
        "params": {"parent": PARENT, "requestId": "${run_uuid}", "batchId": "b${run_id:62}"},
        "body": {
            "pysparkBatch": {"mainPythonFileUri": "gs://p/etl.py", "args": ["--day=${schedule_time}"]},
            "labels": {"runonce-run-id": "${run_id:63}"},
        },
        "endpoint": url,
    }


@dataclass
class Api:
    route: str
    fake: FakeJobsApi
    create: str
    prefix: str  # the handle is prefix + the run_id's first 62 hex characters

    def executions(self, run_id: str) -> list[str]:
        return self.fake.created_with_id(self.prefix + run_id[:62])


@pytest.fixture(scope="module")
def batch(metadata) -> Iterator[FakeBatch]:
    fake = FakeBatch(metadata)
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def dataproc(metadata) -> Iterator[FakeDataproc]:
    fake = FakeDataproc(metadata)
    yield fake
    fake.close()


def routes(batch: FakeBatch, dataproc: FakeDataproc) -> dict[str, Any]:
    namespace = {"project": PROJECT, "location": LOCATION}
    return {
        "routes": {
            "batch": {"target": batch_target(batch.url), "namespace": namespace},
            "batch-skip": {"target": batch_target(batch.url), "namespace": namespace, "overlap": "skip"},
            "batch-wait": {"target": batch_target(batch.url), "namespace": namespace, "overlap": "wait"},
            "spark": {"target": spark_target(dataproc.url), "namespace": namespace},
        }
    }


def env_for(tmp: Path, metadata, fakes, batch: FakeBatch, dataproc: FakeDataproc) -> dict[str, str]:
    return server_env(tmp, metadata, fakes, routes=routes(batch, dataproc))


@pytest.fixture(scope="module")
def server(tmp_path_factory, metadata, fakes, batch, dataproc) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("runonce-google-api")
    proc = start_server(env_for(tmp, metadata, fakes, batch, dataproc), tmp)
    for route in ("batch", "spark"):  # the first call fetches the access token: not within a test's timing
        deliver(proc.url, route, new_schedule_time())
    yield proc
    proc.stop()


@pytest.fixture(params=["batch", "spark"])
def api(request: pytest.FixtureRequest, batch: FakeBatch, dataproc: FakeDataproc) -> Iterator[Api]:
    chosen = {
        "batch": Api("batch", batch, BATCH_CREATE, "r"),
        "spark": Api("spark", dataproc, DATAPROC_CREATE, "b"),
    }[request.param]
    chosen.fake.create_delay = 0.0
    yield chosen
    assert chosen.fake.violations == [], f"requests Google's API would reject: {chosen.fake.violations}"
    assert chosen.fake.pending_steps() == 0, "a scripted misbehaviour was never triggered"


def test_a_run_creates_one_execution_with_the_placeholders_filled_and_replays(server, batch, dataproc) -> None:
    when = new_schedule_time()
    response = deliver(server.url, "batch", when)
    assert response.status_code == 200, response.text
    body = response.json()
    run_id = body["run_id"]
    job = f"{PARENT}/jobs/r{run_id[:62]}"
    assert body["target"] == {"type": "google_api", "resource": f"v1/{job}"}
    [created] = [c for c in batch.created if c.resource == job]
    assert created.data["body"]["labels"] == {"runonce-run-id": run_id[:63], "schedule": "nightly"}
    again = deliver(server.url, "batch", when)
    assert (again.status_code, again.json()["status"]) == (200, "duplicate")
    assert len(batch.resources) >= 1 and batch.created_with_id(f"r{run_id[:62]}") == [job]

    spark = deliver(server.url, "spark", when)
    assert spark.status_code == 200, spark.text
    spark_run = spark.json()["run_id"]
    [made] = [c for c in dataproc.created if c.resource.endswith(f"/b{spark_run[:62]}")]
    assert made.data["body"]["pysparkBatch"]["args"] == [f"--day={when}"]
    assert spark.json()["target"]["resource"].startswith(f"projects/{PROJECT}/regions/{LOCATION}/operations/")


async def test_a_64_way_storm_creates_one_execution(server, api: Api) -> None:
    api.fake.create_delay = 0.3  # the create takes a moment: the storm overlaps it
    responses = await storm(server.url, api.route, new_schedule_time(), 64)
    statuses, run_id = answers(responses), responses[0].json()["run_id"]
    print(f"\ngoogle_api {api.route}: 64 concurrent deliveries -> {dict(statuses)}")
    assert statuses["200 processed"] == 1
    assert set(statuses) <= {"200 processed", "200 duplicate", "409 in_progress"}
    assert len(api.executions(run_id)) == 1


def test_a_lost_answer_a_5xx_after_the_create_and_409_on_the_retry_are_one_execution_each(
    server, api: Api, batch: FakeBatch, dataproc: FakeDataproc
) -> None:
    """Three runs whose create succeeded but runonce never learned it: its answer was lost, or a 5xx
    came after it. Each is answered 504 unknown with its claim kept; after the lease, the retry
    finds the execution (Batch: jobs.get) or re-sends the same handle (Dataproc: its requestId), and
    completes with it. For the third, the retry's create meets the run's own id, 409 ALREADY_EXISTS
    (Batch: jobs.get lags and says 404; Dataproc: its memory of request ids ran out): adopted."""
    api.fake.drop_after_create(api.create)
    api.fake.fail_after_create(api.create, "INTERNAL", "Internal error encountered.")
    api.fake.drop_after_create(api.create)
    runs = {}
    for case in ("lost", "5xx", "409"):
        when = new_schedule_time()
        response = deliver(server.url, api.route, when)
        assert (response.status_code, response.json()["status"]) == (504, "unknown"), (case, response.text)
        run_id = response.json()["run_id"]
        assert len(api.executions(run_id)) == 1, case
        assert run_record(server.url, run_id)["status"] == "in_progress", case
        runs[case] = (when, run_id)

    wait_for_lease_expiry(run_record(server.url, runs["409"][1]))
    for case in ("lost", "5xx"):
        when, run_id = runs[case]
        retry = deliver(server.url, api.route, when)
        assert (retry.status_code, retry.json()["status"]) == (200, "processed"), (case, retry.text)
        assert len(api.executions(run_id)) == 1, case

    when, run_id = runs["409"]
    [created] = api.executions(run_id)
    if api.fake is batch:
        batch.fail(BATCH_GET, "NOT_FOUND", f'Job "{created}" not found')
    else:
        dataproc.forget_request_ids()
    creates = api.fake.calls[api.create]
    retry = deliver(server.url, api.route, when)
    assert (retry.status_code, retry.json()["status"]) == (200, "processed"), retry.text
    assert api.fake.calls[api.create] == creates + 1  # re-sent, refused with 409
    assert api.executions(run_id) == [created]
    if api.fake is batch:
        assert retry.json()["target"]["resource"] == f"v1/{created}"


@pytest.mark.parametrize(
    ("code", "answer"),
    [("RESOURCE_EXHAUSTED", (429, "throttled")), ("INVALID_ARGUMENT", (502, "failed"))],
)
def test_a_refusal_releases_the_claim_and_the_retry_creates(server, api: Api, code: str, answer) -> None:
    message = f"refused: {code}"
    api.fake.fail(api.create, code, message, retry_after="7" if answer[0] == 429 else None)
    when = new_schedule_time()
    response = deliver(server.url, api.route, when)
    assert (response.status_code, response.json()["status"]) == answer, response.text
    if answer[0] == 429:
        assert response.headers["Retry-After"] == "7"
    run_id = response.json()["run_id"]
    record = run_record(server.url, run_id)
    assert record["status"] == "failed" and message in record["last_error"]
    assert api.executions(run_id) == []

    retry = deliver(server.url, api.route, when)
    assert (retry.status_code, retry.json()["status"]) == (200, "processed"), retry.text
    assert len(api.executions(run_id)) == 1


def test_kill_9_after_the_create_is_one_execution(tmp_path, metadata, fakes, batch, dataproc) -> None:
    """A proxy killed while each API holds the answer to its create (one run per API, one proxy
    each); a fresh proxy on the same store completes both after the lease, with no second create
    where a lookup finds it (Batch) and the requestId answered again where there is none (Dataproc)."""
    env = env_for(tmp_path, metadata, fakes, batch, dataproc)
    apis = [Api("batch", batch, BATCH_CREATE, "r"), Api("spark", dataproc, DATAPROC_CREATE, "b")]
    killed = []
    for api in apis:
        first = start_server(env, tmp_path)
        deliver(first.url, api.route, new_schedule_time())  # another run: the token is fetched before the timed one
        when = new_schedule_time()
        handle = kill_9_during_create(first, api.fake, api.create, api.route, when).resource.rsplit("/", 1)[1]
        killed.append((api, when, handle))
    second = start_server(env, tmp_path)
    try:
        for api in apis:  # other runs: the token is fetched before the timed ones
            deliver(second.url, api.route, new_schedule_time())
        time.sleep(LEASE_SECONDS + 0.2)  # the killed attempts' leases run out
        for api, when, handle in killed:
            creates = api.fake.calls[api.create]
            response = deliver(second.url, api.route, when)
            assert (response.status_code, response.json()["status"]) == (200, "processed"), response.text
            run_id = response.json()["run_id"]
            assert handle == api.prefix + run_id[:62]
            assert len(api.executions(run_id)) == 1
            if api.fake is batch:
                assert api.fake.calls[api.create] == creates  # found by jobs.get, not created again
            assert api.fake.violations == []
    finally:
        second.stop()


def previous_done(batch: FakeBatch) -> None:
    for name in list(batch.resources):
        batch.finish(name)


def test_overlap_skip_reads_status_state(server, batch: FakeBatch) -> None:
    previous_done(batch)
    first = deliver(server.url, "batch-skip", new_schedule_time())
    assert first.status_code == 200, first.text
    skipped = deliver(server.url, "batch-skip", new_schedule_time())
    assert skipped.status_code == 200, skipped.text
    assert (skipped.json()["status"], skipped.json()["reason"]) == ("skipped", "overlap")
    batch.finish(first.json()["target"]["resource"].removeprefix("v1/"))
    after = deliver(server.url, "batch-skip", new_schedule_time())
    assert (after.status_code, after.json()["status"]) == (200, "processed"), after.text


def test_overlap_wait_answers_409_until_the_job_is_done(server, batch: FakeBatch) -> None:
    previous_done(batch)
    first = deliver(server.url, "batch-wait", new_schedule_time())
    assert first.status_code == 200, first.text
    when = new_schedule_time()
    waiting = deliver(server.url, "batch-wait", when)
    assert (waiting.status_code, waiting.json()["status"]) == (409, "waiting"), waiting.text
    batch.finish(first.json()["target"]["resource"].removeprefix("v1/"), state="FAILED")
    retry = deliver(server.url, "batch-wait", when)
    assert (retry.status_code, retry.json()["status"]) == (200, "processed"), retry.text
