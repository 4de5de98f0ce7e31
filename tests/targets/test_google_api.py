"""The `google_api` target in-process: what a route may say (each class of mistake, checked against
the discovery document, gets one line naming the route, the field and what the document allows),
where the documents come from, the placeholders, and how every answer becomes an outcome, against
fakes of Cloud Batch and Dataproc that check each request against their documents. The same paths
through a real `runonce serve` are in test_google_api_e2e.py."""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import yaml
from pydantic_core import PydanticCustomError

from runonce.routes import parse_routes
from runonce.settings import ConfigError
from runonce.targets import TARGET_TYPES, DispatchRequest, TargetFailed, TargetOutcomeUnknown
from runonce.targets import google_api_discovery as discovery
from runonce.targets.google_api import (
    GoogleApiTarget,
    GoogleApiTargetConfig,
    _collection_name,
    _dry_runs,
    _location,
    carries_run,
    check_params,
    expand,
    placeholder_problem,
    run_uuid,
    template_pattern,
    uses_schedule_time,
)
from runonce.targets.handles import ID_RULES, handles_by_api, id_problem
from tests.fakes.batch import CREATE as BATCH_CREATE
from tests.fakes.batch import GET as BATCH_GET
from tests.fakes.batch import FakeBatch
from tests.fakes.dataproc import GET as DATAPROC_GET
from tests.fakes.dataproc import FakeDataproc
from tests.fakes.metadata import FakeMetadataServer, MetadataTokenAuth
from tests.support import discovery_vendor
from tests.support.procs import REPO

PARENT = "projects/runonce-test/locations/us-central1"
JOB_NAME = f"{PARENT}/jobs/r${{run_id:62}}"
GROUPS = [{"taskSpec": {"runnables": [{"script": {"text": "echo"}}]}}]
"""The least a Batch job holds: one task group with one runnable."""

BATCH = {
    "type": "google_api",
    "api": "batch.v1",
    "method": "projects.locations.jobs.create",
    "params": {"parent": PARENT, "jobId": "r${run_id:62}"},
    "body": {"taskGroups": [{"taskSpec": {"runnables": [{"script": {"text": "echo ${schedule_time}"}}]}}]},
    "reconcile": {"method": "projects.locations.jobs.get", "params": {"name": JOB_NAME}},
    "running": {"field": "status.state", "values": ["QUEUED", "SCHEDULED", "RUNNING"]},
}

BIGQUERY_QUERY_JOB = {
    "type": "google_api",
    "api": "bigquery.v2",
    "method": "jobs.insert",
    "params": {"projectId": "p"},
    "body": {"jobReference": {"jobId": "r${run_id}"}, "configuration": {"query": {"query": "SELECT 1"}}},
    "reconcile": {"method": "jobs.get", "params": {"projectId": "p", "jobId": "r${run_id}"}},
    "running": {"field": "status.state", "values": ["PENDING", "RUNNING"]},
}
"""A BigQuery query job started with jobs.insert and read back with jobs.get."""
SPARK = {
    "type": "google_api",
    "api": "dataproc.v1",
    "method": "projects.locations.batches.create",
    "params": {"parent": PARENT, "requestId": "${run_uuid}", "batchId": "b${run_id:62}"},
    "body": {"pysparkBatch": {"mainPythonFileUri": "gs://p/etl.py"}},
}


def with_changes(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """`base` with `change` merged one level into params/body/reconcile; None removes a key."""
    target = copy.deepcopy(base)
    for key, value in change.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict) and key != "running":
            for inner, item in value.items():
                if item is None:
                    target[key].pop(inner, None)
                else:
                    target[key][inner] = item
        else:
            target[key] = value
    return target


def error_of(target: dict[str, Any], **route: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_routes(json.dumps({"routes": {"jobs": {"target": target, **route}}}), "routes file r.yaml")
    lines = str(caught.value).splitlines()
    assert len(lines) == 1, lines
    return lines[0]


# --- what a route may say: one test per class of mistake ------------------------------------------


def test_the_issue_example_route_loads() -> None:
    route = parse_routes(json.dumps({"routes": {"jobs": {"target": BATCH, "overlap": "skip"}}}), "t")["jobs"]
    assert isinstance(route.target, GoogleApiTargetConfig)
    assert route.target.state_problem is None
    assert parse_routes(json.dumps({"routes": {"s": {"target": SPARK}}}), "t")["s"].target.reconcile is None


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"api": "batch.v9"}, "field 'target.api': no discovery document 'batch.v9' among those runonce carries"),
        ({"api": "batch"}, "field 'target.api': 'batch' is not an API as name.version"),
    ],
)
def test_an_unknown_api_is_refused_naming_the_documents_carried(change, expected) -> None:
    line = error_of(with_changes(BATCH, change))
    assert line.startswith(f"routes file r.yaml: route 'jobs': {expected}"), line
    if "carries" in expected:
        assert "batch.v1" in line and "dataproc.v1" in line


def test_an_unknown_method_is_refused_naming_similar_ones() -> None:
    line = error_of(with_changes(BATCH, {"method": "projects.locations.jobs.insert"}))
    assert line.startswith("routes file r.yaml: route 'jobs': field 'target.method': batch.v1 has no method")
    assert "'projects.locations.jobs.insert'" in line and "projects.locations.jobs.create" in line


def test_the_method_may_be_named_with_the_api_in_front() -> None:
    parse_routes(
        json.dumps({"routes": {"r": {"target": {**BATCH, "method": "batch.projects.locations.jobs.create"}}}}), "t"
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"params": {"jobID": "r${run_id:62}"}}, "has no parameter 'jobID' (it takes: jobId, parent, requestId)"),
        ({"params": {"fields": "name"}}, "params.fields: a standard parameter of every Google API, not one of batch."),
        ({"params": {"parent": None}}, "needs the path parameter 'parent' (pattern ^projects/[^/]+/locations/[^/]+$)"),
        ({"params": {"parent": "projects/p"}}, "parent='projects/p' does not match ^projects/[^/]+/locations/[^/]+$"),
        ({"params": {"jobId": ["a", "b"]}}, "jobId: expected a string, got list"),
    ],
)
def test_a_param_the_method_does_not_take_or_that_breaks_its_pattern_is_refused(change, expected) -> None:
    line = error_of(with_changes(BATCH, change))
    assert "route 'jobs': field 'target.params': " in line and expected in line, line


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"pageSize": "ten"}, "pageSize='ten': expected an integer"),
        ({"pageSize": None}, "params.pageSize: expected an integer, got nothing (null)"),
        ({"filter": {"a": 1}}, "params.filter: expected a string, got dict"),
        ({"orderBy": True, "pageSize": 5}, None),
    ],
)
def test_a_query_param_is_held_to_its_type(params, expected) -> None:
    method = discovery.load("batch.v1").method("projects.locations.jobs.list")
    assert method is not None
    if expected is None:
        check_params(method, {"parent": PARENT, **params}, "params")
    else:
        with pytest.raises(PydanticCustomError) as caught:
            check_params(method, {"parent": PARENT, **params}, "params")
        assert expected in str(caught.value)


def test_a_boolean_and_an_enum_param_are_held_to_the_document() -> None:
    method = discovery.load("run.v2").method("projects.locations.jobs.create")
    assert method is not None
    from runonce.targets.google_api import param_problem

    assert param_problem(method, "validateOnly", True) is None
    assert param_problem(method, "validateOnly", "yes") == "validateOnly='yes': expected true or false"
    topics = discovery.load("pubsub.v1").method("projects.topics.list")
    assert topics is not None and param_problem(topics, "pageSize", 10) is None
    dataflow = discovery.load("dataflow.v1b3").method("projects.locations.jobs.list")
    assert dataflow is not None
    assert param_problem(dataflow, "filter", "ACTIVE") is None
    assert "not one of UNKNOWN, ALL, TERMINATED, ACTIVE" in str(param_problem(dataflow, "filter", "RUNNING"))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"taskGroupz": []}, "body: Job has no field 'taskGroupz' (it has: allocationPolicy, labels, logsPolicy,"),
        ({"taskGroups": {"taskCount": 1}}, "body.taskGroups: expected an array, got dict"),
        ({"taskGroups": [{"taskCount": "many"}]}, "body.taskGroups[0].taskCount: expected an int64"),
        ({"taskGroups": [{"taskSpec": {"maxRunDuration": "1h"}}]}, "is not a duration like '3.5s'"),
        ({"taskGroups": [{"taskSpec": {"runnables": "x"}}]}, "body.taskGroups[0].taskSpec.runnables: expected an"),
        ({"taskGroups": [{"requireHostsFile": "yes"}]}, "requireHostsFile: expected a boolean, got str"),
        ({"taskGroups": GROUPS, "status": {"state": "QUEUED"}}, "body.status: output only in Job; a request cannot"),
        ({"taskGroups": GROUPS, "labels": {"a": 1}}, "body.labels.a: expected a string, got int 1"),
        ({"taskGroups": GROUPS, "priority": "${run_id}"}, "body.priority: expected an int64"),
        ({"taskGroups": [{"taskSpec": {"runnables": [{"script": "echo"}]}}]}, "expected an object (Script), got str"),
        (
            {"taskGroups": GROUPS, "logsPolicy": {"destination": "STDOUT"}},
            "'STDOUT' is not one of DESTINATION_UNSPECIFIED",
        ),
    ],
)
def test_a_body_field_not_in_the_request_schema_or_of_the_wrong_type_is_refused(body, expected) -> None:
    line = error_of({**BATCH, "body": body})
    assert "route 'jobs': field 'target.body': " in line and expected in line, line


