# ruff: noqa: E501 - the golden values are whole ids, kept on one line each
"""What every Google target sends for a run, pinned byte for byte.

A run in flight across an upgrade of runonce (its first attempt sent by the old version, its retry
by the new one) still dedupes only if the new version derives the same ids from the run_id: job
ids, request ids, task names, labels, the env vars, substitutions and arguments that carry the
run. This test records, for fixed run_ids, the whole call each target makes (method, path, query,
body) against a recording transport, and compares it with values taken from the code as it was
released. A change here breaks dedupe for runs in flight: never update a golden value to make the
test pass.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from runonce.targets import DispatchRequest, TargetConfig, build_target
from runonce.targets.registry import TargetContext

HEX_RUN = "0123456789abcdef" * 4
OTHER_RUN = "f" * 63 + "0"
TEXT_RUN = "manual-2026-01-31"  # not hex: hashed where an API's alphabet needs it
RUN_IDS = (HEX_RUN, OTHER_RUN, TEXT_RUN)
WHEN = "2026-01-31T12:00:00Z"

PARENT = {"project": "my-project", "location": "us-central1"}
CONFIGS: dict[str, dict[str, Any]] = {
    "batch_job": {
        **PARENT,
        "job": {
            "taskGroups": [
                {
                    "taskSpec": {"runnables": [{"container": {"imageUri": "gcr.io/p/i"}}]},
                    "taskEnvironments": [{"variables": {"SHARD": "0"}}, {}],
                }
            ],
            "labels": {"team": "media"},
        },
    },
    "dataproc_batch": {
        **PARENT,
        "batch": {
            "pysparkBatch": {"mainPythonFileUri": "gs://b/etl.py"},
            "runtimeConfig": {"properties": {"spark.executor.instances": "2"}},
            "labels": {"team": "data"},
        },
    },
    "vertex_pipeline_job": {
        **PARENT,
        "pipeline_job": {"templateUri": "https://us-central1-kfp.pkg.dev/p/r/t/v1", "labels": {"team": "ml"}},
        "run_parameters": {"run_id": "run", "schedule_time": "ds"},
    },
    "dataflow_flex_template": {
        **PARENT,
        "launch_parameter": {
            "containerSpecGcsPath": "gs://b/t.json",
            "parameters": {"input": "gs://b/in"},
            "environment": {"additionalUserLabels": {"team": "data"}},
        },
        "run_parameters": ["run_id", "schedule_time"],
    },
    "bigquery_job": {
        "project": "my-project",
        "location": "US",
        "configuration": {"query": {"query": "SELECT @run_id, @schedule_time"}, "labels": {"team": "bi"}},
    },
    "cloud_tasks_task": {
        "queue": "projects/my-project/locations/us-central1/queues/q",
        "http_request": {"url": "https://example.com/run", "headers": {"X-Team": "a"}},
    },
    "cloud_build_trigger": {"trigger": "projects/my-project/locations/us-central1/triggers/nightly"},
    "cloud_run_job": {"job": "projects/my-project/locations/us-central1/jobs/nightly", "task_count": 2},
    "google_api": {
        "api": "batch.v1",
        "method": "projects.locations.jobs.create",
        "params": {
            "parent": "projects/my-project/locations/us-central1",
            "jobId": "r${run_id:62}",
            "requestId": "${run_uuid}",
        },
        "body": {"taskGroups": [{"taskSpec": {"runnables": [{"script": {"text": "echo ${schedule_time}"}}]}}]},
    },
}

ANSWER = {
    "name": "projects/my-project/locations/us-central1/operations/op-1",
    "id": "my-project:US.job",
    "metadata": {
        "name": "projects/my-project/locations/us-central1/jobs/nightly/executions/nightly-abc",
        "build": {"id": "b-1", "name": "projects/my-project/locations/us-central1/builds/b-1"},
    },
    "job": {"id": "2026-01-31_00_00_00-1"},
}


class RecordingAuth:
    async def access_token(self) -> str:
        return "token"


def request_for(run_id: str) -> DispatchRequest:
    return DispatchRequest(run_id=run_id, route="r", job="nightly", schedule_time=WHEN, source="scheduler")


async def sent_for(kind: str, run_id: str, block: dict[str, Any] | None = None) -> dict[str, Any]:
    """The create call a `kind` route sends for `run_id`: method, path, query and JSON body."""
    calls: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200, json=ANSWER)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        context = TargetContext(http=http, google_auth=RecordingAuth())  # type: ignore[arg-type]  # only access_token is used
        config = TypeAdapter(TargetConfig).validate_python({"type": kind, **(block or CONFIGS[kind])})
        target = build_target(config, context)
        await target.dispatch(request_for(run_id))
    [create] = [call for call in calls if call.method != "GET"]
    return {
        "method": create.method,
        "path": create.url.path,
        "query": sorted(create.url.params.multi_items()),
        "body": json.loads(create.content) if create.content else None,
    }


def digest(call: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(call, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


# The id-bearing parts, readable; then the whole call's digest (every env var, label and parameter).
GOLDEN_IDS: dict[tuple[str, str], dict[str, Any]] = {
    ("batch_job", HEX_RUN): {
        "jobId": "runonce-0123456789abcdef0123456789abcdef0123456789abcdef0123456",
        "requestId": "274aab34-b035-5306-9b38-349adcd9540e",
        "label": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde",
    },
    ("batch_job", OTHER_RUN): {
        "jobId": "runonce-fffffffffffffffffffffffffffffffffffffffffffffffffffffff",
        "requestId": "c28b8986-3cb6-5d87-88cd-ca13e8cc0049",
        "label": "fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    },
    ("batch_job", TEXT_RUN): {
        "jobId": "runonce-918ec9eb006358ef39af8d8a58876b8fc026848ac6fefb374c774c9",
        "requestId": "63a413d5-1eb6-59e2-ac85-ea2c580d2aa8",
        "label": "manual-2026-01-31",
    },
    ("bigquery_job", HEX_RUN): {
        "jobId": "runonce_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "label": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde",
    },
    ("bigquery_job", OTHER_RUN): {
        "jobId": "runonce_fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff0",
        "label": "fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    },
    ("bigquery_job", TEXT_RUN): {
        "jobId": "runonce_918ec9eb006358ef39af8d8a58876b8fc026848ac6fefb374c774c9f0c427dbf",
        "label": "manual-2026-01-31",
    },
    ("cloud_build_trigger", HEX_RUN): {
        "_IDEMPOTENCY_KEY": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    },
    ("cloud_build_trigger", OTHER_RUN): {
        "_IDEMPOTENCY_KEY": "fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff0"
    },
    ("cloud_build_trigger", TEXT_RUN): {"_IDEMPOTENCY_KEY": "manual-2026-01-31"},
    ("cloud_run_job", HEX_RUN): {"IDEMPOTENCY_KEY": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
    ("cloud_run_job", OTHER_RUN): {
        "IDEMPOTENCY_KEY": "fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff0"
    },
    ("cloud_run_job", TEXT_RUN): {"IDEMPOTENCY_KEY": "manual-2026-01-31"},
    ("cloud_tasks_task", HEX_RUN): {
        "name": "projects/my-project/locations/us-central1/queues/q/tasks/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "Idempotency-Key": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    },
    ("cloud_tasks_task", OTHER_RUN): {
        "name": "projects/my-project/locations/us-central1/queues/q/tasks/fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff0",
        "Idempotency-Key": "fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff0",
    },
    ("cloud_tasks_task", TEXT_RUN): {
        "name": "projects/my-project/locations/us-central1/queues/q/tasks/manual-2026-01-31",
        "Idempotency-Key": "manual-2026-01-31",
    },
    ("dataflow_flex_template", HEX_RUN): {
        "jobName": "runonce-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "label": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde",
    },
    ("dataflow_flex_template", OTHER_RUN): {
        "jobName": "runonce-fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff0",
        "label": "fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    },
    ("dataflow_flex_template", TEXT_RUN): {
        "jobName": "runonce-918ec9eb006358ef39af8d8a58876b8fc026848ac6fefb374c774c9f0c427dbf",
        "label": "manual-2026-01-31",
    },
    ("dataproc_batch", HEX_RUN): {
        "batchId": "runonce-0123456789abcdef0123456789abcdef0123456789abcdef0123456",
        "requestId": "274aab34-b035-5306-9b38-349adcd9540e",
        "label": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde",
    },
    ("dataproc_batch", OTHER_RUN): {
        "batchId": "runonce-fffffffffffffffffffffffffffffffffffffffffffffffffffffff",
        "requestId": "c28b8986-3cb6-5d87-88cd-ca13e8cc0049",
        "label": "fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    },
    ("dataproc_batch", TEXT_RUN): {
        "batchId": "runonce-918ec9eb006358ef39af8d8a58876b8fc026848ac6fefb374c774c9",
        "requestId": "63a413d5-1eb6-59e2-ac85-ea2c580d2aa8",
        "label": "manual-2026-01-31",
    },
    ("google_api", HEX_RUN): {
        "jobId": "r0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd",
        "requestId": "01234567-89ab-4def-8123-456789abcdef",
    },
    ("google_api", OTHER_RUN): {
        "jobId": "rffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
        "requestId": "ffffffff-ffff-4fff-bfff-ffffffffffff",
    },
    ("google_api", TEXT_RUN): {"jobId": "rmanual-2026-01-31", "requestId": "918ec9eb-0063-48ef-b9af-8d8a58876b8f"},
    ("vertex_pipeline_job", HEX_RUN): {
        "pipelineJobId": "runonce-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "label": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde",
    },
    ("vertex_pipeline_job", OTHER_RUN): {
        "pipelineJobId": "runonce-fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff0",
        "label": "fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    },
    ("vertex_pipeline_job", TEXT_RUN): {
        "pipelineJobId": "runonce-918ec9eb006358ef39af8d8a58876b8fc026848ac6fefb374c774c9f0c427dbf",
        "label": "manual-2026-01-31",
    },
}
GOLDEN_DIGESTS: dict[tuple[str, str], str] = {
    ("batch_job", HEX_RUN): "fee41d1dfc2a617c",
    ("batch_job", OTHER_RUN): "7097685e498344f4",
    ("batch_job", TEXT_RUN): "0a179f054c8fa4b2",
    ("bigquery_job", HEX_RUN): "da18a094aac9b8a1",
    ("bigquery_job", OTHER_RUN): "1f817fb9bc2e4988",
    ("bigquery_job", TEXT_RUN): "809b205e67f25475",
    ("cloud_build_trigger", HEX_RUN): "22bffaa57f593312",
    ("cloud_build_trigger", OTHER_RUN): "69b254884726c40e",
    ("cloud_build_trigger", TEXT_RUN): "d397522048ef5119",
    ("cloud_run_job", HEX_RUN): "48f3558357ec15fc",
    ("cloud_run_job", OTHER_RUN): "b90ae031f7b92a41",
    ("cloud_run_job", TEXT_RUN): "2793daf351a242ad",
    ("cloud_tasks_task", HEX_RUN): "dfc99569e5449e0e",
    ("cloud_tasks_task", OTHER_RUN): "09f91436b2e81e6b",
    ("cloud_tasks_task", TEXT_RUN): "f47786d820a7181a",
    ("dataflow_flex_template", HEX_RUN): "6a8807f95ae9a9d6",
    ("dataflow_flex_template", OTHER_RUN): "024742b1d3e45fef",
    ("dataflow_flex_template", TEXT_RUN): "fae0e29d2ce90812",
    ("dataproc_batch", HEX_RUN): "70d3e9b4e35a4437",
    ("dataproc_batch", OTHER_RUN): "c76617e63ad1a3b1",
    ("dataproc_batch", TEXT_RUN): "689884080fa49453",
    ("google_api", HEX_RUN): "23a6e81ab1c9983a",
    ("google_api", OTHER_RUN): "a995fbdcab993ed0",
    ("google_api", TEXT_RUN): "2c3c6cd43827b131",
    ("vertex_pipeline_job", HEX_RUN): "5fedc317fd2c8f5c",
    ("vertex_pipeline_job", OTHER_RUN): "47af3532ad973df1",
    ("vertex_pipeline_job", TEXT_RUN): "6532950cb74db21e",
}


def ids_of(kind: str, call: dict[str, Any]) -> dict[str, Any]:
    """What carries the run in `kind`'s call."""
    query, body = dict(call["query"]), call["body"]
    if kind == "batch_job":
        return {"jobId": query["jobId"], "requestId": query["requestId"], "label": body["labels"]["runonce-run-id"]}
    if kind == "dataproc_batch":
        return {"batchId": query["batchId"], "requestId": query["requestId"], "label": body["labels"]["runonce-run-id"]}
    if kind == "vertex_pipeline_job":
        return {"pipelineJobId": query["pipelineJobId"], "label": body["labels"]["runonce-run-id"]}
    if kind == "dataflow_flex_template":
        launch = body["launchParameter"]
        return {"jobName": launch["jobName"], "label": launch["environment"]["additionalUserLabels"]["runonce-run-id"]}
    if kind == "bigquery_job":
        return {"jobId": body["jobReference"]["jobId"], "label": body["configuration"]["labels"]["runonce-run-id"]}
    if kind == "cloud_tasks_task":
        task = body["task"]
        return {"name": task["name"], "Idempotency-Key": task["httpRequest"]["headers"]["Idempotency-Key"]}
    if kind == "cloud_build_trigger":
        return {"_IDEMPOTENCY_KEY": body["source"]["substitutions"]["_IDEMPOTENCY_KEY"]}
    if kind == "cloud_run_job":
        [container] = body["overrides"]["containerOverrides"]
        return {"IDEMPOTENCY_KEY": {e["name"]: e["value"] for e in container["env"]}["IDEMPOTENCY_KEY"]}
    assert kind == "google_api"
    return {"jobId": query["jobId"], "requestId": query["requestId"]}


