"""The batch-workload targets through a real `runonce serve` process, as Cloud Scheduler sees them,
against each API's fake: one fault matrix over every type (`run_named.TYPES`). The figure that
matters in every case: executions per scheduled run = 1."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import httpx
import pytest

from tests.fakes.dataflow import LAUNCH as DATAFLOW_LAUNCH
from tests.fakes.dataflow import FakeDataflow
from tests.fakes.jobs import FakeJobsApi
from tests.fakes.metadata import FakeMetadataServer
from tests.support.procs import ServerProcess, start_server

from .harness import answers, deliver, new_schedule_time, run_record, storm, wait_for_lease_expiry
from .run_named import LOCATION, PROJECT, TYPES, JobType, env, run_id_of

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def job_fakes(metadata: FakeMetadataServer) -> Iterator[dict[str, FakeJobsApi]]:
    fakes = {name: kind.make_fake(metadata) for name, kind in TYPES.items()}
    yield fakes
    for fake in fakes.values():
        fake.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory, metadata, job_fakes) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("runonce-jobs")
    proc = start_server(env(tmp, metadata, job_fakes), tmp)
    yield proc
    proc.stop()


@pytest.fixture(params=sorted(TYPES))
def kind(request: pytest.FixtureRequest, job_fakes) -> Iterator[JobType]:
    yield TYPES[request.param]
    fake = job_fakes[request.param]
    assert fake.take_violations() == [], "requests Google's API would reject"
    assert fake.pending_steps() == 0, "a scripted misbehaviour was never triggered"


def executions(fake: FakeJobsApi, run_id: str) -> list[str]:
    return fake.created_for(run_id[:63])


def test_a_run_creates_one_execution_with_its_identity_and_replays(server, job_fakes, kind: JobType) -> None:
    fake = job_fakes[kind.type]
    when = new_schedule_time()
    response = deliver(server.url, kind.route, when)
    assert response.status_code == 200, response.text
    body = response.json()
    run_id = body["run_id"]
    assert body["status"] == "processed" and run_id == run_id_of(kind.route, when)
    [created] = [c for c in fake.created if c.token == run_id[:63]]
    assert body["target"] == {"type": kind.type, "resource": created.resource}
    kind.check_identity(created, run_id, when)

    again = deliver(server.url, kind.route, when)
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    assert again.json()["target"] == body["target"]
    assert executions(fake, run_id) == [created.resource]


async def test_a_64_way_storm_creates_one_execution(server, job_fakes, kind: JobType) -> None:
    fake = job_fakes[kind.type]
    fake.create_delay = 0.3  # the create takes a moment: the storm overlaps it
    responses = await storm(server.url, kind.route, new_schedule_time(), 64)
    statuses, run_id = answers(responses), responses[0].json()["run_id"]
    print(f"\n{kind.type}: 64 concurrent deliveries -> {dict(statuses)}; executions: {len(executions(fake, run_id))}")
    assert statuses["200 processed"] == 1
    assert set(statuses) <= {"200 processed", "200 duplicate", "409 in_progress"}
    assert len(executions(fake, run_id)) == 1


def test_unknown_outcomes_keep_the_claim_and_the_retry_after_the_lease_reconciles(
    server, job_fakes, kind: JobType
) -> None:
    """Four runs whose create the API did but runonce never learned of (the answer was lost, or a
    5xx came after the create): each is 504 `unknown` with its claim kept. After the lease (one
    wait for all four), each retry ends with exactly the one execution:
    - lost response, and 5xx after create: reconciliation finds it, nothing is created again;
    - 409 on the retry: the lookup lags the create, so the retry creates again, the API answers
      409 ALREADY_EXISTS, and the run adopts the execution that exists;
    - a reconciliation that cannot read answers 504 again and never creates blind."""
    fake = job_fakes[kind.type]
    scripts = {
        "lost_response": lambda: fake.drop_after_create(kind.create),
        "5xx_after_create": lambda: fake.fail_after_create(kind.create, "INTERNAL", "Internal error encountered."),
        "409_on_the_retry": lambda: fake.drop_after_create(kind.create),
        "reconciliation_cannot_read": lambda: fake.drop_after_create(kind.create),
    }
    runs: dict[str, tuple[str, str, str]] = {}  # case: (schedule time, run_id, the execution)
    for case, script in scripts.items():
        script()
        when = new_schedule_time()
        response = deliver(server.url, kind.route, when)
        assert (response.status_code, response.json()["status"]) == (504, "unknown"), (case, response.text)
        run_id = response.json()["run_id"]
        [created] = executions(fake, run_id)
        assert run_record(server.url, run_id)["status"] == "in_progress", case
        runs[case] = (when, run_id, created)
    wait_for_lease_expiry(run_record(server.url, runs["reconciliation_cannot_read"][1]))

    for case in ("lost_response", "5xx_after_create"):
        when, run_id, created = runs[case]
        creates = fake.calls[kind.create]
        retry = deliver(server.url, kind.route, when)
        assert (retry.status_code, retry.json()["status"]) == (200, "processed"), (case, retry.text)
        assert retry.json()["target"] == {"type": kind.type, "resource": created}, case
        assert executions(fake, run_id) == [created], case
        assert fake.calls[kind.create] == creates, f"{case}: found, not created again"

    when, run_id, created = runs["409_on_the_retry"]
    kind.lag(fake)
    fake.fail(kind.create, "ALREADY_EXISTS", f"Resource {created} already exists")
    creates = fake.calls[kind.create]
    retry = deliver(server.url, kind.route, when)
    assert (retry.status_code, retry.json()["status"]) == (200, "processed"), retry.text
    assert retry.json()["target"]["resource"] == created
    assert fake.calls[kind.create] == creates + 1  # the create again, refused with 409
    assert executions(fake, run_id) == [created]

    when, run_id, created = runs["reconciliation_cannot_read"]
    fake.fail(kind.lookup, "PERMISSION_DENIED", "Permission denied on the lookup")
    creates = fake.calls[kind.create]
    blocked = deliver(server.url, kind.route, when)
    assert blocked.status_code == 504, blocked.text
    assert "cannot tell" in blocked.json()["error"]["message"]
    assert "Permission denied on the lookup" in blocked.json()["error"]["message"]
    assert fake.calls[kind.create] == creates
    assert run_record(server.url, run_id)["status"] == "in_progress"
    assert executions(fake, run_id) == [created]


@pytest.mark.parametrize(
    ("code", "http_status", "answer"),
    [
        ("RESOURCE_EXHAUSTED", None, (429, "throttled")),
        ("INVALID_ARGUMENT", None, (502, "failed")),
        ("PERMISSION_DENIED", None, (502, "failed")),
        ("FAILED_PRECONDITION", None, (502, "failed")),
    ],
)
def test_a_refusal_releases_the_claim_and_the_retry_creates_one(
    server, job_fakes, kind: JobType, code: str, http_status, answer
) -> None:
    fake = job_fakes[kind.type]
    message = f"the API refuses: {code}"
    fake.fail(kind.create, code, message, http_status=http_status, retry_after="7" if answer[0] == 429 else None)
    when = new_schedule_time()
    response = deliver(server.url, kind.route, when)
    assert (response.status_code, response.json()["status"]) == answer, response.text
    if answer[0] == 429:
        assert response.headers["Retry-After"] == "7"
    run_id = response.json()["run_id"]
    record = run_record(server.url, run_id)
    assert record["status"] == "failed" and message in record["last_error"]  # released
    assert executions(fake, run_id) == []

    retry = deliver(server.url, kind.route, when)
    assert (retry.status_code, retry.json()["status"]) == (200, "processed"), retry.text
    assert len(executions(fake, run_id)) == 1


def test_kill_9_after_the_creates_were_sent_creates_nothing_new(tmp_path, metadata, job_fakes) -> None:
    """One proxy with a create in flight on every type's API, each held after the API created the
    execution, is killed with SIGKILL; the restarted proxy finds each run in_progress and, after
    the lease, completes it with the execution that exists."""
    server_env = env(tmp_path, metadata, job_fakes)
    first = start_server(server_env, tmp_path)
    when = {name: new_schedule_time() for name in TYPES}
    callers = []
    for name, kind in TYPES.items():
        job_fakes[name].hold_after_create(kind.create)
        caller = threading.Thread(target=_deliver_quietly, args=(first.url, kind.route, when[name]))
        caller.start()
        callers.append(caller)
    for name, fake in job_fakes.items():
        assert fake.created_event.wait(60), f"{name}: the fake API never received the create"
    first.kill()
    for fake in job_fakes.values():
        fake.release()
    for caller in callers:
        caller.join(10)
    creates = {name: fake.calls[TYPES[name].create] for name, fake in job_fakes.items()}

    second = start_server(server_env, tmp_path)
    try:
        records = {name: run_record(second.url, run_id_of(kind.route, when[name])) for name, kind in TYPES.items()}
        assert {name: record["status"] for name, record in records.items()} == dict.fromkeys(TYPES, "in_progress")
        wait_for_lease_expiry(max(records.values(), key=lambda record: record["lease_expires"]))
        for name, kind in TYPES.items():
            fake, run_id = job_fakes[name], run_id_of(kind.route, when[name])
            [created] = executions(fake, run_id)
            response = deliver(second.url, kind.route, when[name])
            assert (response.status_code, response.json()["status"]) == (200, "processed"), (name, response.text)
            assert response.json()["target"]["resource"] == created, name
            assert executions(fake, run_id) == [created], name
            assert fake.calls[kind.create] == creates[name], name
            print(f"\n{name}: kill -9 after the create -> executions for the run: {len(executions(fake, run_id))}")
    finally:
        second.stop()
    for name, fake in job_fakes.items():
        assert fake.take_violations() == [], name


def _deliver_quietly(base_url: str, route: str, when: str) -> None:
    with contextlib.suppress(httpx.HTTPError):  # the killed proxy cannot answer
        deliver(base_url, route, when)


# --- overlap -------------------------------------------------------------------------------------


def _processed(server: ServerProcess, fake: FakeJobsApi, route: str) -> str:
    """A fresh run dispatched on `route` (every execution before it finished): its execution."""
    for name in list(fake.resources):
        fake.finish(name)
    response = deliver(server.url, route, new_schedule_time())
    assert (response.status_code, response.json()["status"]) == (200, "processed"), response.text
    return response.json()["target"]["resource"]


def test_overlap_skip_while_the_previous_execution_runs(server, job_fakes, kind: JobType) -> None:
    fake = job_fakes[kind.type]
    route = f"{kind.route}-skip"
    previous = _processed(server, fake, route)
    skipped = deliver(server.url, route, new_schedule_time())
    assert skipped.status_code == 200, skipped.text
    assert (skipped.json()["status"], skipped.json()["reason"]) == ("skipped", "overlap")
    assert f"previous execution {previous} is still running" in skipped.json()["message"]
    assert executions(fake, skipped.json()["run_id"]) == []

    fake.finish(previous)
    after = deliver(server.url, route, new_schedule_time())
    assert (after.status_code, after.json()["status"]) == (200, "processed"), after.text
    assert len(executions(fake, after.json()["run_id"])) == 1


def test_overlap_wait_answers_409_until_the_previous_execution_is_done(server, job_fakes, kind: JobType) -> None:
    fake = job_fakes[kind.type]
    route = f"{kind.route}-wait"
    previous = _processed(server, fake, route)
    when = new_schedule_time()
    waiting = deliver(server.url, route, when)
    assert (waiting.status_code, waiting.json()["status"]) == (409, "waiting"), waiting.text
    assert f"previous execution {previous} is still running" in waiting.json()["error"]["message"]
    run_id = waiting.json()["run_id"]
    assert executions(fake, run_id) == []

    fake.finish(previous, kind.failed_state)  # a failed execution is not running either
    retry = deliver(server.url, route, when)
    assert (retry.status_code, retry.json()["status"]) == (200, "processed"), retry.text
    assert executions(fake, run_id) == [retry.json()["target"]["resource"]]


# --- Dataflow: a name is unique only among active jobs ---------------------------------------------


@pytest.fixture
def dataflow(job_fakes) -> Iterator[FakeDataflow]:
    fake = job_fakes["dataflow_flex_template"]
    yield fake
    assert fake.take_violations() == [], "requests Google's API would reject"
    assert fake.pending_steps() == 0, "a scripted misbehaviour was never triggered"


def test_dataflow_a_lost_response_then_the_job_finishes_then_the_retry_is_one_job(server, dataflow) -> None:
    """The launch's answer is lost; the job runs and finishes; then Scheduler's retry arrives.
    Dataflow would launch a second job of the same name now (it refuses only active names), so the
    retry must find the finished job: one job."""
    route = TYPES["dataflow_flex_template"].route
    dataflow.drop_after_create(DATAFLOW_LAUNCH)
    when = new_schedule_time()
    response = deliver(server.url, route, when)
    assert (response.status_code, response.json()["status"]) == (504, "unknown"), response.text
    run_id = response.json()["run_id"]
    [job] = executions(dataflow, run_id)
    dataflow.finish(job)
    dataflow.add_other_jobs(PROJECT, LOCATION, 60)  # the listing pages past other runs' jobs

    wait_for_lease_expiry(run_record(server.url, run_id))
    retry = deliver(server.url, route, when)
    assert (retry.status_code, retry.json()["status"]) == (200, "processed"), retry.text
    assert retry.json()["target"]["resource"] == job
    assert dataflow.jobs_named(f"runonce-{run_id}") == [job]
    print(f"\ndataflow_flex_template: lost response, job finished, retry -> jobs: {len(executions(dataflow, run_id))}")


def test_dataflow_a_retry_after_a_refusal_asks_before_it_launches(server, dataflow) -> None:
    """An answer runonce reads as "nothing created" (here a 400 that came after the launch, and the
    job has finished since) releases the claim, so the runner does not reconcile the retry; the
    launch itself still lists the run's name first, finds the job, and launches nothing."""
    route = TYPES["dataflow_flex_template"].route
    dataflow.fail_after_create(DATAFLOW_LAUNCH, "INVALID_ARGUMENT", "Invalid template parameters")
    when = new_schedule_time()
    refused = deliver(server.url, route, when)
    assert (refused.status_code, refused.json()["status"]) == (502, "failed"), refused.text
    run_id = refused.json()["run_id"]
    [job] = executions(dataflow, run_id)
    dataflow.finish(job)
    launches = dataflow.calls[DATAFLOW_LAUNCH]

    retry = deliver(server.url, route, when)
    assert (retry.status_code, retry.json()["status"]) == (200, "processed"), retry.text
    assert retry.json()["target"]["resource"] == job
    assert dataflow.calls[DATAFLOW_LAUNCH] == launches
    assert dataflow.jobs_named(f"runonce-{run_id}") == [job]


def test_dataflow_refuses_a_second_launch_while_the_job_is_active_and_the_run_adopts_it(server, dataflow) -> None:
    """The listing lags the lost launch, so the retry launches again: Dataflow itself answers 409
    (an active job has the name), and the run completes with that job."""
    route = TYPES["dataflow_flex_template"].route
    dataflow.drop_after_create(DATAFLOW_LAUNCH)
    when = new_schedule_time()
    run_id = deliver(server.url, route, when).json()["run_id"]
    [job] = executions(dataflow, run_id)
    wait_for_lease_expiry(run_record(server.url, run_id))
    dataflow.lag_lists(2)
    launches = dataflow.calls[DATAFLOW_LAUNCH]
    retry = deliver(server.url, route, when)
    assert (retry.status_code, retry.json()["status"]) == (200, "processed"), retry.text
    assert retry.json()["target"]["resource"] == job
    assert dataflow.calls[DATAFLOW_LAUNCH] == launches + 1  # refused by Dataflow: the name is active
    assert dataflow.jobs_named(f"runonce-{run_id}") == [job]