def test_a_body_for_a_method_that_takes_none_is_refused() -> None:
    target = with_changes(BATCH, {"method": "projects.locations.jobs.delete", "params": {"name": JOB_NAME}})
    target["params"] = {"name": JOB_NAME}
    assert "batch.projects.locations.jobs.delete takes no request body" in error_of(target)


def test_numbers_and_timestamps_in_a_body_are_held_to_their_format() -> None:
    document = discovery.load("aiplatform.v1")
    assert (
        document.value_problem({"displayName": "x", "labels": {}}, {"$ref": "GoogleCloudAiplatformV1PipelineJob"}, "b")
        is None
    )
    problem = document.value_problem({"startTime": "yesterday"}, {"$ref": "GoogleCloudAiplatformV1Schedule"}, "body")
    assert problem == "body.startTime: 'yesterday' is not an RFC 3339 timestamp like 2026-01-31T12:00:00Z"
    assert discovery.scalar_problem(1.5, {"type": "number"}, "x") is None
    assert discovery.scalar_problem(True, {"type": "number"}, "x") == "x: expected a number, got bool true"
    assert discovery.scalar_problem(True, {"type": "integer"}, "x") == "x: expected an integer, got bool true"
    assert discovery.scalar_problem("12", {"type": "integer"}, "x") is None
    assert discovery.scalar_problem(3, {"type": "string", "format": "int64"}, "x") is None
    assert discovery.scalar_problem({"a": 1}, {"type": "any"}, "x") is None


@pytest.mark.parametrize(
    ("change", "field", "expected"),
    [
        # the expansion of ${run_id:62} after "jobs" without a "/" breaks the name's pattern
        (
            {"reconcile": {"params": {"name": f"{PARENT}/jobs-r${{run_id:62}}"}}},
            "target.reconcile",
            "does not match ^projects/[^/]+/locations/[^/]+/jobs/[^/]+$",
        ),
        ({"params": {"parent": "projects/p/locations/${schedule_time}/x"}}, "target.params", "does not match"),
        ({"params": {"jobId": "r${run_idd}"}}, "target.params", "unknown placeholder '${run_idd}' (runonce fills"),
        ({"params": {"jobId": "r${run_id:65}"}}, "target.params", "unknown placeholder '${run_id:65}'"),
        (
            {"body": {"taskGroups": GROUPS, "labels": {"x": "${run}"}}},
            "target.body",
            "body.labels.x: unknown placeholder",
        ),
    ],
)
def test_a_placeholder_whose_expansion_breaks_the_documents_pattern_is_refused(change, field, expected) -> None:
    line = error_of(with_changes(BATCH, change))
    assert f"field '{field}': " in line and expected in line, line


@pytest.mark.parametrize(
    ("reconcile", "expected"),
    [
        ({"method": "projects.locations.jobs.read", "params": {"name": JOB_NAME}}, "batch.v1 has no method"),
        ({"method": "projects.locations.jobs.delete", "params": {"name": JOB_NAME}}, "is an HTTP DELETE"),
        ({"method": "projects.locations.jobs.list", "params": {"parent": PARENT, "filter": "name=${run_id}"}}, "lists"),
        (
            {"method": "projects.locations.jobs.get", "params": {"job": JOB_NAME}},
            "has no parameter 'job' (it takes: name)",
        ),
        ({"method": "projects.locations.jobs.get", "params": {}}, "needs the path parameter 'name'"),
        ({"method": "projects.locations.jobs.get", "params": {"name": f"{PARENT}/jobs/fixed"}}, "another run's"),
        ({"method": "projects.locations.jobs.get", "params": {"name": f"{PARENT}/jobs/r${{run_id:8}}"}}, "N >= 16"),
    ],
)
def test_a_reconcile_method_that_is_missing_or_does_not_take_those_params_is_refused(reconcile, expected) -> None:
    line = error_of({**BATCH, "reconcile": reconcile})
    assert "route 'jobs': field 'target.reconcile': reconcile." in line and expected in line, line


@pytest.mark.parametrize(
    ("running", "expected"),
    [
        (
            {"field": "status.phase", "values": ["RUNNING"]},
            "Job (the answer of batch.projects.locations.jobs.get) has no",
        ),
        ({"field": "status.state", "values": ["STARTED"]}, "'STARTED' is not a value of status.state (it takes:"),
        ({"field": "status", "values": ["RUNNING"]}, "'status' is not a string field"),
        ({"field": "status.runDuration", "values": ["x"]}, "'status.runDuration' is a google-duration field"),
    ],
)
def test_a_running_field_not_in_the_reconcile_answer_is_refused(running, expected) -> None:
    line = error_of({**BATCH, "running": running})
    assert "route 'jobs': field 'target': running." in line and expected in line, line


def test_running_needs_a_reconcile_method() -> None:
    target = {**SPARK, "running": {"field": "state", "values": ["RUNNING"]}}
    assert "running: reads the state with the reconcile method" in error_of(target)


@pytest.mark.parametrize(
    "change",
    [
        {"params": {"jobId": None}, "reconcile": None, "running": None},
        {"params": {"jobId": "nightly"}, "reconcile": None, "running": None},  # fixed: every run the same id
        {"params": {"jobId": "r${run_id:8}"}, "reconcile": None, "running": None},  # too short to tell runs apart
        {
            "params": {"jobId": None},
            "body": {"taskGroups": GROUPS, "labels": {"run": "${run_id:63}"}},
            "reconcile": None,
            "running": None,
        },
    ],
)
def test_a_route_with_no_way_to_dedupe_is_refused_with_the_reason(change) -> None:
    line = error_of(with_changes(BATCH, {"reconcile": None, "running": None, **change}))
    assert line.startswith("routes file r.yaml: route 'jobs': field 'target': no way to dedupe"), line
    assert "params.jobId (resource id), params.requestId (request id) (e.g. " in line, line
    assert "a retry after a lost answer could create a second" in line


def test_a_reconcile_read_alone_is_no_way_to_dedupe() -> None:
    """The job's id is the server's when the route does not fill jobId: a read of r${run_id:62} finds nothing."""
    line = error_of(with_changes(BATCH, {"params": {"jobId": None}}))
    assert "field 'target': no way to dedupe" in line and "params.jobId (resource id)" in line, line


@pytest.mark.parametrize(
    "target",
    [
        with_changes(BATCH, {"reconcile": None, "running": None}),  # jobId alone
        with_changes(SPARK, {"params": {"batchId": None}}),  # requestId alone
        {
            "type": "google_api",
            "api": "pubsub.v1",
            "method": "projects.topics.create",
            "params": {"name": "projects/p/topics/t-${run_id}"},
            "body": {"labels": {"runonce-run-id": "${run_id:63}"}},
        },  # the name in the path of a PUT
        {
            "type": "google_api",
            "api": "run.v2",
            "method": "projects.locations.jobs.create",
            "params": {"parent": PARENT, "jobId": "j${run_id:32}"},
            "body": {"template": {"template": {"containers": []}}},
        },  # the AIP-133 id of a create
        BIGQUERY_QUERY_JOB,  # BigQuery's jobReference.jobId, read back by jobs.get
    ],
)
def test_a_handle_filled_from_the_run_is_a_way_to_dedupe(target) -> None:
    parse_routes(json.dumps({"routes": {"r": {"target": target}}}), "t")


def test_a_path_parameter_of_a_post_is_no_handle() -> None:
    target = {
        "type": "google_api",
        "api": "run.v2",
        "method": "projects.locations.jobs.run",
        "params": {"name": f"{PARENT}/jobs/j${{run_id}}"},
        "body": {},
    }
    assert "no way to dedupe" in error_of(target)


