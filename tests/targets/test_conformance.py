"""One conformance suite for every Google target: each preset of the engine, driven in-process
against its fake (which holds every request to the API's discovery document), through the faults a
run meets: a lost answer, a 5xx after the create, ALREADY_EXISTS, 429, a 4xx, a hang past the
dispatch timeout, a lookup that cannot read, and a run whose record was lost.

Each row of the outcome table is tested code by code in test_google_outcomes.py; here a few codes
of each row run through every target. What each case asserts is what a user notices: whether the
claim is kept (unknown) or released (throttled, failed), and that a retry finds the run's one
execution instead of starting a second. Per-target behaviour (what the call carries, the config
rules) stays in each target's own tests.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from click.testing import CliRunner

from runonce.cli import main
from runonce.routes import parse_routes
from runonce.settings import ConfigError
from runonce.targets import (
    TARGET_TYPES,
    DispatchRequest,
    TargetFailed,
    TargetOutcomeUnknown,
    TargetThrottled,
)
from runonce.targets.engine import GoogleEngineTarget
from tests.fakes import aiplatform, batch, bigquery, cloud_build, cloud_run, cloud_tasks, dataflow, dataproc, workflows
from tests.fakes.metadata import FakeMetadataServer, MetadataTokenAuth
from tests.support.procs import free_port

from .run_named import LOCATION, PROJECT, TYPES

PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
JOB = f"{PARENT}/jobs/nightly"
TRIGGER = f"{PARENT}/triggers/nightly-build"
WORKFLOW = f"{PARENT}/workflows/etl"
QUEUE = f"{PARENT}/queues/exports"
JOB_ID = "jobs/runonce-${run_id:55}"
HANG_SECONDS = 1.5
TIMEOUT_SECONDS = 0.5
"""The hang case's dispatch timeout; every other call waits as long as a loaded machine needs."""
PATIENT = httpx.Timeout(30.0)


@dataclass
class Preset:
    """One target type under the suite: its route's target block, its fake, the fake's names of
    the create and of the read a lookup makes."""

    target: dict[str, Any]
    make_fake: Callable[[FakeMetadataServer], Any]
    create: str
    lookup: str
    setup: Callable[[Any], None] = lambda fake: None
    keeps_its_name: bool = True
    """The API refuses the run's name again (or runonce looks it up before every create), so a run
    whose record was lost is found, not started twice."""
    lookup_lags: Callable[[Any], None] | None = None
    recorded: Callable[[str], str] = lambda resource: resource
    """The resource as runonce records it, from the fake's name for it."""


PRESETS: dict[str, Preset] = {
    **{
        name: Preset(kind.target, kind.make_fake, kind.create, kind.lookup)
        for name, kind in TYPES.items()
        if name != "dataflow_flex_template"
    },
    "dataflow_flex_template": Preset(
        TYPES["dataflow_flex_template"].target,
        dataflow.FakeDataflow,
        dataflow.LAUNCH,
        dataflow.LIST,
        lookup_lags=lambda fake: fake.lag_lists(1),
    ),
    "bigquery_job": Preset(
        {
            "type": "bigquery_job",
            "project": PROJECT,
            "location": "US",
            "configuration": {"query": {"query": "SELECT 1"}},
        },
        bigquery.FakeBigQuery,
        bigquery.INSERT,
        bigquery.GET,
    ),
    "cloud_tasks_task": Preset(
        {"type": "cloud_tasks_task", "queue": QUEUE, "http_request": {"url": "https://example.com/run"}},
        cloud_tasks.FakeCloudTasks,
        cloud_tasks.CREATE,
        cloud_tasks.GET,
        setup=lambda fake: fake.add_queue(QUEUE),
    ),
    "cloud_run_job": Preset(
        {"type": "cloud_run_job", "job": JOB},
        cloud_run.FakeCloudRun,
        cloud_run.RUN,
        cloud_run.LIST,
        setup=lambda fake: fake.add_job(JOB),
        keeps_its_name=False,
    ),
    "cloud_build_trigger": Preset(
        {"type": "cloud_build_trigger", "trigger": TRIGGER},
        cloud_build.FakeCloudBuild,
        cloud_build.RUN,
        cloud_build.LIST,
        setup=lambda fake: fake.add_trigger(TRIGGER),
        keeps_its_name=False,
    ),
    "google_api": Preset(
        {
            "type": "google_api",
            "api": "batch.v1",
            "method": "projects.locations.jobs.create",
            "params": {"parent": PARENT, "jobId": "runonce-${run_id:55}", "requestId": "${run_uuid}"},
            "body": {**TYPES["batch_job"].target["job"], "labels": {"runonce-run-id": "${run_id:63}"}},
            "reconcile": {
                "method": "projects.locations.jobs.get",
                "params": {"name": f"{PARENT}/jobs/runonce-${{run_id:55}}"},
            },
        },
        batch.FakeBatch,
        batch.CREATE,
        batch.GET,
        recorded=lambda resource: f"v1/{resource}",  # the reconcile call, as google_api records it
    ),
    "workflows": Preset(
        {"type": "workflows", "workflow": WORKFLOW},
        workflows.FakeWorkflows,
        workflows.CREATE,
        workflows.LIST,
        setup=lambda fake: fake.add_workflow(WORKFLOW),
        keeps_its_name=False,
    ),
}
assert {batch.CREATE, dataproc.CREATE, aiplatform.CREATE} <= {preset.create for preset in PRESETS.values()}

