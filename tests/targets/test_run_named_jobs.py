"""The batch-workload targets in-process (`batch_job`, `dataflow_flex_template`, `dataproc_batch`,
`vertex_pipeline_job`), each against its fake API (checked against its discovery document): what a
route may say, what the create receives, and how every answer becomes an outcome. The same paths
through a real `runonce serve` are in test_run_named_jobs_e2e.py."""

from __future__ import annotations

import copy
import hashlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import yaml
from pydantic import BaseModel, ValidationError, model_validator

from runonce.routes import parse_routes
from runonce.settings import ConfigError
from runonce.targets import (
    TARGET_TYPES,
    DispatchRequest,
    TargetError,
    TargetFailed,
    TargetOutcomeUnknown,
    engine,
)
from runonce.targets.engine import Call, GoogleEngineTarget, Listing, request_id_for, run_hex
from runonce.targets.presets import check_route, resource_id_for, run_fields
from tests.fakes.dataflow import LAUNCH, LIST, FakeDataflow
from tests.fakes.metadata import FakeMetadataServer, MetadataTokenAuth
from tests.support.discovery import Discovery, load_document
from tests.support.procs import REPO, free_port

from .run_named import LOCATION, PROJECT, TYPES, JobType

_runs = iter(range(10**6))
WHEN = "2026-10-16T03:00:00Z"


@pytest.fixture(scope="module")
def fakes(metadata: FakeMetadataServer) -> Iterator[dict[str, Any]]:
    made = {name: kind.make_fake(metadata) for name, kind in TYPES.items()}
    yield made
    for fake in made.values():
        fake.close()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=3) as client:
        yield client


@pytest.fixture(params=sorted(TYPES))
def kind(request: pytest.FixtureRequest, fakes) -> Iterator[JobType]:
    yield TYPES[request.param]
    fake = fakes[request.param]
    assert fake.take_violations() == [], "requests Google's API would reject"
    assert fake.pending_steps() == 0, "a scripted misbehaviour was never triggered"


def new_request(schedule_time: str | None = WHEN, payload: dict | None = None, attempt: int = 1) -> DispatchRequest:
    run_id = hashlib.sha256(f"job-run-{next(_runs)}".encode()).hexdigest()
    return DispatchRequest(
        run_id=run_id,
        route="r",
        job="nightly-job",
        schedule_time=schedule_time,
        source="scheduler",
        payload=payload or {},
        attempt=attempt,
    )


def target_for(kind: JobType, fakes, http, metadata, endpoint: str | None = None, **change: Any):
    entry = TARGET_TYPES[kind.type]
    config = entry.config.model_validate({**kind.target, **change})
    return entry.adapter(config, http, MetadataTokenAuth(metadata.host), endpoint or fakes[kind.type].url)


def created_for(fake, request: DispatchRequest) -> list[str]:
    return fake.created_for(request.run_id[:63])


# --- what a route may say ------------------------------------------------------------------------