def test_overlap_needs_running() -> None:
    line = error_of(with_changes(BATCH, {"running": None}), overlap="wait")
    assert line.startswith("routes file r.yaml: route 'jobs': overlap 'wait' asks the target whether the previous")
    assert "and the route's target has no 'running' {field, values} to read the state with" in line


def test_other_fields_are_refused() -> None:
    assert "field 'target.bodies': Extra inputs are not permitted" in error_of({**BATCH, "bodies": {}})


def test_the_registry_entry() -> None:
    entry = TARGET_TYPES["google_api"]
    assert entry.can_reconcile and entry.reads_state
    assert entry.grants == () and entry.resource_field is None and entry.endpoint is None


# --- the example routes file and the docs -------------------------------------------------------------


def test_the_example_routes_file_is_accepted_by_the_loader() -> None:
    path = REPO / "examples" / "google_api.yaml"
    routes = parse_routes(path.read_text(), f"routes file {path}")
    assert {route.target.type for route in routes.values()} == {"google_api"}
    assert len(routes) >= 3


def test_the_docs_examples_are_accepted_by_the_loader() -> None:
    page = (REPO / "docs" / "how-to" / "targets" / "google_api.md").read_text()
    blocks = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", page, flags=re.S)]
    routes = [block for block in blocks if isinstance(block, dict) and "routes" in block]
    assert routes
    for block in routes:
        parse_routes(json.dumps(block), "docs")


# --- where the documents come from -----------------------------------------------------------------------


def test_the_carried_documents_are_the_pinned_clients_reduced() -> None:
    """runonce/targets/discovery/ is what `make discovery` writes from the installed client: a new
    google-api-python-client in the lock without regenerating them fails here."""
    source = json.loads((discovery.VENDORED / "SOURCE.json").read_text())
    assert source == discovery_vendor.source()
    assert discovery.vendored_names() == sorted(discovery_vendor.APIS)
    for api in discovery_vendor.APIS:
        assert (discovery.VENDORED / f"{api}.json.gz").read_bytes() == discovery_vendor.compressed(api)[0], api


def test_the_carried_documents_stay_small() -> None:
    total = sum(path.stat().st_size for path in discovery.VENDORED.iterdir())
    assert total < 400 * 1024


def test_an_api_not_carried_comes_from_the_client_cache_when_installed(monkeypatch) -> None:
    document = discovery.load("cloudscheduler.v1")  # not carried: the test venv has the client
    assert document.method("projects.locations.jobs.run") is not None
    discovery.load.cache_clear()
    monkeypatch.setattr(discovery, "_client_cache", lambda: None)
    try:
        with pytest.raises(discovery.DocumentNotFound, match=r"install runonce\[google-api\] for any other"):
            discovery.load("cloudscheduler.v1")
        assert discovery.load("batch.v1").api == "batch.v1"
    finally:
        discovery.load.cache_clear()


def test_a_reduced_document_keeps_what_the_checks_need() -> None:
    doc = discovery.reduce_document(
        {
            "name": "x",
            "version": "v1",
            "rootUrl": "https://x.googleapis.com/",
            "endpoints": [
                {"location": "eu", "endpointUrl": "https://eu-x.googleapis.com/"},
                {"location": "us", "endpointUrl": "https://x.us.rep.googleapis.com/"},
            ],
            "resources": {
                "things": {
                    "methods": {
                        "get": {
                            "id": "x.things.get",
                            "httpMethod": "GET",
                            "path": "v1/{+name}",
                            "parameters": {"name": {"location": "path", "pattern": "^t/[^/]+$", "description": "d"}},
                            "response": {"$ref": "Thing"},
                        }
                    }
                }
            },
            "schemas": {
                "Thing": {
                    "type": "object",
                    "description": "A thing.",
                    "properties": {
                        "state": {"type": "string", "description": "Output only. Its state.", "enum": ["A"]},
                        "tags": {"type": "array", "items": {"type": "string", "description": "t"}},
                        "map": {"type": "object", "additionalProperties": {"$ref": "Thing"}},
                    },
                }
            },
        }
    )
    assert doc["locational"] == {"eu": "https://eu-x.googleapis.com/"}  # not the .rep. endpoint
    assert doc["methods"]["x.things.get"] == {
        "httpMethod": "GET",
        "path": "v1/{+name}",
        "parameters": {"name": {"location": "path", "pattern": "^t/[^/]+$"}},
        "request": None,
        "response": "Thing",
    }
    assert doc["schemas"]["Thing"] == {
        "type": "object",
        "properties": {
            "state": {"type": "string", "enum": ["A"], "readOnly": True},
            "tags": {"type": "array", "items": {"type": "string"}},
            "map": {"type": "object", "additionalProperties": {"$ref": "Thing"}},
        },
    }
    document = discovery.ApiDocument(doc)
    assert document.default_endpoint("eu") == "https://eu-x.googleapis.com"
    assert document.default_endpoint("us") == "https://x.googleapis.com"
    assert document.default_endpoint(None) == "https://x.googleapis.com"
    assert document.field("Thing", "map") == {"type": "object", "additionalProperties": {"$ref": "Thing"}}
    assert document.field("Thing", "state.x") is None


# --- placeholders ------------------------------------------------------------------------------------------

RUN_ID = hashlib.sha256(b"a run").hexdigest()


def test_placeholders_expand_from_the_run() -> None:
    value = {
        "a": "r${run_id:62}",
        "b": ["${run_id}", "${run_uuid}", 3, True, None],
        "c": {"${run_id}": "at ${schedule_time}"},
    }
    assert expand(value, RUN_ID, "2026-01-31T12:00:00Z") == {
        "a": "r" + RUN_ID[:62],
        "b": [RUN_ID, run_uuid(RUN_ID), 3, True, None],
        "c": {"${run_id}": "at 2026-01-31T12:00:00Z"},
    }
    assert expand("x${schedule_time}", RUN_ID, None) == "x"


def test_every_dry_run_a_route_sets_is_found_by_its_place() -> None:
    """`validateOnly` or `dryRun` true (or "true", as a query parameter is written) at any depth."""
    route = {
        "params": {"validateOnly": "true", "dryRun": "false"},
        "body": {"a": [{"b": 1}, {"dryRun": True}], "validateOnly": False},
    }
    assert list(_dry_runs(route, "")) == ["params.validateOnly", "body.a[1].dryRun"]


def test_a_doubled_dollar_sends_a_placeholder_as_it_is() -> None:
    """A Batch script's own `${BATCH_TASK_INDEX}` is written `$${BATCH_TASK_INDEX}`; it fills nothing,
    carries no run and needs no schedule time."""
    text = "echo $${BATCH_TASK_INDEX} $${run_id} $${schedule_time} ${run_id:4}"
    assert expand(text, RUN_ID, None) == f"echo ${{BATCH_TASK_INDEX}} ${{run_id}} ${{schedule_time}} {RUN_ID[:4]}"
    assert not carries_run("$${run_id}") and carries_run("$${x} ${run_id}")
    assert not uses_schedule_time(text) and uses_schedule_time("$${x} ${schedule_time}")


def test_run_uuid_is_a_uuid4_from_the_run_id() -> None:
    made = uuid.UUID(run_uuid(RUN_ID))
    assert made.version == 4 and made.variant == uuid.RFC_4122
    assert made.hex[:12] == RUN_ID[:12] and run_uuid(RUN_ID) == run_uuid(RUN_ID)
    assert run_uuid(RUN_ID) != run_uuid(hashlib.sha256(b"another run").hexdigest())
    assert uuid.UUID(run_uuid("not-hex")).version == 4


@pytest.mark.parametrize(
    ("text", "known"),
    [
        ("${run_id}", True),
        ("${run_id:1}", True),
        ("${run_id:64}", True),
        ("${run_id:0}", False),
        ("${run_uuid}", True),
        ("${schedule_time}", True),
        ("${RUN_ID}", False),
        ("${run_id:}", False),
        ("$run_id", True),
        ("$${HOME}", True),  # written for a literal ${HOME}
        ("r${run_id", False),  # a placeholder never closed
        ("echo $${BATCH_TASK_INDEX} ${nope}", False),
    ],
)
def test_placeholder_names(text: str, known: bool) -> None:
    assert (placeholder_problem(text) is None) is known