@pytest.mark.parametrize("run_id", RUN_IDS)
@pytest.mark.parametrize("kind", sorted(CONFIGS))
async def test_each_target_sends_what_it_always_sent(kind: str, run_id: str) -> None:
    call = await sent_for(kind, run_id)
    assert ids_of(kind, call) == GOLDEN_IDS[kind, run_id]
    assert digest(call) == GOLDEN_DIGESTS[kind, run_id], call


WORKFLOWS = {"workflow": "projects/my-project/locations/us-central1/workflows/etl", "labels": {"team": "a"}}
GOLDEN_WORKFLOWS: dict[str, dict[str, Any]] = {
    HEX_RUN: {
        "argument": '{"idempotency_key":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","runonce":{"job":"nightly","schedule_time":"2026-01-31T12:00:00Z","source":"scheduler"}}',
        "labels": {"team": "a", "runonce-run-id": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde"},
    },
    OTHER_RUN: {
        "argument": '{"idempotency_key":"fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff0","runonce":{"job":"nightly","schedule_time":"2026-01-31T12:00:00Z","source":"scheduler"}}',
        "labels": {"team": "a", "runonce-run-id": "fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"},
    },
    TEXT_RUN: {
        "argument": '{"idempotency_key":"manual-2026-01-31","runonce":{"job":"nightly","schedule_time":"2026-01-31T12:00:00Z","source":"scheduler"}}',
        "labels": {"team": "a", "runonce-run-id": "manual-2026-01-31"},
    },
}


async def workflows_sent_for(run_id: str) -> dict[str, Any]:
    """The execution a `workflows` route creates for `run_id`: its argument (as the text sent) and
    labels (pinned from the gRPC client the target used before it called the REST API: the same
    `Execution` message, so the same argument text and labels)."""
    body = (await sent_for("workflows", run_id, WORKFLOWS))["body"]
    return {"argument": body["argument"], "labels": body["labels"]}


@pytest.mark.parametrize("run_id", RUN_IDS)
async def test_workflows_sends_what_it_always_sent(run_id: str) -> None:
    assert await workflows_sent_for(run_id) == GOLDEN_WORKFLOWS[run_id]