def error_of(target: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_routes(json.dumps({"routes": {"r": {"target": target}}}), "routes file r.yaml")
    message = str(caught.value)
    assert message.startswith("routes file r.yaml: route 'r': ")
    assert len(message.splitlines()) == 1
    return message


def changed(kind: str, path: str, value: Any) -> dict[str, Any]:
    """The type's valid target with the dotted `path` set to `value` (None deletes it)."""
    target = copy.deepcopy(TYPES[kind].target)
    holder: Any = target
    parts = path.split(".")
    for part in parts[:-1]:
        holder = holder[int(part)] if isinstance(holder, list) else holder.setdefault(part, {})
    if value is None:
        holder.pop(parts[-1], None)
    else:
        holder[parts[-1]] = value
    return target


GROUP = "job.taskGroups.0"
MISTAKES = [
    # every type: the parent
    *[(kind, "project", "Bad_Project", "field 'target.project': must be a project ID") for kind in TYPES],
    *[(kind, "location", "US", "field 'target.location': must be a region such as us-central1") for kind in TYPES],
    *[(kind, "schedule", "daily", "field 'target.schedule': Extra inputs are not permitted") for kind in TYPES],
    # batch_job
    ("batch_job", "job.name", "mine", "job.name: runonce names the job from the run (jobId)"),
    ("batch_job", "job.taskGroups", None, "job.taskGroups: required by Job"),
    ("batch_job", "job.taskGroups", [], "job.taskGroups: required by Job, and [] is empty (the API refuses it)"),
    (
        "batch_job",
        "job.taskGroups.0.taskSpec.runnables",
        [{}],
        "job.taskGroups[0].taskSpec.runnables[0]: Runnable needs one of container, script, barrier",
    ),
    (
        "batch_job",
        "job.taskGroups.0.taskSpec.runnables",
        [{"script": {"text": "echo"}, "barrier": {}}],
        "job.taskGroups[0].taskSpec.runnables[0]: barrier and script are both set; Runnable takes only one of",
    ),
    ("batch_job", "job.taskGroups", ["x"], 'job.taskGroups[0]: expected an object (TaskGroup), got str "x"'),
    ("batch_job", f"{GROUP}.taskSpec", None, "job.taskGroups[0].taskSpec: required by TaskGroup"),
    ("batch_job", f"{GROUP}.taskSpec.runnables", [], "taskSpec.runnables: required by TaskSpec, and [] is empty"),
    ("batch_job", f"{GROUP}.taskSpec.runnables", ["echo"], "taskSpec.runnables[0]: expected an object (Runnable)"),
    (
        "batch_job",
        f"{GROUP}.taskSpec.environment",
        {"variables": {"RUNONCE_RUN_ID": "x"}},
        "job.taskGroups[0].taskSpec.environment.variables: RUNONCE_RUN_ID is set by runonce",
    ),
    (
        "batch_job",
        f"{GROUP}.taskSpec.environment",
        {"secretVariables": {"RUNONCE_SCHEDULE_TIME": "projects/p/secrets/s/versions/1"}},
        "taskSpec.environment.secretVariables: RUNONCE_SCHEDULE_TIME is set by runonce",
    ),
    (
        "batch_job",
        f"{GROUP}.taskSpec.runnables",
        [{"script": {"text": "x"}, "environment": {"variables": {"RUNONCE_SCHEDULE_TIME": "x"}}}],
        "taskSpec.runnables[0].environment.variables: RUNONCE_SCHEDULE_TIME is set by runonce",
    ),
    (
        "batch_job",
        f"{GROUP}.taskEnvironments",
        [{"variables": {}}, {"variables": {"RUNONCE_RUN_ID": "x"}}],
        "job.taskGroups[0].taskEnvironments[1].variables: RUNONCE_RUN_ID is set by runonce",
    ),
    (  # "Field parallelism must be 1 if the scheduling_policy is IN_ORDER."
        "batch_job",
        "job.taskGroups",
        [{"parallelism": "2", "schedulingPolicy": "IN_ORDER", "taskSpec": {"runnables": [{"script": {"text": "x"}}]}}],
        "job.taskGroups[0].parallelism: must be 1 with schedulingPolicy IN_ORDER",
    ),
    (  # "When `destination` is set to `PATH`, you must set this field"
        "batch_job",
        "job.logsPolicy",
        {"destination": "PATH"},
        "job.logsPolicy: destination PATH needs logsPath",
    ),
    (  # the deprecated map form of a task's environment
        "batch_job",
        f"{GROUP}.taskSpec.environments",
        {"STAGE": "prod", "RUNONCE_RUN_ID": "fixed"},
        "job.taskGroups[0].taskSpec.environments: RUNONCE_RUN_ID is set by runonce",
    ),
    (
        "batch_job",
        f"{GROUP}.taskEnvironments",
        {"variables": {}},
        "job.taskGroups[0].taskEnvironments: expected an array, got dict",
    ),
    ("batch_job", f"{GROUP}.taskSpec.environment", "A=1", "taskSpec.environment: expected an object (Environment)"),
    (
        "batch_job",
        f"{GROUP}.taskSpec.environment",
        {"variables": ["A=1"]},
        "environment.variables: expected an object (object), got list",
    ),
    (
        "batch_job",
        "job.allocationPolicy",
        "spot",
        'job.allocationPolicy: expected an object (AllocationPolicy), got str "spot"',
    ),
    ("batch_job", "job.labels", {"runonce-run-id": "x"}, "label 'runonce-run-id' is set by runonce itself"),
    ("batch_job", "job.labels", {"Team": "x"}, "label key 'Team'"),
    ("batch_job", "job.labels", "team", 'job.labels: expected an object (object), got str "team"'),
    ("batch_job", "job", ["x"], "field 'target.job': Input should be a valid dictionary"),
    # dataflow_flex_template
    ("dataflow_flex_template", "launch_parameter.jobName", "mine", "launch_parameter.jobName: runonce names the job"),
    ("dataflow_flex_template", "launch_parameter.update", True, "launch_parameter.update: updating a running"),
    ("dataflow_flex_template", "launch_parameter.transformNameMappings", {"a": "b"}, "it applies to updates only"),
    ("dataflow_flex_template", "launch_parameter.containerSpecGcsPath", None, "needs containerSpecGcsPath"),
    (
        "dataflow_flex_template",
        "launch_parameter.parameters",
        ["x"],
        "parameters: expected an object (object), got list",
    ),
    (
        "dataflow_flex_template",
        "launch_parameter.environment.additionalUserLabels",
        {"runonce-run-id": "x"},
        "label 'runonce-run-id' is set by runonce itself",
    ),
    (
        "dataflow_flex_template",
        "run_parameters",
        ["run_id", "attempt"],
        "'attempt' is not one of run_id, schedule_time",
    ),
    ("dataflow_flex_template", "run_parameters", {"run_id": "a b"}, "run_id: 'a b' is not a parameter name"),
    ("dataflow_flex_template", "run_parameters", {"run_id": 7}, "run_id: 7 is not a parameter name"),
    ("dataflow_flex_template", "run_parameters", {"run_id": "p", "schedule_time": "p"}, "must go to different"),
    ("dataflow_flex_template", "run_parameters", "run_id", "must be a list of run_id, schedule_time or a mapping"),
    ("dataflow_flex_template", "run_parameters", [1], "must be a list of run_id, schedule_time or a mapping"),
    ("dataflow_flex_template", "run_parameters", ["input"], "'input' is not one of run_id, schedule_time"),
    (
        "dataflow_flex_template",
        "launch_parameter.parameters",
        {"run_id": "mine"},
        "launch_parameter.parameters.run_id is set by runonce (run_parameters.run_id)",
    ),
    # dataproc_batch
    ("dataproc_batch", "batch.name", "mine", "batch.name: runonce names the batch from the run (batchId)"),
    ("dataproc_batch", "batch.state", "RUNNING", "batch.state: output only in Batch; a request cannot set it"),
    (
        "dataproc_batch",
        "batch.pysparkBatch",
        None,
        "exactly one workload of pysparkBatch, sparkBatch, sparkRBatch, sparkSqlBatch, pysparkNotebookBatch (got none)",
    ),
    (
        "dataproc_batch",
        "batch.sparkBatch",
        {"mainClass": "Etl"},
        "batch: pysparkBatch and sparkBatch are both set; Batch takes only one of pysparkBatch, pysparkNotebookBatch, "
        "sparkBatch, sparkRBatch, sparkSqlBatch",
    ),
    (
        "dataproc_batch",
        "batch.pysparkBatch",
        "etl.py",
        "batch.pysparkBatch: expected an object (PySparkBatch), got str",
    ),
    (
        "dataproc_batch",
        "batch.environmentConfig",
        {"executionConfig": {"idleTtl": "3600s"}},
        "batch.environmentConfig.executionConfig.idleTtl: applies to sessions only, not to a batch",
    ),
    (
        "dataproc_batch",
        "batch.runtimeConfig.properties",
        {"spark.executorEnv.RUNONCE_RUN_ID": "x"},
        "batch.runtimeConfig.properties: spark.executorEnv.RUNONCE_RUN_ID is set by runonce",
    ),
    (
        "dataproc_batch",
        "batch.runtimeConfig.properties",
        {"spark.dataproc.driverEnv.RUNONCE_SCHEDULE_TIME": "x"},
        "spark.dataproc.driverEnv.RUNONCE_SCHEDULE_TIME is set by runonce",
    ),
    (
        "dataproc_batch",
        "batch.runtimeConfig.properties",
        ["a"],
        "batch.runtimeConfig.properties: expected an object (object), got list",
    ),
    ("dataproc_batch", "batch.labels", {"runonce-run-id": "x"}, "label 'runonce-run-id' is set by runonce itself"),
    # vertex_pipeline_job
    ("vertex_pipeline_job", "pipeline_job.name", "mine", "pipeline_job.name: runonce names the pipeline job"),
    (
        "vertex_pipeline_job",
        "pipeline_job.runtimeConfig.parameters",
        {"run": {"stringValue": "x"}},  # the deprecated form of parameterValues
        "pipeline_job.runtimeConfig.parameters.run is set by runonce (run_parameters.run_id)",
    ),
    (
        "vertex_pipeline_job",
        "pipeline_job.templateUri",
        None,
        "needs pipelineSpec (a compiled pipeline) or templateUri",
    ),
    (
        "vertex_pipeline_job",
        "pipeline_job.pipelineSpec",
        "spec.json",
        'pipeline_job.pipelineSpec: expected an object (object), got str "spec.json"',
    ),
    (
        "vertex_pipeline_job",
        "pipeline_job.runtimeConfig.parameterValues",
        {"ds": "2026-01-01"},
        "parameterValues.ds is set by runonce (run_parameters.schedule_time)",
    ),
    ("vertex_pipeline_job", "pipeline_job.labels", {"runonce-run-id": "x"}, "label 'runonce-run-id' is set by"),
    ("vertex_pipeline_job", "run_parameters", {"job": "j"}, "'job' is not one of run_id, schedule_time"),
]


@pytest.mark.parametrize(("kind", "path", "value", "expected"), MISTAKES)
def test_each_mistake_in_a_route_is_refused_in_one_line(kind: str, path: str, value: Any, expected: str) -> None:
    message = error_of(changed(kind, path, value))
    assert expected in message, message


def _without(kind: str, path: str, **added: Any) -> dict[str, Any]:
    target = changed(kind, path, None)
    holder = target
    for part in path.split(".")[:-1]:
        holder = holder[part]
    holder.update(added)
    return target


OTHER_SHAPES = {
    "a vertex pipeline compiled inline (pipelineSpec, no templateUri)": _without(
        "vertex_pipeline_job", "pipeline_job.templateUri", pipelineSpec={"pipelineInfo": {"name": "train"}}
    ),
    "a dataflow template given inline (containerSpec, no containerSpecGcsPath)": _without(
        "dataflow_flex_template",
        "launch_parameter.containerSpecGcsPath",
        containerSpec={"image": "us-docker.pkg.dev/p/templates/etl:1", "sdkInfo": {"language": "PYTHON"}},
    ),
    "a batch job whose logs go to a path it names": changed(
        "batch_job", "job.logsPolicy", {"destination": "PATH", "logsPath": "/mnt/disks/logs/job.log"}
    ),
    "a batch task group run in order, one task at a time": changed(
        "batch_job",
        "job.taskGroups",
        [{"taskCount": "3", "schedulingPolicy": "IN_ORDER", "taskSpec": {"runnables": [{"script": {"text": "x"}}]}}],
    ),
    "a dataproc property named like runonce's env var outside the env prefixes": changed(
        "dataproc_batch", "batch.runtimeConfig.properties", {"spark.hadoop.RUNONCE_RUN_ID": "mine"}
    ),
}


@pytest.mark.parametrize("shape", OTHER_SHAPES)
def test_the_other_shapes_each_api_takes_load(shape: str) -> None:
    routes = parse_routes(json.dumps({"routes": {"r": {"target": OTHER_SHAPES[shape]}}}), "routes file r.yaml")
    assert routes["r"].target.type == OTHER_SHAPES[shape]["type"]


@pytest.mark.parametrize("kind", sorted(TYPES))
def test_a_project_number_yaml_reads_as_a_number_is_the_projects_number(kind: str) -> None:
    text = json.dumps({"routes": {"r": {"target": {**TYPES[kind].target, "project": 123456789012}}}})
    target = parse_routes(text, "routes file r.yaml")["r"].target
    assert target.project == "123456789012"
    for project, said in ((12.5, "must be text, got the number 12.5"), (True, "must be text, got true"), (-5, "'-5'")):
        bad = json.dumps({"routes": {"r": {"target": {**TYPES[kind].target, "project": project}}}})
        with pytest.raises(ConfigError) as refused:
            parse_routes(bad, "routes file r.yaml")
        assert "field 'target.project': " in str(refused.value) and said in str(refused.value)


@pytest.mark.parametrize("kind", sorted(TYPES))
def test_the_matrix_routes_are_valid(kind: str) -> None:
    routes = parse_routes(json.dumps({"routes": {"r": {"target": TYPES[kind].target}}}), "routes file r.yaml")
    assert routes["r"].target.type == kind


def test_run_parameters_as_a_list_name_parameters_after_the_fields() -> None:
    entry = TARGET_TYPES["dataflow_flex_template"]
    config = entry.config.model_validate({**TYPES["dataflow_flex_template"].target, "run_parameters": ["run_id"]})
    assert config.run_parameters == {"run_id": "run_id"}
    with pytest.raises(ValidationError, match=r"run_parameters: is empty \(null\).*remove the key"):
        entry.config.model_validate({**TYPES["dataflow_flex_template"].target, "run_parameters": None})


# --- the ids ---------------------------------------------------------------------------------------


def test_the_ids_come_from_the_run_id_and_fit_every_apis_rules() -> None:
    run_id = hashlib.sha256(b"a run").hexdigest()
    assert run_hex(run_id) == run_id
    assert resource_id_for(run_id, 63) == f"runonce-{run_id[:55]}"
    assert resource_id_for(run_id, 127) == f"runonce-{run_id}"
    other = "not hex: Ünïcode"
    assert run_hex(other) == hashlib.sha256(other.encode()).hexdigest()
    assert resource_id_for(other, 63) == f"runonce-{hashlib.sha256(other.encode()).hexdigest()[:55]}"
    assert run_hex(run_id.upper()) != run_id.upper()  # uppercase would break the ids' a-z rule: hashed

    request_id = request_id_for(run_id)
    assert request_id == request_id_for(run_id) != request_id_for(run_id[:-1] + "0")
    parsed = uuid.UUID(request_id)
    assert str(parsed) == request_id and parsed.version == 5 and len(request_id) == 36
    assert request_id == str(uuid.uuid5(uuid.UUID("6f1d1e52-8a43-4f0e-9c53-2b1c1a7e5d10"), run_id))


# --- what the create receives ----------------------------------------------------------------------


async def test_a_dispatch_creates_the_runs_execution_with_its_identity(kind, fakes, http, metadata) -> None:
    fake = fakes[kind.type]
    target = target_for(kind, fakes, http, metadata)
    request = new_request()
    resource = await target.dispatch(request)
    [created] = [c for c in fake.created if c.token == request.run_id[:63]]
    assert resource == created.resource
    kind.check_identity(created, request.run_id, WHEN)
    assert target.config == TARGET_TYPES[kind.type].config.model_validate(kind.target)  # the route's, unchanged
    assert await target.reconcile(request) == resource
    assert await target.is_running(resource) is True


async def test_a_run_without_a_schedule_time_gets_only_its_run_id(kind, fakes, http, metadata) -> None:
    fake = fakes[kind.type]
    target = target_for(kind, fakes, http, metadata)
    request = new_request(schedule_time=None)
    await target.dispatch(request)
    [created] = [c for c in fake.created if c.token == request.run_id[:63]]
    text = json.dumps(created.data["body"])
    assert request.run_id in text
    assert "RUNONCE_SCHEDULE_TIME" not in text and '"schedule_time"' not in text and '"ds"' not in text


async def test_a_delivery_body_is_refused_before_anything_is_sent(kind, fakes, http, metadata) -> None:
    fake = fakes[kind.type]
    calls = fake.calls[kind.create]
    with pytest.raises(TargetFailed, match="takes no delivery body"):
        await target_for(kind, fakes, http, metadata).dispatch(new_request(payload={"mode": "full"}))
    assert fake.calls[kind.create] == calls


# --- how answers become outcomes -----------------------------------------------------------------


async def test_409_aborted_is_a_conflict_that_created_nothing(kind, fakes, http, metadata) -> None:
    fake = fakes[kind.type]
    fake.fail(kind.create, "ABORTED", "Concurrent modification, try again", http_status=409)
    request = new_request()
    with pytest.raises(TargetFailed, match="HTTP 409 ABORTED: Concurrent modification"):
        await target_for(kind, fakes, http, metadata).dispatch(request)
    assert created_for(fake, request) == []


# --- reconciliation and the running check ----------------------------------------------------------


RUNNING = {
    "batch_job": ("batch.v1", "JobStatus", {"QUEUED", "SCHEDULED", "RUNNING"}),
    "dataproc_batch": ("dataproc.v1", "Batch", {"PENDING", "RUNNING"}),
    "vertex_pipeline_job": (
        "aiplatform.v1",
        "GoogleCloudAiplatformV1PipelineJob",
        {"PIPELINE_STATE_QUEUED", "PIPELINE_STATE_PENDING", "PIPELINE_STATE_RUNNING"},
    ),
    "dataflow_flex_template": (
        "dataflow.v1b3",
        "Job",
        # everything but the terminal states
        {
            "JOB_STATE_UNKNOWN",
            "JOB_STATE_STOPPED",
            "JOB_STATE_RUNNING",
            "JOB_STATE_DRAINING",
            "JOB_STATE_PENDING",
            "JOB_STATE_CANCELLING",
            "JOB_STATE_QUEUED",
            "JOB_STATE_RESOURCE_CLEANING_UP",
            "JOB_STATE_PAUSING",
            "JOB_STATE_PAUSED",
        },
    ),
}


def states(kind: str) -> list[str]:
    """Every state the API's discovery document lists for the execution."""
    document, schema, _ = RUNNING[kind]
    properties = load_document(document)["schemas"][schema]["properties"]
    return properties["state" if "state" in properties else "currentState"]["enum"]


async def test_is_running_reads_every_state_the_api_documents(kind, fakes, http, metadata) -> None:
    fake = fakes[kind.type]
    target = target_for(kind, fakes, http, metadata)
    resource = await target.dispatch(new_request())
    seen = {}
    for state in states(kind.type):
        fake.finish(resource, state)
        seen[state] = await target.is_running(resource)
    assert {state for state, running in seen.items() if running} == RUNNING[kind.type][2]
    assert len(seen) > len(RUNNING[kind.type][2])


async def test_is_running_of_an_execution_that_is_gone_is_false(kind, fakes, http, metadata) -> None:
    fake = fakes[kind.type]
    target = target_for(kind, fakes, http, metadata)
    resource = await target.dispatch(new_request())
    with fake.lock:
        del fake.resources[resource]
    assert await target.is_running(resource) is False


async def test_is_running_that_cannot_read_is_unknown(kind, fakes, http, metadata) -> None:
    fake = fakes[kind.type]
    target = target_for(kind, fakes, http, metadata)
    resource = await target.dispatch(new_request())
    fake.fail(kind.state_read, "PERMISSION_DENIED", "no reading")
    with pytest.raises(TargetOutcomeUnknown, match="no reading"):
        await target.is_running(resource)


@pytest.mark.parametrize("resource", ["", "runonce-abc", "projects/p/locations/l/things/x", "projects/p/jobs/x"])
async def test_is_running_of_a_name_that_is_not_an_execution_is_unknown(
    kind, fakes, http, metadata, resource: str
) -> None:
    with pytest.raises(TargetOutcomeUnknown, match="name"):
        await target_for(kind, fakes, http, metadata).is_running(resource)


# --- Dataflow: the name is unique only among active jobs -------------------------------------------


@pytest.fixture
def dataflow(fakes) -> Iterator[FakeDataflow]:
    fake = fakes["dataflow_flex_template"]
    yield fake
    assert fake.take_violations() == []
    assert fake.pending_steps() == 0


def flex(fakes, http, metadata):
    return target_for(TYPES["dataflow_flex_template"], fakes, http, metadata)


async def test_dataflow_a_later_attempt_lists_before_it_launches(dataflow, fakes, http, metadata) -> None:
    target = flex(fakes, http, metadata)
    first = new_request()
    job = await target.dispatch(first)
    dataflow.finish(job)  # finished: Dataflow would take the name again
    lists, launches = dataflow.calls[LIST], dataflow.calls[LAUNCH]
    retry = DispatchRequest(**{**first.__dict__, "attempt": 2})
    assert await target.dispatch(retry) == job
    assert (dataflow.calls[LIST], dataflow.calls[LAUNCH]) == (lists + 1, launches)
    assert dataflow.jobs_named(f"runonce-{first.run_id}") == [job]

    fresh = new_request(attempt=2)  # a later attempt whose run has no job: launched after asking
    lists = dataflow.calls[LIST]
    launched = await target.dispatch(fresh)
    assert dataflow.calls[LIST] == lists + 1
    assert dataflow.jobs_named(f"runonce-{fresh.run_id}") == [launched]


async def test_dataflow_a_first_attempt_lists_once_before_it_launches(dataflow, fakes, http, metadata) -> None:
    lists = dataflow.calls[LIST]
    await flex(fakes, http, metadata).dispatch(new_request())
    assert dataflow.calls[LIST] == lists + 1


async def test_dataflow_a_run_whose_record_was_lost_after_its_job_finished_launches_no_second_job(
    dataflow, fakes, http, metadata
) -> None:
    """The store lost the run's record (no persistence, past retention): the redelivery is a first
    attempt again. Dataflow would take the finished job's name again; the listing finds it."""
    target = flex(fakes, http, metadata)
    request = new_request()
    job = await target.dispatch(request)
    dataflow.finish(job)
    launches = dataflow.calls[LAUNCH]
    assert await target.dispatch(DispatchRequest(**request.__dict__)) == job
    assert dataflow.calls[LAUNCH] == launches
    assert dataflow.jobs_named(f"runonce-{request.run_id}") == [job]


@pytest.mark.parametrize("attempt", [1, 3])
async def test_dataflow_an_attempt_whose_listing_fails_never_launches(
    dataflow, fakes, http, metadata, attempt: int
) -> None:
    launches = dataflow.calls[LAUNCH]
    dataflow.fail(LIST, "UNAVAILABLE", "listing down")
    with pytest.raises(TargetOutcomeUnknown, match=r"cannot tell.*listing down"):
        await flex(fakes, http, metadata).dispatch(new_request(attempt=attempt))
    assert dataflow.calls[LAUNCH] == launches


async def test_dataflow_reconcile_pages_and_prefers_the_active_job(dataflow, fakes, http, metadata) -> None:
    target = flex(fakes, http, metadata)
    request = new_request()
    name = f"runonce-{request.run_id}"
    active = await target.dispatch(request)
    dataflow.add_other_jobs(PROJECT, LOCATION, 5, name=name)  # finished jobs of the run's name, newer
    assert await target.reconcile(request) == active

    dataflow.finish(active)
    found = await target.reconcile(request)
    assert found in dataflow.jobs_named(name) and found != active  # the newest finished one
    assert found == dataflow.jobs_named(name)[-1]


async def test_dataflow_reconcile_pages_through_a_listing_that_ignores_the_name(
    dataflow, fakes, http, metadata, monkeypatch
) -> None:
    """Jobs of other names in the answer (a filter the API ignored) are skipped; the run's job is
    found on a later page."""
    target = flex(fakes, http, metadata)
    request = new_request()
    job = await target.dispatch(request)
    dataflow.add_other_jobs(PROJECT, LOCATION, 60)
    original = dataflow._list
    monkeypatch.setattr(
        dataflow, "_list", lambda project, location, query: original(project, location, {**query, "name": [""]})
    )
    assert await target.reconcile(request) == job
    assert await target.reconcile(new_request()) is None


async def test_dataflow_reconcile_gives_up_after_max_pages(dataflow, fakes, http, metadata, monkeypatch) -> None:
    assert engine.MAX_PAGES == 20
    monkeypatch.setattr(engine, "MAX_PAGES", 3)
    target = flex(fakes, http, metadata)
    dataflow.add_other_jobs(PROJECT, LOCATION, 5)
    original = dataflow._list
    monkeypatch.setattr(dataflow, "page_size_cap", 1)
    monkeypatch.setattr(
        dataflow, "_list", lambda project, location, query: original(project, location, {**query, "name": [""]})
    )
    calls = dataflow.calls[LIST]
    with pytest.raises(TargetOutcomeUnknown, match=r"list Dataflow jobs named .*: more than 3 pages"):
        await target.reconcile(new_request())
    assert dataflow.calls[LIST] == calls + 3


async def test_dataflow_a_launch_answer_without_a_job_is_unknown(dataflow, fakes, http, metadata, monkeypatch) -> None:
    original = dataflow._launch
    monkeypatch.setattr(
        dataflow, "_launch", lambda project, location, body: {**original(project, location, body), "job": {}}
    )
    with pytest.raises(TargetOutcomeUnknown, match="the answer names no job"):
        await flex(fakes, http, metadata).dispatch(new_request())


# --- the endpoints ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("batch_job", "https://batch.googleapis.com"),
        ("dataflow_flex_template", "https://dataflow.googleapis.com"),
        ("dataproc_batch", "https://europe-west4-dataproc.googleapis.com"),
        ("vertex_pipeline_job", "https://europe-west4-aiplatform.googleapis.com"),
    ],
)
async def test_the_default_endpoint_is_googles_regional_where_the_api_is(kind: str, expected: str) -> None:
    entry = TARGET_TYPES[kind]
    config = entry.config.model_validate({**TYPES[kind].target, "location": "europe-west4"})
    async with httpx.AsyncClient() as client:
        assert entry.adapter(config, client, MetadataTokenAuth("127.0.0.1:9"), None)._base == expected
        assert entry.adapter(config, client, MetadataTokenAuth("127.0.0.1:9"), "http://h:1/")._base == "http://h:1"