@pytest.mark.parametrize(
    ("value", "carries"),
    [
        ("${run_id}", True),
        ("${run_uuid}", True),
        ("x${run_id:16}", True),
        ("x${run_id:15}", False),
        ("${schedule_time}", False),
        ({"a": ["${run_id}"]}, True),
        ([1, "x"], False),
        (7, False),
    ],
)
def test_which_values_tell_runs_apart(value: Any, carries: bool) -> None:
    assert carries_run(value) is carries


# --- the adapter against the fakes -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def batch(metadata: FakeMetadataServer) -> Iterator[FakeBatch]:
    fake = FakeBatch(metadata)
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def dataproc(metadata: FakeMetadataServer) -> Iterator[FakeDataproc]:
    fake = FakeDataproc(metadata)
    yield fake
    fake.close()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=3) as client:
        yield client


def target_for(
    target: dict[str, Any], url: str, http: httpx.AsyncClient, metadata: FakeMetadataServer
) -> GoogleApiTarget:
    config = parse_routes(json.dumps({"routes": {"r": {"target": target}}}), "t")["r"].target
    assert isinstance(config, GoogleApiTargetConfig)
    return GoogleApiTarget(config, http, MetadataTokenAuth(metadata.host), url)


_runs = iter(range(10**6))


def new_request(schedule_time: str | None = "2026-10-16T03:00:00Z", payload: dict | None = None) -> DispatchRequest:
    return DispatchRequest(
        run_id=hashlib.sha256(f"google-api-run-{next(_runs)}".encode()).hexdigest(),
        route="r",
        job="nightly-job",
        schedule_time=schedule_time,
        source="scheduler",
        payload=payload or {},
    )


def job_of(request: DispatchRequest) -> str:
    return f"{PARENT}/jobs/r{request.run_id[:62]}"


async def test_a_run_creates_its_job_and_returns_the_reconcile_path(batch, http, metadata) -> None:
    target = target_for(BATCH, batch.url, http, metadata)
    request = new_request()
    assert await target.dispatch(request) == f"v1/{job_of(request)}"
    [created] = [c for c in batch.created if c.resource == job_of(request)]
    assert created.data["body"]["taskGroups"][0]["taskSpec"]["runnables"][0]["script"]["text"] == (
        "echo 2026-10-16T03:00:00Z"
    )
    assert batch.violations == []


async def test_the_answers_name_is_the_resource_without_a_reconcile_method(batch, http, metadata) -> None:
    target = target_for(with_changes(BATCH, {"reconcile": None, "running": None}), batch.url, http, metadata)
    request = new_request()
    assert await target.dispatch(request) == job_of(request)
    assert await target.reconcile(request) is None  # the jobId dedupes a re-sent create


async def test_a_taken_id_is_adopted_by_reconcile_or_as_the_call(batch, http, metadata) -> None:
    request = new_request()
    with_lookup = target_for(BATCH, batch.url, http, metadata)
    await with_lookup.dispatch(request)
    creates, gets = batch.calls[BATCH_CREATE], batch.calls[BATCH_GET]
    assert await with_lookup.dispatch(request) == f"v1/{job_of(request)}"
    assert (batch.calls[BATCH_CREATE], batch.calls[BATCH_GET]) == (creates + 1, gets + 1)
    without = target_for(with_changes(BATCH, {"reconcile": None, "running": None}), batch.url, http, metadata)
    assert await without.dispatch(request) == f"v1/{PARENT}/jobs?jobId=r{request.run_id[:62]}"
    assert len(batch.created_with_id(f"r{request.run_id[:62]}")) == 1


async def test_a_taken_id_that_reconcile_cannot_find_is_unknown(batch, http, metadata) -> None:
    target = target_for(BATCH, batch.url, http, metadata)
    request = new_request()
    await target.dispatch(request)
    batch.fail(BATCH_GET, "NOT_FOUND", "lagging")
    with pytest.raises(
        TargetOutcomeUnknown, match=r"it already exists; read it: the API says it exists but it cannot be read yet"
    ):
        await target.dispatch(request)
    batch.fail(BATCH_GET, "PERMISSION_DENIED", "no batch.jobs.get")
    with pytest.raises(TargetOutcomeUnknown, match="cannot tell whether this run already started"):
        await target.dispatch(request)


async def test_409_aborted_is_a_refusal_not_the_runs_execution(batch, http, metadata) -> None:
    target = target_for(BATCH, batch.url, http, metadata)
    request = new_request()
    batch.fail(BATCH_CREATE, "ABORTED", "concurrent modification", http_status=409)
    with pytest.raises(TargetFailed, match="HTTP 409 ABORTED: concurrent modification"):
        await target.dispatch(request)
    assert batch.created_with_id(f"r{request.run_id[:62]}") == []


async def test_a_re_sent_request_id_is_the_same_operation(dataproc, http, metadata) -> None:
    target = target_for(SPARK, dataproc.url, http, metadata)
    request = new_request()
    first = await target.dispatch(request)
    assert first.startswith("projects/runonce-test/regions/us-central1/operations/")
    assert await target.dispatch(request) == first
    assert await target.reconcile(request) is None
    [created] = dataproc.created_with_id(f"b{request.run_id[:62]}")
    [sent] = [c for c in dataproc.created if c.resource == created]
    assert sent.data["body"] == {"pysparkBatch": {"mainPythonFileUri": "gs://p/etl.py"}}
    dataproc.forget_request_ids()
    assert (
        await target.dispatch(request)
        == f"v1/{PARENT}/batches?requestId={run_uuid(request.run_id)}&batchId=b{request.run_id[:62]}"
    )
    assert dataproc.violations == []


async def test_reconcile_finds_the_runs_resource_and_nothing_for_another_run(batch, http, metadata) -> None:
    target = target_for(BATCH, batch.url, http, metadata)
    request = new_request()
    await target.dispatch(request)
    assert await target.reconcile(request) == f"v1/{job_of(request)}"
    assert await target.reconcile(new_request()) is None


async def test_is_running_reads_the_field_of_the_reconcile_answer(batch, http, metadata) -> None:
    target = target_for(BATCH, batch.url, http, metadata)
    request = new_request()
    resource = await target.dispatch(request)
    assert await target.is_running(resource) is True
    batch.finish(job_of(request), "RUNNING")
    assert await target.is_running(resource) is True
    batch.finish(job_of(request), "SUCCEEDED")
    assert await target.is_running(resource) is False
    assert await target.is_running(f"v1/{PARENT}/jobs/gone") is False  # deleted: not running
    batch.resources[job_of(request)]["status"] = {}
    with pytest.raises(TargetOutcomeUnknown, match=r"no status\.state in the answer"):
        await target.is_running(resource)
    del batch.resources[job_of(request)]["status"]
    with pytest.raises(TargetOutcomeUnknown, match=r"no status\.state in the answer"):
        await target.is_running(resource)
    batch.fail(BATCH_GET, "PERMISSION_DENIED", "no")
    with pytest.raises(TargetOutcomeUnknown, match=f"get {resource}"):
        await target.is_running(resource)


async def test_is_running_without_running_cannot_tell(dataproc, http, metadata) -> None:
    target = target_for(SPARK, dataproc.url, http, metadata)
    with pytest.raises(TargetOutcomeUnknown, match="no 'running'"):
        await target.is_running("projects/p/regions/r/operations/o")


async def test_reconcile_on_a_second_api_reads_the_batch(dataproc, http, metadata) -> None:
    spark = {
        **SPARK,
        "reconcile": {
            "method": "projects.locations.batches.get",
            "params": {"name": f"{PARENT}/batches/b${{run_id:62}}"},
        },
        "running": {"field": "state", "values": ["PENDING", "RUNNING"]},
    }
    target = target_for(spark, dataproc.url, http, metadata)
    request = new_request()
    assert await target.reconcile(request) is None
    resource = await target.dispatch(request)
    assert resource == f"v1/{PARENT}/batches/b{request.run_id[:62]}"
    gets = dataproc.calls[DATAPROC_GET]
    assert await target.reconcile(request) == resource
    assert await target.is_running(resource) is True
    assert dataproc.calls[DATAPROC_GET] == gets + 2


async def test_a_delivery_body_or_a_missing_schedule_time_is_refused_before_sending(batch, http, metadata) -> None:
    target = target_for(BATCH, batch.url, http, metadata)
    creates = batch.calls[BATCH_CREATE]
    with pytest.raises(TargetFailed, match="takes no delivery body"):
        await target.dispatch(new_request(payload={"a": 1}))
    with pytest.raises(TargetFailed, match=r"uses \$\{schedule_time\} and this run has no schedule time"):
        await target.dispatch(new_request(schedule_time=None))
    assert batch.calls[BATCH_CREATE] == creates
    spark = target_for(SPARK, "http://127.0.0.1:9", http, metadata)  # no ${schedule_time}: sent (and refused)
    with pytest.raises(TargetFailed, match="could not connect, nothing was sent"):
        await spark.dispatch(new_request(schedule_time=None))