_runs = iter(range(10**6))


@pytest.fixture(scope="module")
def metadata() -> Iterator[FakeMetadataServer]:
    server = FakeMetadataServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def fakes(metadata: FakeMetadataServer) -> Iterator[dict[str, Any]]:
    made = {}
    for name, preset in PRESETS.items():
        made[name] = preset.make_fake(metadata)
        preset.setup(made[name])
    yield made
    for fake in made.values():
        fake.close()


@dataclass
class Case:
    name: str
    preset: Preset
    fake: Any
    target: GoogleEngineTarget[Any]

    def executions(self, request: DispatchRequest) -> list[str]:
        """What the fake created carrying the run (its id, label or token)."""
        tokens = {request.run_id, request.run_id[:63]}
        with self.fake.lock:
            return [self.preset.recorded(c.resource) for c in self.fake.created if c.token in tokens]


@pytest.fixture(params=sorted(PRESETS))
async def case(request: pytest.FixtureRequest, metadata, fakes) -> AsyncIterator[Case]:
    preset, fake = PRESETS[request.param], fakes[request.param]
    entry = TARGET_TYPES[request.param]
    async with httpx.AsyncClient(timeout=PATIENT) as http:
        target = entry.build(
            entry.config.model_validate(preset.target), _Context(http, MetadataTokenAuth(metadata.host)), fake.url
        )
        assert isinstance(target, GoogleEngineTarget)
        yield Case(request.param, preset, fake, target)
    fake.create_delay = 0.0
    assert fake.take_violations() == [], "requests Google's API would reject"
    assert fake.pending_steps() == 0, "a scripted misbehaviour was never triggered"


@dataclass
class _Context:
    """What a target's builder takes: the HTTP client and the credentials."""

    http: httpx.AsyncClient
    google_auth: Any


def new_request(attempt: int = 1) -> DispatchRequest:
    return DispatchRequest(
        run_id=hashlib.sha256(f"conformance-{next(_runs)}".encode()).hexdigest(),
        route="r",
        job="nightly-job",
        schedule_time="2026-10-16T03:00:00Z",
        source="scheduler",
        attempt=attempt,
        created_at=datetime.now(UTC),
    )


def retry_of(request: DispatchRequest) -> DispatchRequest:
    return DispatchRequest(**{**request.__dict__, "attempt": request.attempt + 1})


async def test_a_fresh_run_creates_one_execution_and_is_found_again(case: Case) -> None:
    request = new_request()
    resource = await case.target.dispatch(request)
    assert len(case.executions(request)) == 1
    assert await case.target.reconcile(request) == resource
    assert await case.target.reconcile(new_request()) is None  # another run's: nothing


async def test_a_lost_answer_keeps_the_claim_and_the_retry_finds_the_execution(case: Case) -> None:
    request = new_request()
    case.fake.drop_after_create(case.preset.create)
    with pytest.raises(TargetOutcomeUnknown, match="no answer"):
        await case.target.dispatch(request)
    [created] = case.executions(request)
    assert await case.target.reconcile(retry_of(request)) == created