# --- the example routes files and `runonce lint` ---------------------------------------------------

EXAMPLES = {  # type: (example file, its workload field, the discovery document and schema it holds)
    "batch_job": ("batch_job.yaml", "job", "batch.v1", "Job"),
    "dataflow_flex_template": (
        "dataflow_flex_template.yaml",
        "launch_parameter",
        "dataflow.v1b3",
        "LaunchFlexTemplateParameter",
    ),
    "dataproc_batch": ("dataproc_batch.yaml", "batch", "dataproc.v1", "Batch"),
    "vertex_pipeline_job": (
        "vertex_pipeline_job.yaml",
        "pipeline_job",
        "aiplatform.v1",
        "GoogleCloudAiplatformV1PipelineJob",
    ),
}
HANDLES = {  # type: where a route might set the handle runonce fills in
    "batch_job": ("job", "name"),
    "dataflow_flex_template": ("launch_parameter", "jobName"),
    "dataproc_batch": ("batch", "name"),
    "vertex_pipeline_job": ("pipeline_job", "name"),
}


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_each_example_routes_file_passes_lint_and_holds_the_apis_own_shape(kind: str, tmp_path) -> None:
    from click.testing import CliRunner

    from runonce.cli import main

    name, field, document, schema = EXAMPLES[kind]
    path = REPO / "examples" / name
    result = CliRunner().invoke(main, ["lint", str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "0 error(s), 0 warning(s)" in result.output
    [route] = yaml.safe_load(path.read_text())["routes"].values()
    assert route["target"]["type"] == kind
    Discovery(document).check(route["target"][field], {"$ref": schema}, name, request=True)

    workload, handle = HANDLES[kind]
    route["target"][workload][handle] = "chosen-by-hand"
    bad = tmp_path / "routes.yaml"
    bad.write_text(yaml.safe_dump({"routes": {"r": route}}))
    result = CliRunner().invoke(main, ["lint", str(bad)], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    [line] = [line for line in result.output.splitlines() if "error:" in line]
    assert f"route 'r': field 'target': {workload}.{handle}: runonce names the" in line


# --- the fakes are as strict as the APIs' descriptions ---------------------------------------------

CREATE_PATHS = {
    "batch_job": f"v1/projects/{PROJECT}/locations/{LOCATION}/jobs",
    "dataflow_flex_template": f"v1b3/projects/{PROJECT}/locations/{LOCATION}/flexTemplates:launch",
    "dataproc_batch": f"v1/projects/{PROJECT}/locations/{LOCATION}/batches",
    "vertex_pipeline_job": f"v1/projects/{PROJECT}/locations/{LOCATION}/pipelineJobs",
}
NOT_IN_THE_DOCUMENT = {  # a body each API's discovery document refuses
    "batch_job": ({"taskGroups": [], "jobId": "x"}, "unknown field 'jobId'"),
    "dataflow_flex_template": ({"launchParameter": {"jobName": "x", "jobId": "y"}}, "unknown field 'jobId'"),
    "dataproc_batch": ({"pysparkBatch": {"mainPythonFileUri": "gs://a/b.py"}, "state": "RUNNING"}, "output-only"),
    "vertex_pipeline_job": ({"templateUri": "https://t", "labels": {"a": 1}}, "expected a string"),
}
BAD_IDS = {  # a create whose id the API refuses beyond the document
    "batch_job": ({"jobId": "Runonce-1", "requestId": str(uuid.uuid4())}, "jobId 'Runonce-1'"),
    "dataproc_batch": ({"batchId": "abc", "requestId": "r"}, "batchId 'abc'"),
    "vertex_pipeline_job": ({"pipelineJobId": "1-run"}, "pipelineJobId '1-run'"),
}


async def test_each_fake_refuses_a_body_its_document_does_not_allow(kind, fakes, metadata) -> None:
    fake = fakes[kind.type]
    body, violation = NOT_IN_THE_DOCUMENT[kind.type]
    token = await MetadataTokenAuth(metadata.host).access_token()
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{fake.url}/{CREATE_PATHS[kind.type]}", json=body, headers={"Authorization": f"Bearer {token}"}
        )
    assert response.status_code == 400
    [recorded] = fake.take_violations()
    assert violation in recorded


@pytest.mark.parametrize("kind_name", sorted(BAD_IDS))
async def test_each_fake_refuses_an_id_the_api_refuses(kind_name: str, fakes, metadata) -> None:
    fake = fakes[kind_name]
    query, message = BAD_IDS[kind_name]
    body = TYPES[kind_name].target[{"batch_job": "job", "dataproc_batch": "batch"}.get(kind_name, "pipeline_job")]
    token = await MetadataTokenAuth(metadata.host).access_token()
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{fake.url}/{CREATE_PATHS[kind_name]}",
            params=query,
            json=body,
            headers={"Authorization": f"Bearer {token}"},
        )
    assert response.status_code == 400 and message in response.json()["error"]["message"]
    assert fake.take_violations() == []


# --- routes that leave out what runonce adds to -----------------------------------------------------


async def test_a_dataproc_batch_without_runtime_config_still_gets_the_runs_identity(fakes, http, metadata) -> None:
    kind = TYPES["dataproc_batch"]
    batch = {key: value for key, value in kind.target["batch"].items() if key != "runtimeConfig"}
    target = target_for(kind, fakes, http, metadata, batch=batch)
    request = new_request()
    resource = await target.dispatch(request)
    properties = fakes["dataproc_batch"].properties_of(resource)
    assert properties["spark.dataproc.driverEnv.RUNONCE_RUN_ID"] == request.run_id
    assert properties["spark.executorEnv.RUNONCE_SCHEDULE_TIME"] == WHEN


@pytest.mark.parametrize("runtime_config", [None, {"gcsOutputDirectory": "gs://out/"}])
async def test_a_vertex_pipeline_without_parameter_values_still_gets_the_mapped_ones(
    fakes, http, metadata, runtime_config
) -> None:
    kind = TYPES["vertex_pipeline_job"]
    job = {key: value for key, value in kind.target["pipeline_job"].items() if key != "runtimeConfig"}
    if runtime_config is not None:
        job["runtimeConfig"] = runtime_config
    target = target_for(kind, fakes, http, metadata, pipeline_job=job)
    request = new_request()
    resource = await target.dispatch(request)
    assert fakes["vertex_pipeline_job"].parameters_of(resource) == {"run": request.run_id, "ds": WHEN}


async def test_a_route_that_maps_no_parameters_sends_none(fakes, http, metadata) -> None:
    kind = TYPES["vertex_pipeline_job"]
    job = {key: value for key, value in kind.target["pipeline_job"].items() if key != "runtimeConfig"}
    target = target_for(kind, fakes, http, metadata, pipeline_job=job, run_parameters={})
    request = new_request()
    resource = await target.dispatch(request)
    [created] = [c for c in fakes["vertex_pipeline_job"].created if c.resource == resource]
    assert "runtimeConfig" not in created.data["body"]


def test_a_mistake_that_holds_braces_is_reported_as_it_is() -> None:
    message = error_of({**TYPES["batch_job"].target, "location": "us-{central}1"})
    assert "must be a region such as us-central1 (got 'us-{central}1')" in message


async def test_dataflow_warns_when_a_run_has_more_than_one_job(dataflow, fakes, http, metadata, caplog) -> None:
    target = flex(fakes, http, metadata)
    request = new_request()
    job = await target.dispatch(request)
    with caplog.at_level("WARNING", logger="runonce.target.dataflow_flex_template"):
        assert await target.reconcile(request) == job
    assert caplog.records == []  # one job: nothing to say

    dataflow.finish(job)
    dataflow.add_other_jobs(PROJECT, LOCATION, 1, name=f"runonce-{request.run_id}")
    with caplog.at_level("WARNING", logger="runonce.target.dataflow_flex_template"):
        await target.reconcile(request)
    [record] = caplog.records
    jobs = dataflow.jobs_named(f"runonce-{request.run_id}")
    assert record.getMessage() == f"run {request.run_id} has 2 Dataflow jobs: {', '.join(jobs[::-1])}"


async def test_a_batch_job_without_environments_still_gives_every_task_the_runs_identity(fakes, http, metadata) -> None:
    kind = TYPES["batch_job"]
    job = copy.deepcopy(kind.target["job"])
    del job["taskGroups"][0]["taskSpec"]["environment"]
    target = target_for(kind, fakes, http, metadata, job=job)
    request = new_request()
    resource = await target.dispatch(request)
    assert fakes["batch_job"].environment_of(resource) == {
        "RUNONCE_RUN_ID": request.run_id,
        "RUNONCE_SCHEDULE_TIME": WHEN,
    }
    [created] = [c for c in fakes["batch_job"].created if c.resource == resource]
    shards = [e["variables"] for e in created.data["body"]["taskGroups"][0]["taskEnvironments"]]
    assert [s["SHARD"] for s in shards] == ["0", "1"]  # the route's per-task variables are kept


async def test_a_flex_template_without_environment_still_gets_the_label(fakes, http, metadata) -> None:
    kind = TYPES["dataflow_flex_template"]
    launch = {k: v for k, v in kind.target["launch_parameter"].items() if k != "environment"}
    target = target_for(kind, fakes, http, metadata, launch_parameter=launch)
    request = new_request()
    resource = await target.dispatch(request)
    [created] = [c for c in fakes["dataflow_flex_template"].created if c.resource == resource]
    assert created.data["body"]["launchParameter"]["environment"] == {
        "additionalUserLabels": {"runonce-run-id": request.run_id[:63]}
    }


def test_run_parameters_take_any_identifier_for_a_parameter_name() -> None:
    entry = TARGET_TYPES["vertex_pipeline_job"]
    config = entry.config.model_validate({**TYPES["vertex_pipeline_job"].target, "run_parameters": {"run_id": "RunId"}})
    assert config.run_parameters == {"run_id": "RunId"}


# --- what a refusal and each failure say -----------------------------------------------------------

MORE_MISTAKES = [
    # a mapping the route gives as something else, at any depth of its path
    (
        "batch_job",
        "job.labels",
        ["team"],
        'job.labels: expected an object (object), got list ["team"]',
    ),
    (
        "dataflow_flex_template",
        "launch_parameter.environment.additionalUserLabels",
        ["team"],
        'launch_parameter.environment.additionalUserLabels: expected an object (object), got list ["team"]',
    ),
    (
        "dataflow_flex_template",
        "launch_parameter.environment",
        "maxWorkers=4",
        'launch_parameter.environment: expected an object (FlexTemplateRuntimeEnvironment), got str "maxWorkers=4"',
    ),
    (
        "dataproc_batch",
        "batch.runtimeConfig",
        ["x"],
        'batch.runtimeConfig: expected an object (RuntimeConfig), got list ["x"]',
    ),
    (
        "vertex_pipeline_job",
        "pipeline_job.runtimeConfig",
        "gs://out/",
        'pipeline_job.runtimeConfig: expected an object (GoogleCloudAiplatformV1PipelineJobRuntimeConfig), got str "gs://out/"',
    ),
    # run_parameters
    *[
        (
            "dataflow_flex_template",
            "run_parameters",
            value,
            "must be a list of run_id, schedule_time or a mapping of them to parameter names",
        )
        for value in ("run_id", ["run_id", 1])
    ],
    (
        "vertex_pipeline_job",
        "run_parameters",
        {"run_id": "run", "schedule_time": "run"},
        "run_id and schedule_time must go to different parameters",
    ),
]


@pytest.mark.parametrize(("kind", "path", "value", "expected"), MORE_MISTAKES)
def test_a_refused_route_says_what_is_wrong_where(kind: str, path: str, value: Any, expected: str) -> None:
    message = error_of(changed(kind, path, value))
    assert message.endswith(f": {expected}"), message


def name_for(kind: JobType, run_id: str) -> str:
    """The run's execution as runonce's messages name it: its resource name (the Dataflow job's name)."""
    if kind.type == "dataflow_flex_template":
        return f"runonce-{run_id}"
    collection, length = {"batch_job": ("jobs", 55), "dataproc_batch": ("batches", 55)}.get(
        kind.type, ("pipelineJobs", 64)
    )
    return f"projects/{PROJECT}/locations/{LOCATION}/{collection}/runonce-{run_id[:length]}"


def lookup_action(kind: JobType, run_id: str) -> str:
    """How a reconciliation's message names what it read."""
    if kind.type == "dataflow_flex_template":
        return f"list Dataflow jobs named runonce-{run_id} in projects/{PROJECT}/locations/{LOCATION}"
    return f"get {TARGET_TYPES[kind.type].adapter.NOUN} {name_for(kind, run_id)}"


async def test_each_failure_names_the_call_that_failed_and_the_runs_execution(kind, fakes, http, metadata) -> None:
    fake = fakes[kind.type]
    create = f"create {TARGET_TYPES[kind.type].adapter.NOUN} "
    unreachable = target_for(kind, fakes, http, metadata, endpoint=f"http://127.0.0.1:{free_port()}")
    target = target_for(kind, fakes, http, metadata)
    doubt = "cannot tell whether this run already started: "

    request = new_request()
    with pytest.raises(TargetError) as caught:
        await unreachable.dispatch(request)
    if TARGET_TYPES[kind.type].adapter.FIND_BEFORE_CREATE:  # the lookup before the create failed
        first = f"{doubt}{lookup_action(kind, request.run_id)}"
    else:
        first = f"{create}{name_for(kind, request.run_id)}"
    assert caught.value.message.startswith(f"{first}: could not connect")

    request = new_request()
    with pytest.raises(TargetOutcomeUnknown) as unknown:
        await unreachable.reconcile(request)
    assert unknown.value.message.startswith(f"{doubt}{lookup_action(kind, request.run_id)}: could not connect")

    request = new_request()
    fake.fail(kind.lookup, "PERMISSION_DENIED", "no reading")
    with pytest.raises(TargetOutcomeUnknown) as unknown:
        await target.reconcile(request)
    assert unknown.value.message.startswith(f"{doubt}{lookup_action(kind, request.run_id)}: HTTP 403 ")

    if not TARGET_TYPES[kind.type].adapter.FIND_BEFORE_CREATE:  # else the lookup before the create reads first
        request = new_request()
        fake.fail(kind.create, "ALREADY_EXISTS", "already exists")
        fake.fail(kind.lookup, "PERMISSION_DENIED", "no reading")
        with pytest.raises(TargetOutcomeUnknown) as unknown:
            await target.dispatch(request)
        read = f"{create}{name_for(kind, request.run_id)}: it already exists; read it"
        assert unknown.value.message.startswith(f"{doubt}{read}: HTTP 403 PERMISSION_DENIED: no reading")

    resource = await target.dispatch(new_request())
    fake.fail(kind.state_read, "PERMISSION_DENIED", "no reading")
    with pytest.raises(TargetOutcomeUnknown) as unknown:
        await target.is_running(resource)
    assert (
        unknown.value.message
        == f"cannot read the state of {resource}: get {resource}: HTTP 403 PERMISSION_DENIED: no reading"
    )


def answering_create(kind: JobType, status: int, text: str, found: bool = True) -> httpx.MockTransport:
    """An API that answers the create with `status` and `text` (not Google's error body), and the
    lookups with the run's execution (or 404)."""

    posted = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posted.append(request)
            return httpx.Response(status, text=text)
        if kind.type == "dataflow_flex_template":  # a listing: empty until the launch
            job = {"id": "2026-10-16_1", "name": request.url.params["name"], "currentState": "JOB_STATE_RUNNING"}
            return httpx.Response(200, json={"jobs": [job] if found and posted else []})
        if not found:
            return httpx.Response(404, json={"error": {"code": 404, "status": "NOT_FOUND", "message": "none"}})
        return httpx.Response(200, json={"name": request.url.path.removeprefix("/v1/"), "state": "RUNNING"})

    return httpx.MockTransport(answer)


async def test_a_409_without_googles_error_body_adopts_the_runs_execution(kind, fakes, metadata) -> None:
    request = new_request()
    async with httpx.AsyncClient(transport=answering_create(kind, 409, "Conflict")) as http:
        resource = await target_for(kind, fakes, http, metadata).dispatch(request)
    if kind.type == "dataflow_flex_template":
        assert resource == f"projects/{PROJECT}/locations/{LOCATION}/jobs/2026-10-16_1"
    else:
        assert resource == name_for(kind, request.run_id)


@pytest.mark.parametrize(("status", "outcome"), [(400, TargetFailed), (403, TargetFailed), (502, TargetOutcomeUnknown)])
async def test_other_answers_without_googles_error_body_are_not_adopted(
    kind, fakes, metadata, status: int, outcome: type
) -> None:
    request = new_request()
    async with httpx.AsyncClient(transport=answering_create(kind, status, "<html>nope</html>", found=False)) as http:
        with pytest.raises(outcome) as caught:
            await target_for(kind, fakes, http, metadata).dispatch(request)
    assert type(caught.value) is outcome
    assert caught.value.message.startswith(f"create {TARGET_TYPES[kind.type].adapter.NOUN} ")
    assert "already exists" not in caught.value.message


async def test_a_create_answer_that_is_not_json_is_unknown_and_says_which_create(kind, fakes, metadata) -> None:
    request = new_request()
    async with httpx.AsyncClient(transport=answering_create(kind, 200, "<html>ok</html>")) as http:
        with pytest.raises(TargetOutcomeUnknown) as caught:
            await target_for(kind, fakes, http, metadata).dispatch(request)
    noun = TARGET_TYPES[kind.type].adapter.NOUN
    assert (
        caught.value.message == f"create {noun} {name_for(kind, request.run_id)}: HTTP 200 with a body that is not JSON"
    )


def test_run_fields_carry_the_schedule_time_and_task_only_when_the_run_has_them() -> None:
    base = {"run_id": "0" * 64, "route": "r", "job": "nightly", "source": "cloud_tasks"}
    full = DispatchRequest(**base, schedule_time="2026-01-31T12:00:00Z", task="7")
    assert run_fields(full, "_RUNONCE_") == {
        "_RUNONCE_JOB": "nightly",
        "_RUNONCE_SOURCE": "cloud_tasks",
        "_RUNONCE_SCHEDULE_TIME": "2026-01-31T12:00:00Z",
        "_RUNONCE_TASK": "7",
    }
    bare = DispatchRequest(**base, schedule_time=None)
    assert run_fields(bare, "RUNONCE_") == {"RUNONCE_JOB": "nightly", "RUNONCE_SOURCE": "cloud_tasks"}


class _Preset(GoogleEngineTarget[dict[str, Any]]):
    """A preset whose calls a test sets, for the start-up check of every call it makes."""

    type = "probe"
    API = "batch.v1"
    NOUN = "job"

    def create_call(self, request: DispatchRequest) -> Call:
        return self.config["create"](request)

    def list_call(self, request: DispatchRequest) -> Listing | None:
        listing = self.config.get("list")
        return Listing(listing, items="jobs") if listing else None


PARENT_NAME = f"projects/{PROJECT}/locations/{LOCATION}"
GOOD_CREATE = Call(
    "projects.locations.jobs.create",
    {"parent": PARENT_NAME, "jobId": "j1"},
    {"taskGroups": [{"taskSpec": {"runnables": [{"script": {"text": "true"}}]}}]},
)


def _too_big(request: DispatchRequest) -> Call:
    raise TargetFailed("create job for run x: the argument is over the API's 32768 bytes: by 12 bytes")


def _refused(request: DispatchRequest) -> Call:
    raise TargetFailed("refused without an action in front")


def _unbuildable(request: DispatchRequest) -> Call:
    return {}["create"]  # type: ignore[no-any-return]  # a shape the config's checks let through


@pytest.mark.parametrize(
    ("calls", "said"),
    [
        ({"create": lambda request: GOOD_CREATE}, None),
        (
            {"create": lambda request: GOOD_CREATE, "list": Call("projects.locations.jobs.list", {"parent": "nope"})},
            "field 'target': batch.projects.locations.jobs.list parameters.parent='nope' does not match",
        ),
        (
            {"create": lambda request: Call("projects.locations.jobs.launch", {})},
            "field 'target': batch.v1 has no method projects.locations.jobs.launch",
        ),
        (
            {"create": lambda request: Call(GOOD_CREATE.method, GOOD_CREATE.params, {"taskGroups": "one"})},
            "field 'target': the request runonce builds from the route: body.taskGroups: expected an array",
        ),
        (
            {
                "create": lambda request: Call("projects.locations.jobs.delete", {"name": f"{PARENT_NAME}/jobs/j1"}),
                "list": Call("projects.locations.jobs.list", {"parent": "nope"}),
            },
            "field 'target': batch.projects.locations.jobs.list parameters.parent='nope' does not match",
        ),
        ({"create": _too_big}, "field 'target': the argument is over the API's 32768 bytes: by 12 bytes"),
        ({"create": _refused}, "field 'target': refused without an action in front"),
        ({"create": lambda request: Call(GOOD_CREATE.method, GOOD_CREATE.params)}, None),  # no body: none checked
        ({"create": _unbuildable}, "field 'target': the request cannot be built from this route (KeyError: 'create')"),
    ],
)
def test_every_call_a_preset_makes_is_checked_at_start_up(calls: dict[str, Any], said: str | None) -> None:
    """The create and the listing, for each sample run: a problem is one line naming what the API
    says, without the action's prefix; a call the route cannot build is said as such, never a traceback."""

    class Config(BaseModel):
        calls: dict[str, Any]

        @model_validator(mode="after")
        def _against_the_api(self) -> Config:
            check_route(_Preset, self.calls)
            return self

    if said is None:
        Config(calls=calls)
        return
    with pytest.raises(ValidationError) as caught:
        Config(calls=calls)
    message = f"field 'target': {caught.value.errors()[0]['msg']}"
    assert message.startswith(said), message