async def test_the_default_endpoint_is_the_locational_host_or_the_root(http, metadata) -> None:
    vertex = {
        "type": "google_api",
        "api": "aiplatform.v1",
        "method": "projects.locations.pipelineJobs.create",
        "params": {"parent": "projects/p/locations/europe-west4", "pipelineJobId": "p${run_id:62}"},
        "body": {"displayName": "nightly"},
    }
    assert target_for(vertex, None, http, metadata)._base == "https://europe-west4-aiplatform.googleapis.com"  # type: ignore[arg-type]
    assert target_for(BATCH, None, http, metadata)._base == "https://batch.googleapis.com"  # type: ignore[arg-type]
    assert target_for(SPARK, None, http, metadata)._base == "https://dataproc.googleapis.com"  # type: ignore[arg-type]
    routed = target_for({**BATCH, "endpoint": "http://127.0.0.1:8123/"}, None, http, metadata)  # type: ignore[arg-type]
    assert routed._base == "http://127.0.0.1:8123"


async def test_reserved_and_simple_path_expansion(http, metadata) -> None:
    from runonce.targets.engine import build_path

    document = discovery.load("cloudbuild.v1")
    method = document.method("projects.builds.cancel")
    assert method is not None
    assert build_path(document, method, {"projectId": "p", "id": "a/b c"}) == (
        "v1/projects/p/builds/a%2Fb%20c:cancel",
        {},
    )
    bigquery = discovery.load("bigquery.v2")
    get = bigquery.method("jobs.get")
    assert get is not None  # a service path in front, a reserved expansion keeps its slashes
    path, query = build_path(bigquery, get, {"projectId": "p", "jobId": "a/b c", "location": "EU"})
    assert (path, query) == ("bigquery/v2/projects/p/jobs/a/b%20c", {"location": "EU"})
    batch_doc = discovery.load("batch.v1")
    job = batch_doc.method("projects.locations.jobs.get")
    assert job is not None
    assert build_path(batch_doc, job, {"name": "projects/p/locations/l/jobs/j k"}) == (
        "v1/projects/p/locations/l/jobs/j%20k",
        {},
    )
    listing = batch_doc.method("projects.locations.jobs.list")
    assert listing is not None
    assert build_path(batch_doc, listing, {"parent": "projects/p/locations/l", "pageSize": 5, "orderBy": True}) == (
        "v1/projects/p/locations/l/jobs",
        {"pageSize": "5", "orderBy": "true"},
    )


def test_the_carried_documents_load_fast_enough_to_stay_out_of_the_way() -> None:
    for api in discovery.vendored_names():
        data = json.loads(gzip.decompress((discovery.VENDORED / f"{api}.json.gz").read_bytes()))
        assert data["name"] + "." + data["version"] == api


# --- runonce lint -------------------------------------------------------------------------------------


def test_runonce_lint_checks_google_api_routes(tmp_path) -> None:
    from click.testing import CliRunner

    from runonce.cli import main

    good = CliRunner().invoke(main, ["lint", str(REPO / "examples" / "google_api.yaml")])
    assert good.exit_code == 0, good.output
    bad = tmp_path / "routes.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "routes": {
                    "jobs": {
                        "target": with_changes(
                            BATCH, {"params": {"jobId": "${run_id}"}, "reconcile": None, "running": None}
                        )
                        | {"method": "projects.locations.jobs.cancel"}
                    }
                }
            }
        )
    )
    result = CliRunner().invoke(main, ["lint", str(bad)])
    assert result.exit_code == 1, result.output
    assert "route 'jobs': field 'target.params'" in result.output
    assert "has no parameter 'jobId' (it takes: name)" in result.output


async def test_a_409_without_googles_error_body_is_the_runs_execution_too(metadata) -> None:
    """A 409 whose body is not Google's JSON error (a proxy's plain "Conflict") still means the
    run's id is taken: adopted, not refused."""
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        if request.method == "POST":
            return httpx.Response(409, text="Conflict")
        return httpx.Response(200, json={"name": request.url.path.removeprefix("/v1/"), "status": {"state": "RUNNING"}})

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        target = target_for(BATCH, "http://batch.test", client, metadata)
        request = new_request()
        assert await target.dispatch(request) == f"v1/{job_of(request)}"
    assert seen == [f"POST /v1/{PARENT}/jobs", f"GET /v1/{job_of(request)}"]


def test_a_mistake_is_a_route_config_error_and_values_are_shown_as_json() -> None:
    from pydantic import ValidationError

    from runonce.targets.google_api_discovery import _shown

    with pytest.raises(ValidationError) as caught:
        GoogleApiTargetConfig.model_validate({**BATCH, "method": "projects.locations.jobs.nope"})
    assert [error["type"] for error in caught.value.errors()] == ["target_config"]
    assert _shown("é") == 'str "é"'
    from datetime import date

    assert _shown(date(2026, 1, 31)) == 'date "2026-01-31"'
    assert _shown("x" * 100) == 'str "' + "x" * 56 + "..."


async def test_a_reconcile_call_with_a_query_keeps_it_on_the_wire_and_in_the_resource(metadata) -> None:
    """BigQuery's jobs.get takes the job's location as a query parameter: the reconcile call, the
    resource the run records and the state read all carry it."""
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}?{request.url.query.decode()}")
        if request.method == "POST":
            return httpx.Response(200, json={"id": "p:EU.x"})
        return httpx.Response(200, json={"status": {"state": "RUNNING"}})

    query_job = {
        **BIGQUERY_QUERY_JOB,
        "body": {
            "jobReference": {"jobId": "r${run_id}", "location": "EU"},
            "configuration": {"query": {"query": "SELECT 1"}},
        },
        "reconcile": {"method": "jobs.get", "params": {"projectId": "p", "jobId": "r${run_id}", "location": "EU"}},
    }
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        target = target_for(query_job, "http://bigquery.test", client, metadata)
        request = new_request()
        resource = f"bigquery/v2/projects/p/jobs/r{request.run_id}?location=EU"
        assert await target.dispatch(request) == resource
        assert await target.reconcile(request) == resource
        assert await target.is_running(resource) is True
    get = f"GET /bigquery/v2/projects/p/jobs/r{request.run_id}?location=EU"
    assert seen == ["POST /bigquery/v2/projects/p/jobs?", get, get]


async def test_a_recorded_resource_whose_query_repeats_a_parameter_is_read_with_every_value(metadata) -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.query.decode())
        return httpx.Response(200, json={"status": {"state": "DONE"}})

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        target = target_for(BIGQUERY_QUERY_JOB, "http://bigquery.test", client, metadata)
        assert await target.is_running("bigquery/v2/projects/p/jobs/rx?fields=a&fields=b") is False
    assert seen == ["fields=a&fields=b"]


def test_a_repeated_query_parameter_is_sent_once_per_value() -> None:
    from runonce.targets.engine import relative_url

    assert relative_url("v1/x", {"a": ["1", "2"], "b": "3"}) == "v1/x?a=1&a=2&b=3"
    assert relative_url("v1/x", {}) == "v1/x"


# --- each refusal in full, and the edges of params, answers and placeholders -------------------------

RUNS_ANYWHERE = (
    "(runonce fills ${run_id}, ${run_id:N} (N = 1-64), ${run_uuid}, ${schedule_time}; write '$${nope}' to send it "
    "as it is)"
)
BATCH_STATES = (
    "STATE_UNSPECIFIED, QUEUED, SCHEDULED, RUNNING, SUCCEEDED, FAILED, DELETION_IN_PROGRESS, "
    "CANCELLATION_IN_PROGRESS, CANCELLED"
)
COMPUTE_POLICIES = {  # a reconcile GET whose document gives no answer schema (from the client's cache)
    "type": "google_api",
    "api": "compute.v1",
    "method": "backendServices.insert",
    "params": {"project": "p", "requestId": "${run_uuid}"},
    "body": {"name": "b${run_id:62}"},
    "reconcile": {
        "method": "backendServices.getEffectiveSecurityPolicies",
        "params": {"project": "p", "backendService": "b${run_id:62}"},
    },
    "running": {"field": "status", "values": ["RUNNING"]},
}