@pytest.mark.parametrize("code", ["UNAVAILABLE", "DEADLINE_EXCEEDED"])
async def test_a_5xx_after_the_create_keeps_the_claim(case: Case, code: str) -> None:
    request = new_request()
    case.fake.fail_after_create(case.preset.create, code, "the API broke after creating it")
    with pytest.raises(TargetOutcomeUnknown, match="the API broke"):
        await case.target.dispatch(request)
    [created] = case.executions(request)
    assert await case.target.reconcile(retry_of(request)) == created


async def test_a_hang_past_the_dispatch_timeout_keeps_the_claim(case: Case, metadata) -> None:
    request = new_request()
    case.fake.hang_after_create(case.preset.create, HANG_SECONDS)
    entry = TARGET_TYPES[case.name]
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=TIMEOUT_SECONDS)) as http:
        impatient = entry.build(case.target.config, _Context(http, MetadataTokenAuth(metadata.host)), case.fake.url)
        with pytest.raises(TargetOutcomeUnknown, match="no answer"):
            await impatient.dispatch(request)
    # On a loaded machine the fake may still be checking the request when runonce gives up on it:
    # the create lands after the timeout, as it can at Google. Wait for it, then expect exactly one.
    deadline = time.monotonic() + HANG_SECONDS + 10
    while not case.executions(request) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    [created] = case.executions(request)
    assert await case.target.reconcile(retry_of(request)) == created


async def test_already_exists_adopts_the_runs_execution(case: Case) -> None:
    request = new_request()
    case.fake.drop_after_create(case.preset.create)
    with pytest.raises(TargetOutcomeUnknown):
        await case.target.dispatch(request)
    [created] = case.executions(request)
    case.fake.fail(case.preset.create, "ALREADY_EXISTS", "already exists")
    if case.preset.lookup_lags:
        case.preset.lookup_lags(case.fake)  # the lookup before the create does not see it yet
    assert await case.target.dispatch(retry_of(request)) == created
    assert case.executions(request) == [created]


async def test_already_exists_that_nothing_can_be_found_for_keeps_the_claim(case: Case) -> None:
    """Except Cloud Tasks: its ALREADY_EXISTS also answers for a task that ran within the hour and
    was deleted, so the answer alone proves the run's task was created."""
    request = new_request()
    case.fake.fail(case.preset.create, "ALREADY_EXISTS", "already exists")
    if case.name == "cloud_tasks_task":
        assert await case.target.dispatch(request) == f"{QUEUE}/tasks/{request.run_id}"
        return
    with pytest.raises(TargetOutcomeUnknown, match="cannot be read yet"):
        await case.target.dispatch(request)


@pytest.mark.parametrize(("code", "status"), [("RESOURCE_EXHAUSTED", None), ("RESOURCE_EXHAUSTED", 503)])
async def test_throttling_releases_the_claim_with_the_apis_delay(case: Case, code: str, status: int | None) -> None:
    request = new_request()
    case.fake.fail(case.preset.create, code, "slow down", http_status=status, retry_after="7")
    with pytest.raises(TargetThrottled, match="slow down") as caught:
        await case.target.dispatch(request)
    assert caught.value.retry_after == 7
    assert case.executions(request) == []


@pytest.mark.parametrize("code", ["INVALID_ARGUMENT", "PERMISSION_DENIED"])
async def test_a_4xx_releases_the_claim_with_the_apis_message(case: Case, code: str) -> None:
    request = new_request()
    case.fake.fail(case.preset.create, code, f"the API says {code}")
    with pytest.raises(TargetFailed, match=f"the API says {code}"):
        await case.target.dispatch(request)
    assert case.executions(request) == []


@pytest.mark.parametrize("code", ["PERMISSION_DENIED", "INTERNAL"])
async def test_a_lookup_that_cannot_read_keeps_the_claim(case: Case, code: str) -> None:
    request = new_request()
    await case.target.dispatch(request)
    case.fake.fail(case.preset.lookup, code, "the lookup fails")
    with pytest.raises(TargetOutcomeUnknown, match=r"cannot tell whether this run already started.*the lookup fails"):
        await case.target.reconcile(retry_of(request))