@pytest.mark.parametrize(
    ("target", "field", "message"),
    [
        ({**BATCH, "method": "zzz"}, "target.method", "batch.v1 has no method 'zzz'"),
        (
            {**BATCH, "method": "projects.locations.jobs.nope"},
            "target.method",
            "batch.v1 has no method 'projects.locations.jobs.nope' (methods like it: projects.locations.jobs.cancel, "
            "projects.locations.jobs.create, projects.locations.jobs.delete, projects.locations.jobs.get, "
            "projects.locations.jobs.list, projects.locations.operations.cancel)",
        ),
        (
            {"type": "google_api", "api": "aiplatform.v1", "method": "evaluateDataset", "params": {"x": "1"}},
            "target.params",
            "params.x: aiplatform.evaluateDataset has no parameter 'x' (it takes: no parameters)",
        ),
        (
            with_changes(BATCH, {"params": {"jobID": "r${run_id:62}"}}),
            "target.params",
            "params.jobID: batch.projects.locations.jobs.create has no parameter 'jobID' (it takes: jobId, parent, "
            "requestId)",
        ),
        (
            with_changes(BATCH, {"params": {"parent": None}}),
            "target.params",
            "params: batch.projects.locations.jobs.create needs the path parameter 'parent' "
            "(pattern ^projects/[^/]+/locations/[^/]+$)",
        ),
        (
            {
                "type": "google_api",
                "api": "cloudbuild.v1",
                "method": "projects.builds.cancel",
                "params": {"projectId": "p"},
            },
            "target.params",
            "params: cloudbuild.projects.builds.cancel needs the path parameter 'id'",
        ),
        (
            with_changes(BATCH, {"params": {"parent": "projects/p"}}),
            "target.params",
            "params.parent='projects/p' does not match ^projects/[^/]+/locations/[^/]+$, the pattern "
            "batch.projects.locations.jobs.create states for parent",
        ),
        (
            with_changes(BATCH, {"params": {"jobId": "r${nope}"}}),
            "target.params",
            f"params.jobId: unknown placeholder '${{nope}}' {RUNS_ANYWHERE}",
        ),
        (
            with_changes(BATCH, {"params": {"jobId": ["r${nope}"]}}),
            "target.params",
            f"params.jobId[0]: unknown placeholder '${{nope}}' {RUNS_ANYWHERE}",
        ),
        (
            {**BATCH, "body": {"taskGroups": [{"taskSpec": {"runnables": [{"script": {"text": "${nope}"}}]}}]}},
            "target.body",
            f"body.taskGroups[0].taskSpec.runnables[0].script.text: unknown placeholder '${{nope}}' {RUNS_ANYWHERE}",
        ),
        (
            {**BATCH, "running": {"field": "status.phase", "values": ["RUNNING"]}},
            "target",
            "running.field: Job (the answer of batch.projects.locations.jobs.get) has no field 'status.phase'",
        ),
        (
            {**BATCH, "running": {"field": "status.state", "values": ["STARTED"]}},
            "target",
            f"running.values: 'STARTED' is not a value of status.state (it takes: {BATCH_STATES})",
        ),
        (
            {**SPARK, "running": {"field": "state", "values": ["RUNNING"]}},
            "target",
            "running: reads the state with the reconcile method; give reconcile {method, params} too",
        ),
        (
            COMPUTE_POLICIES,
            "target",
            "running.field: the answer (the answer of compute.backendServices.getEffectiveSecurityPolicies) has no "
            "field 'status'",
        ),
    ],
)
def test_a_refusal_names_the_field_the_method_and_what_the_document_allows(target, field, message) -> None:
    assert error_of(target) == f"routes file r.yaml: route 'jobs': field '{field}': {message}"


def test_params_are_held_to_their_declared_type_repetition_and_values() -> None:
    from runonce.targets.google_api import param_problem

    run = discovery.load("run.v2").method("projects.locations.jobs.create")
    locations = discovery.load("batch.v1").method("projects.locations.list")
    jobs = discovery.load("bigquery.v2").method("jobs.list")
    assert run is not None and locations is not None and jobs is not None
    assert param_problem(run, "validateOnly", False) is None
    assert param_problem(run, "validateOnly", "false") is None
    assert param_problem(run, "validateOnly", {"a": 1}) == "validateOnly: expected a boolean, got dict"
    assert param_problem(locations, "extraLocationTypes", ["a", "b"]) is None
    assert param_problem(jobs, "stateFilter", ["done", "running"]) is None
    assert (
        param_problem(jobs, "stateFilter", ["done", "later"])
        == "stateFilter='later': not one of done, pending, running"
    )
    untyped = discovery.ApiMethod("x.things.list", "GET", "v1/things", {"tag": {"location": "query"}}, None, None)
    assert param_problem(untyped, "tag", "a") is None
    assert param_problem(untyped, "tag", {"a": 1}) == "tag: expected a string, got dict"


def test_params_go_on_the_wire_as_the_api_reads_them() -> None:
    from runonce.targets.engine import build_path

    batch_doc = discovery.load("batch.v1")
    locations = batch_doc.method("projects.locations.list")
    assert locations is not None
    assert build_path(
        batch_doc, locations, {"name": "projects/p", "extraLocationTypes": ["a", "b"], "pageSize": 5, "filter": False}
    ) == ("v1/projects/p/locations", {"extraLocationTypes": ["a", "b"], "pageSize": "5", "filter": "false"})
    bigquery = discovery.load("bigquery.v2")
    get = bigquery.method("jobs.get")
    assert get is not None  # a reserved expansion keeps ":" and "@" as they are
    assert build_path(bigquery, get, {"projectId": "p", "jobId": "a:b@c"})[0] == "bigquery/v2/projects/p/jobs/a:b@c"


def test_every_placeholder_of_a_string_is_checked() -> None:
    assert placeholder_problem("${run_id}-${nope}") == f"unknown placeholder '${{nope}}' {RUNS_ANYWHERE}"
    assert placeholder_problem("${run_uuid}-${schedule_time}-${run_id:16}") is None


@pytest.mark.parametrize(
    "target",
    [
        {  # a client-chosen id at the top of the body
            "type": "google_api",
            "api": "aiplatform.v1",
            "method": "projects.locations.deploymentResourcePools.create",
            "params": {"parent": "projects/p/locations/us-central1"},
            "body": {
                "deploymentResourcePoolId": "p${run_id:62}",
                "deploymentResourcePool": {"dedicatedResources": {"machineSpec": {}, "minReplicaCount": 1}},
            },
        },
        {  # ${schedule_time} is checked as a timestamp, as the runs fill it
            "type": "google_api",
            "api": "bigquery.v2",
            "method": "jobs.insert",
            "params": {"projectId": "p"},
            "body": {
                "jobReference": {"jobId": "copy_${run_id}"},
                "configuration": {
                    "copy": {
                        "sourceTable": {"projectId": "p", "datasetId": "d", "tableId": "t"},
                        "destinationTable": {"projectId": "p", "datasetId": "d", "tableId": "t_${run_id:16}"},
                        "destinationExpirationTime": "${schedule_time}",
                    }
                },
            },
        },
    ],
)
def test_a_route_the_document_allows_is_accepted(target) -> None:
    parse_routes(json.dumps({"routes": {"r": {"target": target}}}), "t")


async def test_the_locational_endpoint_is_found_past_params_that_are_not_strings(http, metadata) -> None:
    pipeline = {
        "type": "google_api",
        "api": "aiplatform.v1",
        "method": "projects.locations.pipelineJobs.create",
        "params": {"pipelineJobId": "p${run_id:62}", "parent": "projects/p/locations/europe-west4"},
        "reconcile": {
            "method": "projects.locations.pipelineJobs.get",
            "params": {"name": "projects/p/locations/europe-west4/pipelineJobs/p${run_id:62}"},
        },
    }
    target = target_for(pipeline, None, http, metadata)  # type: ignore[arg-type]
    assert target._base == "https://europe-west4-aiplatform.googleapis.com"
    assert _location({"pageSize": 5, "parent": "projects/p/locations/europe-west4"}) == "europe-west4"


class Recorder:
    """An httpx transport answering from a table (method -> response), keeping each request."""

    def __init__(self, **answers: httpx.Response | Exception) -> None:
        self.answers = answers
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers[request.method]
        if isinstance(answer, Exception):
            raise answer
        return answer


async def dispatched(target: dict[str, Any], metadata, recorder: Recorder, request: DispatchRequest) -> str:
    async with httpx.AsyncClient(transport=httpx.MockTransport(recorder)) as client:
        return await target_for(target, "http://google.test", client, metadata).dispatch(request)


@pytest.mark.parametrize("answer", [{}, {"name": ""}, {"name": 5}, {"name": None}])
async def test_an_answer_without_a_name_is_recorded_as_the_call(metadata, answer) -> None:
    request = new_request()
    recorder = Recorder(POST=httpx.Response(200, json=answer))
    resource = await dispatched(with_changes(BATCH, {"reconcile": None, "running": None}), metadata, recorder, request)
    assert resource == f"v1/{PARENT}/jobs?jobId=r{request.run_id[:62]}"


async def test_the_call_carries_the_run_in_its_params_and_body(metadata) -> None:
    request = new_request()
    target = with_changes(
        BATCH,
        {
            "params": {"requestId": "${run_uuid}"},
            "body": {"taskGroups": GROUPS, "labels": {"run": "${run_id:63}", "time": "t${run_id:16}"}},
        },
    )
    recorder = Recorder(POST=httpx.Response(200, json={"name": job_of(request)}))
    assert await dispatched(target, metadata, recorder, request) == f"v1/{job_of(request)}"
    [sent] = recorder.requests
    assert dict(sent.url.params) == {"jobId": f"r{request.run_id[:62]}", "requestId": run_uuid(request.run_id)}
    assert json.loads(sent.content)["labels"] == {"run": request.run_id[:63], "time": f"t{request.run_id[:16]}"}


async def test_a_method_without_a_request_body_is_sent_without_one(metadata) -> None:
    target = {
        "type": "google_api",
        "api": "batch.v1",
        "method": "projects.locations.jobs.delete",
        "params": {"name": JOB_NAME, "requestId": "${run_uuid}"},
    }
    recorder = Recorder(DELETE=httpx.Response(200, json={"name": "operations/o"}))
    assert await dispatched(target, metadata, recorder, new_request()) == "operations/o"
    [sent] = recorder.requests
    assert sent.content == b""


def test_the_reconcile_call_is_filled_from_the_run_and_its_schedule_time(http, metadata) -> None:
    target = {
        **BIGQUERY_QUERY_JOB,
        "body": {"jobReference": {"jobId": "r${run_id:40}"}, "configuration": {"query": {"query": "SELECT 1"}}},
        "reconcile": {
            "method": "jobs.get",
            "params": {"projectId": "p", "jobId": "r${run_id:40}", "location": "l-${schedule_time}"},
        },
    }
    request = new_request()
    found = target_for(target, "http://google.test", http, metadata).lookup_url(request)
    assert found == f"bigquery/v2/projects/p/jobs/r{request.run_id[:40]}?location=l-2026-10-16T03%3A00%3A00Z"


@pytest.mark.parametrize(
    ("answers", "outcome", "message"),
    [
        (
            {"POST": httpx.Response(200, text="<html>")},
            TargetOutcomeUnknown,
            "call batch.projects.locations.jobs.create: HTTP 200 with a body that is not JSON",
        ),
        (
            {"POST": httpx.ConnectError("refused")},
            TargetFailed,
            "call batch.projects.locations.jobs.create: could not connect, nothing was sent",
        ),
        (
            {
                "POST": httpx.Response(409, json={"error": {"status": "ALREADY_EXISTS", "message": "taken"}}),
                "GET": httpx.Response(403, json={"error": {"status": "PERMISSION_DENIED", "message": "no"}}),
            },
            TargetOutcomeUnknown,
            "cannot tell whether this run already started: call batch.projects.locations.jobs.create: it already "
            "exists; read it: HTTP 403 PERMISSION_DENIED: no",
        ),
        (
            {
                "POST": httpx.Response(409, json={"error": {"status": "ALREADY_EXISTS", "message": "taken"}}),
                "GET": httpx.ConnectError("refused"),
            },
            TargetOutcomeUnknown,
            "cannot tell whether this run already started: call batch.projects.locations.jobs.create: it already "
            "exists; read it: could not connect, nothing was sent",
        ),
    ],
)
async def test_each_failure_of_a_call_names_what_was_being_done(metadata, answers, outcome, message) -> None:
    with pytest.raises(outcome) as caught:
        await dispatched(BATCH, metadata, Recorder(**answers), new_request())
    assert str(caught.value).startswith(message), caught.value


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (httpx.Response(403, json={"error": {"status": "PERMISSION_DENIED", "message": "no"}}), "HTTP 403"),
        (httpx.ConnectError("refused"), "could not connect, nothing was sent"),
    ],
)
async def test_a_reconcile_that_cannot_read_names_the_lookup(metadata, answer, said) -> None:
    request = new_request()
    async with httpx.AsyncClient(transport=httpx.MockTransport(Recorder(GET=answer))) as client:
        target = target_for(BATCH, "http://google.test", client, metadata)
        with pytest.raises(TargetOutcomeUnknown) as caught:
            await target.reconcile(request)
    expected = f"cannot tell whether this run already started: look up the run's resource: v1/{job_of(request)}: "
    assert str(caught.value).startswith(expected + said), caught.value


# --- the id rules the methods' documents state --------------------------------------------------------

ID_CASES: list[tuple[str, str, str, str, str | None]] = [
    # (api, method, handle's path, value the run fills, what the refusal says; None: the API takes it)
    ("run.v2", "projects.locations.services.create", "params.serviceId", "s" + "0" * 48, None),
    ("run.v2", "projects.locations.services.create", "params.serviceId", "s" + "0" * 49, "1-49 characters"),
    ("run.v2", "projects.locations.services.create", "params.serviceId", "s-", "not ending with -"),
    ("run.v2", "projects.locations.services.create", "params.serviceId", "0s", "starting with a letter"),
    ("run.v2", "projects.locations.workerPools.create", "params.workerPoolId", "w" * 50, "1-49 characters"),
    ("run.v2", "projects.locations.instances.create", "params.instanceId", "i" * 50, "1-49 characters"),
    ("run.v2", "projects.locations.jobs.create", "params.jobId", "j" * 63, None),  # its document states no rule
    ("dataproc.v1", "projects.regions.clusters.nodeGroups.create", "params.nodeGroupId", "Ng_1", None),
    ("dataproc.v1", "projects.regions.clusters.nodeGroups.create", "params.nodeGroupId", "n" * 33, None),
    ("dataproc.v1", "projects.regions.clusters.nodeGroups.create", "params.nodeGroupId", "n" * 34, "3-33 characters"),
    ("dataproc.v1", "projects.regions.clusters.nodeGroups.create", "params.nodeGroupId", "ng", "3-33 characters"),
    ("dataproc.v1", "projects.regions.clusters.nodeGroups.create", "params.nodeGroupId", "_ng", "not starting or"),
    ("dataproc.v1", "projects.regions.clusters.nodeGroups.create", "params.nodeGroupId", "ng-", "ending with - or _"),
    ("dataproc.v1", "projects.locations.sessions.create", "params.sessionId", "0abc", None),
    ("dataproc.v1", "projects.locations.sessions.create", "params.sessionId", "abc", "4-63 characters of a-z 0-9 -"),
    ("aiplatform.v1", "projects.locations.featurestores.create", "params.featurestoreId", "f_" + "0" * 58, None),
    ("aiplatform.v1", "projects.locations.featurestores.create", "params.featurestoreId", "f" * 61, "1-60 characters"),
    ("aiplatform.v1", "projects.locations.featurestores.create", "params.featurestoreId", "f-1", "a-z 0-9 _,"),
    ("aiplatform.v1", "projects.locations.featurestores.create", "params.featurestoreId", "1f", "not starting with a"),
    ("aiplatform.v1", "projects.locations.featurestores.entityTypes.create", "params.entityTypeId", "e-1", "a-z 0-9 _"),
    ("aiplatform.v1", "projects.locations.featureGroups.create", "params.featureGroupId", "g" * 128, None),
    ("aiplatform.v1", "projects.locations.featureGroups.create", "params.featureGroupId", "g" * 129, "1-128"),
    ("aiplatform.v1", "projects.locations.featureGroups.features.create", "params.featureId", "F", "a-z 0-9 _"),
    ("aiplatform.v1", "projects.locations.endpoints.create", "params.endpointId", "123456789", None),
    ("aiplatform.v1", "projects.locations.endpoints.create", "params.endpointId", "e-1", None),
    ("aiplatform.v1", "projects.locations.endpoints.create", "params.endpointId", "0123", "no leading zero"),
    ("aiplatform.v1", "projects.locations.endpoints.create", "params.endpointId", "1234567890", "1-9 digits"),
    ("aiplatform.v1", "projects.locations.metadataStores.create", "params.metadataStoreId", "abc", "4-128"),
    ("aiplatform.v1", "projects.locations.metadataStores.artifacts.create", "params.artifactId", "0" * 128, None),
    (
        "aiplatform.v1",
        "projects.locations.tensorboards.experiments.create",
        "params.tensorboardExperimentId",
        "E",
        "1-128",
    ),
    ("aiplatform.v1", "projects.locations.reasoningEngines.sessions.create", "params.sessionId", "0s", None),
    (
        "aiplatform.v1",
        "projects.locations.reasoningEngines.sessions.create",
        "params.sessionId",
        "s-",
        "ending with a letter or digit",
    ),
    ("aiplatform.v1", "projects.locations.pipelineJobs.create", "params.pipelineJobId", "p" * 128, "1-127 characters"),
    ("bigquery.v2", "datasets.insert", "body.datasetReference.datasetId", "d_" + "0" * 32, None),
    ("bigquery.v2", "datasets.insert", "body.datasetReference.datasetId", "D_" + "0" * 1022, None),
    ("bigquery.v2", "datasets.insert", "body.datasetReference.datasetId", "d-0", "1-1024 characters of a-z A-Z 0-9 _"),
    ("bigquery.v2", "datasets.insert", "body.datasetReference.datasetId", "d" * 1025, "1-1024 characters"),
    ("bigquery.v2", "routines.insert", "body.routineReference.routineId", "r_1", None),
    ("bigquery.v2", "routines.insert", "body.routineReference.routineId", "r-1", "1-256 characters of a-z A-Z 0-9 _"),
    ("bigquery.v2", "routines.insert", "body.routineReference.routineId", "r" * 257, "1-256 characters"),
    ("bigquery.v2", "tables.insert", "body.tableReference.tableId", "t-1 Tabelle_ü", None),
    ("bigquery.v2", "tables.insert", "body.tableReference.tableId", "t.1", "(Unicode L, M, N, Pc, Pd, Zs)"),
    ("bigquery.v2", "tables.insert", "body.tableReference.tableId", "t\n", "letters, marks, numbers"),
    ("bigquery.v2", "jobs.query", "body.requestId", "00000000-0000-4000-8000-000000000000", None),
    ("bigquery.v2", "jobs.query", "body.requestId", "0" * 37, "1-36 printable ASCII characters"),
    ("bigquery.v2", "jobs.query", "body.requestId", "00000000-0000-4000-8000-00000000000\n", "printable ASCII"),
    ("bigquery.v2", "jobs.query", "body.requestId", "é", "ASCII"),
    ("bigquery.v2", "jobs.insert", "body.jobReference.jobId", "q-0_A", None),
    ("pubsub.v1", "projects.schemas.create", "params.schemaId", "Schema.v1~x", None),
    ("pubsub.v1", "projects.schemas.create", "params.schemaId", "goog-s", "not with 'goog'"),
    ("cloudbuild.v1", "projects.locations.bitbucketServerConfigs.create", "params.bitbucketServerConfigId", "B1", None),
    (
        "cloudbuild.v1",
        "projects.locations.bitbucketServerConfigs.create",
        "params.bitbucketServerConfigId",
        "b-",
        "ending",
    ),
    ("cloudbuild.v1", "projects.githubEnterpriseConfigs.create", "params.gheConfigId", "g" * 65, "1-64 characters"),
    ("cloudbuild.v1", "projects.locations.workerPools.create", "params.workerPoolId", "0pool", None),
    ("cloudbuild.v1", "projects.locations.workerPools.create", "params.workerPoolId", "Pool", "a-z 0-9 -"),
    ("cloudtasks.v2", "projects.locations.queues.tasks.batchCreate", "body.requestId", "any text at all", None),
]