@pytest.mark.parametrize("case", sorted(name for name, p in PRESETS.items() if p.keeps_its_name), indirect=True)
async def test_a_run_whose_record_was_lost_is_not_started_twice(case: Case) -> None:
    """The store lost the run's record (no persistence, past retention): the redelivery is a first
    attempt again, and the run's name (or the lookup before every create) finds its execution.
    Cloud Run jobs, Cloud Build and Workflows take no client-chosen name: for them the record is
    the guard (docs/how-to/targets/index.md)."""
    request = new_request()
    created = await case.target.dispatch(request)
    again = await case.target.dispatch(DispatchRequest(**{**request.__dict__, "created_at": datetime.now(UTC)}))
    assert again == created
    assert len(case.executions(request)) == 1


async def test_an_api_that_cannot_be_reached_was_sent_nothing(case: Case, metadata) -> None:
    """Released at once, except where every create is preceded by a lookup (Dataflow): a lookup
    that cannot read keeps the claim, since an earlier attempt may have created the run's job."""
    entry = TARGET_TYPES[case.name]
    async with httpx.AsyncClient(timeout=PATIENT) as http:
        unreachable = entry.build(
            case.target.config, _Context(http, MetadataTokenAuth(metadata.host)), f"http://127.0.0.1:{free_port()}"
        )
        outcome = TargetOutcomeUnknown if case.target.FIND_BEFORE_CREATE else TargetFailed
        with pytest.raises(outcome, match="could not connect, nothing was sent"):
            await unreachable.dispatch(new_request())


# --- start-up: every preset route is held to its API's discovery document --------------------------

START_UP_MISTAKES = [
    ("batch_job", ("job", "taskGroups", 0, "taskCount"), "many", "job.taskGroups[0].taskCount: expected an int64"),
    ("batch_job", ("job", "logsPolicy"), {"destinaton": "CLOUD_LOGGING"}, "job.logsPolicy: LogsPolicy has no field"),
    (
        "dataflow_flex_template",
        ("launch_parameter", "environment", "maxWorkers"),
        "four",
        "launch_parameter.environment.maxWorkers: expected an integer",
    ),
    ("dataproc_batch", ("batch", "runtimeConfig", "version"), 2.2, "batch.runtimeConfig.version: expected a string"),
    ("vertex_pipeline_job", ("pipeline_job", "displayName"), 5, "pipeline_job.displayName: expected a string"),
    (
        "bigquery_job",
        ("configuration", "query", "useQueryCache"),
        "yes",
        "configuration.query.useQueryCache: expected a boolean",
    ),
]


@pytest.mark.parametrize(("kind", "path", "value", "expected"), START_UP_MISTAKES)
def test_a_route_the_api_would_refuse_is_refused_at_start_up_in_one_line(
    kind: str, path: tuple[Any, ...], value: Any, expected: str
) -> None:
    """The preset's call, built from sample runs, is checked with the same document checks as a
    `google_api` route: the field named as the route writes it, never a traceback."""
    target = copy.deepcopy(PRESETS[kind].target)
    holder = target
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = value
    with pytest.raises(ConfigError) as caught:
        parse_routes(json.dumps({"routes": {"r": {"target": target}}}), "routes file r.yaml")
    message = str(caught.value)
    assert message.startswith("routes file r.yaml: route 'r': field 'target': ")
    assert expected in message
    assert len(message.splitlines()) == 1


@pytest.mark.parametrize("kind", sorted(PRESETS))
def test_every_preset_route_of_the_suite_loads(kind: str) -> None:
    parse_routes(json.dumps({"routes": {"r": {"target": PRESETS[kind].target}}}), "routes file r.yaml")


NULLED = {  # an empty YAML key (its children commented out) is null where the API needs an object
    "batch_job": ("job", "taskGroups", 0, "taskSpec", "environment"),
    "dataflow_flex_template": ("launch_parameter", "environment"),
    "dataproc_batch": ("batch", "runtimeConfig"),
    "vertex_pipeline_job": ("pipeline_job", "runtimeConfig"),
    "bigquery_job": ("configuration", "labels"),
}