@pytest.mark.parametrize(("api", "method", "path", "value", "says"), ID_CASES)
def test_an_id_is_held_to_the_rule_its_methods_document_states(api, method, path, value, says) -> None:
    handle = next(handle for handle in handles_by_api()[api][method] if handle.path == path)
    problem = id_problem(api, handle, value)
    if says is None:
        assert problem is None, problem
    else:
        assert problem is not None and problem.startswith(f"{path}: {value!r} is not an id {api} takes: "), problem
        assert says in problem and "\n" not in problem.replace(repr(value), ""), problem


def test_every_id_rule_is_for_a_field_the_api_dedupes_on() -> None:
    """A rule keyed by a field no method of its API dedupes on would never apply (a misspelt key)."""
    fields = {(api, h.field) for api, methods in handles_by_api().items() for hs in methods.values() for h in hs}
    assert set(ID_RULES) <= fields, set(ID_RULES) - fields


@pytest.mark.parametrize(
    ("api", "method", "params", "body", "field", "says"),
    [
        (
            "bigquery.v2",
            "datasets.insert",
            {"projectId": "my-project"},
            {"datasetReference": {"projectId": "my-project", "datasetId": "d_${run_id:32}"}},
            None,
            None,
        ),
        (
            "bigquery.v2",
            "datasets.insert",
            {"projectId": "my-project"},
            {"datasetReference": {"projectId": "my-project", "datasetId": "d-${run_id:32}"}},
            "body.datasetReference.datasetId",
            "1-1024 characters of a-z A-Z 0-9 _",
        ),
        (
            "run.v2",
            "projects.locations.services.create",
            {"parent": PARENT, "serviceId": "s${run_id:62}"},
            {"template": {"containers": [{"image": "us-docker.pkg.dev/p/r/i:1"}]}},
            "params.serviceId",
            "1-49 characters of a-z 0-9 -",
        ),
        (  # an id is held to its rule wherever it stands, not only where the run fills it
            "bigquery.v2",
            "jobs.insert",
            {"projectId": "my-project"},
            {
                "jobReference": {"jobId": "j_${run_id}"},
                "configuration": {
                    "query": {"query": "SELECT 1", "defaultDataset": {"projectId": "p", "datasetId": "my-analytics"}}
                },
            },
            "body.configuration.query.defaultDataset.datasetId",
            "'my-analytics' is not an id bigquery.v2 takes: 1-1024 characters of a-z A-Z 0-9 _",
        ),
        (
            "bigquery.v2",
            "jobs.query",
            {"projectId": "my-project"},
            {"query": "SELECT 1", "useLegacySql": False, "requestId": "${run_id}"},
            "body.requestId",
            "1-36 printable ASCII characters",
        ),
    ],
)
def test_a_route_filling_an_id_is_held_to_the_apis_rule(api, method, params, body, field, says) -> None:
    target = {"type": "google_api", "api": api, "method": method, "params": params, "body": body}
    if field is None:
        assert parse_routes(json.dumps({"routes": {"r": {"target": target}}}), "t")
        return
    line = error_of(target)
    assert line.startswith("routes file r.yaml: route 'jobs': field 'target") and f"{field}: " in line, line
    assert says in line, line


@pytest.mark.parametrize(
    ("pattern", "read"),
    [
        ("^projects/[^/]+/databases/[^/]+/documents/.*$", "^projects/[^/]+/databases/[^/]+/documents(?:/.*)?$"),
        ("^operations/.*$", "^operations(?:/.*)?$"),
        ("^projects/[^/]+$", "^projects/[^/]+$"),
        ("^.*$", "^.*$"),
        ("^projects/[^/]+/.*", "^projects/[^/]+/.*"),  # not at the end: as written
    ],
)
def test_a_patterns_trailing_any_segments_takes_none_too(pattern: str, read: str) -> None:
    assert template_pattern(pattern) == read


@pytest.mark.parametrize(
    ("http_method", "path", "params", "collection"),
    [
        (
            "POST",
            "v2/{+parent}/tasks",
            {"parent": "projects/p/locations/l/queues/q"},
            "projects/p/locations/l/queues/q/tasks",
        ),
        ("POST", "{+parent}/jobs", {"parent": "projects/p"}, "projects/p/jobs"),  # the version in the service path
        ("POST", "v1/transferJobs", {}, "transferJobs"),
        ("POST", "v1beta2/transferJobs", {}, "transferJobs"),
        ("POST", "v1/things:batchCreate", {}, None),
        ("POST", "v1/projects/things", {}, None),
        ("PUT", "v1/transferJobs", {}, None),
        ("POST", "v2/{+parent}/tasks", {"parent": 7}, None),
        ("POST", "v1/projects/{project}/zones/{zone}/things", {"project": "p", "zone": "z"}, "p/zones/z/things"),
    ],
)
def test_the_collection_a_create_posts_to(http_method: str, path: str, params: dict, collection: str | None) -> None:
    in_path = {name: {"location": "path"} for name in ("parent", "project", "zone") if f"{name}}}" in path}
    method = discovery.ApiMethod("demo.things.create", http_method, path, in_path, None, None)
    assert _collection_name(method, params) == collection