@pytest.mark.parametrize("kind", sorted(NULLED))
def test_an_empty_yaml_key_is_refused_at_start_up_by_serve_and_lint(kind: str, tmp_path: Path) -> None:
    """runonce does not fill in what a route's author commented out: `serve` and `lint` refuse the
    route in one line naming it and the field, and say to give the key a value or delete it."""
    target = copy.deepcopy(PRESETS[kind].target)
    holder = target
    path = NULLED[kind]
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = None
    field = ".".join(str(part) for part in path).replace(".0.", "[0].")
    routes = tmp_path / "routes.yaml"
    routes.write_text(yaml.safe_dump({"routes": {"r": {"target": target}}}), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        parse_routes(routes.read_text(encoding="utf-8"), f"routes file {routes}")
    line = str(caught.value)
    assert "\n" not in line and line.startswith(f"routes file {routes}: route 'r': field 'target': {field}: "), line
    assert "is empty (null)" in line and "give it a value" in line and "remove the key" in line, line

    env = {"RUNONCE_AUTH": "none", "RUNONCE_STORE": "sqlite:///:memory:", "RUNONCE_ROUTES_FILE": str(routes)}
    served = CliRunner().invoke(main, ["serve", "--port", "1"], env=env)
    assert served.exit_code != 0 and line in served.output and "Traceback" not in served.output, served.output
    linted = CliRunner().invoke(main, ["lint", str(routes)], env={**env, "RUNONCE_ROUTES_FILE": None})
    assert linted.exit_code == 1 and f"{routes}: -: error: {line} [invalid_routes]" in linted.output, linted.output


def _route_fields(model: Any, target: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(the dotted field, the block it is in, the target with that field emptied) for every field of a
    target's config model and of the blocks in it that the route fills, but `type`."""
    for name, field in model.model_fields.items():
        if name == "type":
            continue
        emptied = copy.deepcopy(target)
        holder = emptied
        for part in prefix.split(".")[:-1] if prefix else []:
            holder = holder[part]
        holder[name] = None
        yield f"{prefix}{name}", prefix.rstrip("."), emptied
        inner = field.annotation
        for candidate in getattr(inner, "__args__", (inner,)):
            block = target
            for part in f"{prefix}{name}".split("."):
                block = block.get(part) if isinstance(block, dict) else None
            if isinstance(candidate, type) and hasattr(candidate, "model_fields") and isinstance(block, dict):
                yield from _route_fields(candidate, target, f"{prefix}{name}.")


@pytest.mark.parametrize("kind", sorted(PRESETS))
def test_an_empty_key_of_the_routes_own_fields_is_refused_never_taken_for_its_default(kind: str) -> None:
    """`oidc_token:`, `args:` or `run_parameters:` with their lines commented out are null: refused in
    one line naming the field, not taken for "no token", "the image's args" or "no parameters"."""
    preset = PRESETS[kind]
    checked = []
    for field, block, target in _route_fields(TARGET_TYPES[kind].config, preset.target):
        with pytest.raises(ConfigError) as caught:
            parse_routes(yaml.safe_dump({"routes": {"r": {"target": target}}}), "routes file r.yaml")
        line = str(caught.value)
        name = field.rsplit(".", 1)[-1]
        wheres = [f"field 'target{'.' + block if block else ''}': {name}: ", f"field 'target.{field}': {name}: "]
        assert any(where + "is empty (null)" in line for where in wheres), (field, line)
        assert "give it" in line and "\n" not in line, (field, line)
        checked.append(field)
    assert len(checked) >= 2, checked


def test_in_json_a_null_field_is_one_left_out() -> None:
    """Terraform's `jsonencode` writes an unset attribute as null: in a JSON routes document a null
    field of runonce's own is the field left out (in the API's request body it is still refused)."""
    target = {**PRESETS["cloud_tasks_task"].target}
    target["http_request"] = {**target["http_request"], "oidc_token": None}
    route = {"target": target, "schedule": None, "namespace": None, "max_lateness_seconds": None}
    routes = parse_routes(json.dumps({"routes": {"r": route}}), "RUNONCE_ROUTES")
    assert routes["r"].schedule is None and routes["r"].target.http_request.oidc_token is None  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="is empty"):
        parse_routes(yaml.safe_dump({"routes": {"r": route}}), "routes file r.yaml")


def test_a_route_no_run_of_which_could_be_sent_is_refused_at_start_up() -> None:
    """A Workflows argument over the API's 32 KiB would fail every delivery: refused in one line."""
    target = {**PRESETS["workflows"].target, "argument": {"blob": "x" * 40000}}
    with pytest.raises(ConfigError, match=r"field 'target': the argument is over the API's 32768 bytes$"):
        parse_routes(json.dumps({"routes": {"r": {"target": target}}}), "routes file r.yaml")
