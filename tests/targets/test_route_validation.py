"""Start-up is where a route is judged: each class of bad Google route is refused in one line naming
the route, the field and what the API allows, and `runonce serve` and `runonce lint` say the same
line (both call the routes loader). Correct routes of every target and every example still load.
"""

from __future__ import annotations

import copy
import re
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from runonce.cli import main
from runonce.routes import parse_routes
from runonce.settings import ConfigError, load_settings
from runonce.targets.google_api_discovery import ApiDocument, described_id_rule, load, reduce_document
from runonce.targets.handles import describe, handles_by_api, handles_of, handles_table
from tests.support.procs import REPO

PARENT = "projects/my-project/locations/us-central1"
RUNNABLES = [{"container": {"imageUri": "us-docker.pkg.dev/my-project/jobs/etl:1"}}]
BATCH: dict[str, Any] = {
    "type": "google_api",
    "api": "batch.v1",
    "method": "projects.locations.jobs.create",
    "params": {"parent": PARENT, "jobId": "r${run_id:62}", "requestId": "${run_uuid}"},
    "body": {"taskGroups": [{"taskCount": "2", "taskSpec": {"runnables": RUNNABLES}}]},
    "reconcile": {"method": "projects.locations.jobs.get", "params": {"name": f"{PARENT}/jobs/r${{run_id:62}}"}},
}
DATAPROC: dict[str, Any] = {
    "type": "google_api",
    "api": "dataproc.v1",
    "method": "projects.regions.clusters.create",
    "params": {"projectId": "my-project", "region": "us-central1", "requestId": "${run_uuid}"},
    "body": {"clusterName": "c-${run_id:16}", "projectId": "my-project", "config": {}},
}
DATAPROC_JOB: dict[str, Any] = {
    "type": "google_api",
    "api": "dataproc.v1",
    "method": "projects.regions.jobs.submit",
    "params": {"projectId": "my-project", "region": "us-central1"},
    "body": {
        "requestId": "${run_uuid}",
        "job": {
            "placement": {"clusterName": "etl"},
            "reference": {"jobId": "etl-${run_id}"},
            "pysparkJob": {"mainPythonFileUri": "gs://b/etl.py"},
        },
    },
    "reconcile": {
        "method": "projects.regions.jobs.get",
        "params": {"projectId": "my-project", "region": "us-central1", "jobId": "etl-${run_id}"},
    },
}
BIGQUERY: dict[str, Any] = {
    "type": "google_api",
    "api": "bigquery.v2",
    "method": "jobs.insert",
    "params": {"projectId": "my-project"},
    "body": {"jobReference": {"jobId": "q_${run_id}"}, "configuration": {"query": {"query": "SELECT 1"}}},
}
TOPIC: dict[str, Any] = {
    "type": "google_api",
    "api": "pubsub.v1",
    "method": "projects.topics.create",
    "params": {"name": "projects/my-project/topics/day-${run_id:32}"},
}


def changed(target: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`target` with the field at the dotted `path` (`body.taskGroups.0.taskCount`) set to `value`,
    or removed when `value` is `...`."""
    result = copy.deepcopy(target)
    *parents, last = path.split(".")
    node: Any = result
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if value is ...:
        node.pop(last, None)
    else:
        node[int(last) if isinstance(node, list) else last] = value
    return result


def copy_expiring(when: str) -> dict[str, Any]:
    """A BigQuery copy job's route whose destination table expires at `when`."""
    tables = {"sourceTable": {"projectId": "p", "datasetId": "d", "tableId": "t"}}
    tables["destinationTable"] = {"projectId": "p", "datasetId": "d", "tableId": "u"}
    return changed(BIGQUERY, "body.configuration", {"copy": {**tables, "destinationExpirationTime": when}})


REGION = "us-central1"
JOB_ID = "r${run_id:62}"
JOB = f"{PARENT}/jobs/{JOB_ID}"
TASK: dict[str, Any] = {
    "type": "google_api",
    "api": "cloudtasks.v2",
    "method": "projects.locations.queues.tasks.create",
    "params": {"parent": f"{PARENT}/queues/q"},
    "body": {"task": {"name": f"{PARENT}/queues/q/tasks/t-${{run_id}}", "httpRequest": {"url": "https://x.test/"}}},
}
TABLE = {"projectId": "my-project", "datasetId": "d", "tableId": "t"}
WRONG_READ = "reconcile.params: the read must find the resource the run's id names"


def read_by(method: str, name: str) -> dict[str, Any]:
    """BATCH with its reconcile read replaced by `method` of `name`."""
    return changed(changed(BATCH, "reconcile.method", method), "reconcile.params.name", name)


def routes_yaml(target: dict[str, Any]) -> str:
    return yaml.safe_dump({"routes": {"nightly": {"target": target}}}, allow_unicode=True)


CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    # class: (target, field named, what the line says the API allows)
    "unknown field": (
        changed(BATCH, "body.logsPolicy", {"destinaton": "CLOUD_LOGGING"}),
        "target.body",
        "LogsPolicy has no field 'destinaton' (it has: cloudLoggingOption, destination, logsPath; did you mean",
    ),
    "unknown nested field in a list": (
        changed(BATCH, "body.taskGroups.0.taskSpec.runnables", [{"contaner": {}}]),
        "target.body",
        "body.taskGroups[0].taskSpec.runnables[0]: Runnable has no field 'contaner'",
    ),
    "a parent whose project no project ID can be": (
        changed(BATCH, "params.parent", "projects/My_Project/locations/us-central1"),
        "target.params",
        "params.parent='projects/My_Project/locations/us-central1': the project 'My_Project' is not a project ID",
    ),
    "a parent whose location no location can be": (
        changed(BATCH, "params.parent", "projects/my-project/locations/US Central"),
        "target.params",
        "the location 'US Central' is not a location (a-z 0-9 -, e.g. us-central1, or global)",
    ),
    "int64 not a number": (
        changed(BATCH, "body.taskGroups.0.taskCount", "many"),
        "target.body",
        'body.taskGroups[0].taskCount: expected an int64 (an integer, or a string of digits), got str "many"',
    ),
    "int64 beyond its range": (
        changed(BATCH, "body.taskGroups.0.taskCount", "9223372036854775808"),
        "target.body",
        "is outside the int64 range",
    ),
    "int32 beyond its range": (
        changed(BATCH, "body.taskGroups.0.taskSpec.maxRetryCount", 2**31),
        "target.body",
        "maxRetryCount: 2147483648 is outside the int32 range -2147483648 to 2147483647",
    ),
    "int32 as a word": (
        changed(BATCH, "body.taskGroups.0.parallelism", "four"),
        "target.body",
        'body.taskGroups[0].parallelism: expected an int64 (an integer, or a string of digits), got str "four"',
    ),
    "enum": (
        changed(BATCH, "body.logsPolicy", {"destination": "STDOUT"}),
        "target.body",
        "'STDOUT' is not one of DESTINATION_UNSPECIFIED, CLOUD_LOGGING, PATH",
    ),
    "duration": (
        changed(BATCH, "body.taskGroups.0.taskSpec.maxRunDuration", "1h"),
        "target.body",
        "maxRunDuration: '1h' is not a duration like '3.5s'",
    ),
    "duration with a newline": (
        changed(BATCH, "body.taskGroups.0.taskSpec.maxRunDuration", "60s\n"),
        "target.body",
        "is not a duration like '3.5s'",
    ),
    "boolean as text": (
        changed(BATCH, "body.taskGroups.0.requireHostsFile", "yes"),
        "target.body",
        'requireHostsFile: expected a boolean, got str "yes"',
    ),
    "timestamp that is no date": (
        copy_expiring("2026-02-30T00:00:00Z"),
        "target.body",
        "'2026-02-30T00:00:00Z' is not an RFC 3339 timestamp",
    ),
    "timestamp with a lower-case t and z, which RFC 3339 allows and protobuf's parser refuses": (
        copy_expiring("2026-03-01t00:00:00z"),
        "target.body",
        "'2026-03-01t00:00:00z': write its T and Z in upper case (2026-01-31T12:00:00Z), as the API reads it",
    ),
    "a leap second, which RFC 3339 allows and a Timestamp does not": (
        copy_expiring("2026-12-31T23:59:60Z"),
        "target.body",
        "'2026-12-31T23:59:60Z': a leap second (:60), which a Google Timestamp does not hold; write :59",
    ),
    "bytes that are not base64": (
        changed(TOPIC, "body", {"schemaSettings": {"schema": "projects/my-project/schemas/s"}, "kmsKeyName": "k"})
        | {"api": "pubsub.v1", "method": "projects.topics.publish", "params": {"topic": "projects/p/topics/t"}}
        | {"body": {"messages": [{"data": "not base64!"}]}},
        "target.body",
        "is not base64",
    ),
    "required field missing": (
        changed(BATCH, "body.taskGroups.0.taskSpec", {"maxRetryCount": 1}),
        "target.body",
        "body.taskGroups[0].taskSpec.runnables: required by TaskSpec",
    ),
    "required field missing with no body": (
        changed(BATCH, "body", ...),
        "target",
        "body.taskGroups: required by Job",
    ),
    "exclusive fields": (
        changed(
            DATAPROC,
            "body.config",
            {"gceClusterConfig": {"zoneUri": "us-central1-a", "autoZoneExcludeZoneUris": ["us-central1-b"]}},
        ),
        "target.body",
        "autoZoneExcludeZoneUris and zoneUri are both set; GceClusterConfig takes only one of",
    ),
    "null where an object is needed": (
        changed(BATCH, "body.taskGroups.0.taskSpec.environment", None),
        "target.body",
        "body.taskGroups[0].taskSpec.environment: is empty (null); an object is needed here",
    ),
    "null where a list is needed": (
        changed(BATCH, "body.taskGroups.0.taskSpec.runnables", None),
        "target.body",
        "runnables: is empty (null); a list is needed here",
    ),
    "null in a list": (
        changed(BATCH, "body.taskGroups.0.taskSpec.runnables", [None]),
        "target.body",
        "runnables[0]: is empty (null)",
    ),
    "output-only field": (
        changed(BATCH, "body.uid", "x"),
        "target.body",
        "body.uid: output only in Job",
    ),
    "label value with a newline": (
        changed(BATCH, "body.labels", {"team": "data\n"}),
        "target.body",
        "label 'team': value 'data\\n' must be at most 63 characters of a-z 0-9 _ -",
    ),
    "label key in upper case": (
        changed(BATCH, "body.labels", {"Team": "data"}),
        "target.body",
        "label key 'Team': 1-63 characters of a-z 0-9 _ -, starting with a letter",
    ),
    "label value too long": (
        changed(BATCH, "body.labels", {"run": "${run_id}"}),
        "target.body",
        "label 'run': value '0000000000000000000000000000000000000000000000000000000000000000' must be at most 63",
    ),
    "key that is a number": (
        changed(BATCH, "body.labels", {2024: "q4"}),
        "target.body.labels",
        "the key 2024 is a number, not text",
    ),
    "key that is true": (
        changed(BATCH, "params", {True: "x"}),
        "target.params",
        "the key true is true or false, not text",
    ),
    "path parameter with a newline": (
        changed(BATCH, "params.parent", f"{PARENT}\n"),
        "target.params",
        "params.parent='projects/my-project/locations/us-central1\\n': holds a control character",
    ),
    "a map key with a newline (an env var's name from a YAML | block)": (
        changed(BATCH, "body.taskGroups.0.taskSpec.environment", {"variables": {"QUALITY\n": "high"}}),
        "target.body",
        "body.taskGroups[0].taskSpec.environment.variables: the key 'QUALITY\\n' holds a control character",
    ),
    "path parameter outside its pattern": (
        changed(BATCH, "params.parent", "projects/my-project"),
        "target.params",
        "does not match ^projects/[^/]+/locations/[^/]+$, the pattern batch.projects.locations.jobs.create states",
    ),
    "id the API refuses (too long)": (
        changed(BATCH, "params.jobId", "${run_id}"),
        "target",
        "params.jobId: '0000000000000000000000000000000000000000000000000000000000000000' is not an id batch.v1 "
        "takes: 1-63 characters of a-z 0-9 -, starting with a letter",
    ),
    "id the API refuses (capitals)": (
        changed(changed(BATCH, "params.jobId", "Nightly-${run_id:32}"), "reconcile", ...),
        "target",
        "is not an id batch.v1 takes",
    ),
    "requestId that is no UUID": (
        changed(BATCH, "params.requestId", "${run_id}"),
        "target",
        "params.requestId: '0000000000000000000000000000000000000000000000000000000000000000' is not an id batch.v1 "
        "takes: a UUID other than the zero UUID",
    ),
    "topic name the API refuses": (
        changed(TOPIC, "params.name", "projects/my-project/topics/goog-${run_id}"),
        "target",
        "not with 'goog'",
    ),
    "a field ending in Id is no handle": (
        {
            "type": "google_api",
            "api": "bigquery.v2",
            "method": "tabledata.insertAll",
            "params": {"projectId": "p", "datasetId": "d", "tableId": "t"},
            "body": {"traceId": "${run_id}", "rows": [{"json": {"a": 1}}]},
        },
        "target",
        "no way to dedupe (body.traceId holds the run but bigquery.tabledata.insertAll does not dedupe on it): "
        "bigquery.tabledata.insertAll has no client-chosen id and no requestId",
    ),
    "a reconcile read of a name the server picks is no handle": (
        {
            "type": "google_api",
            "api": "workflowexecutions.v1",
            "method": "projects.locations.workflows.executions.create",
            "params": {"parent": f"{PARENT}/workflows/etl"},
            "body": {"argument": "{}"},
            "reconcile": {
                "method": "projects.locations.workflows.executions.get",
                "params": {"name": f"{PARENT}/workflows/etl/executions/${{run_id}}"},
            },
        },
        "target",
        "workflowexecutions.projects.locations.workflows.executions.create has no client-chosen id and no requestId",
    ),
    "a handle left unfilled": (
        changed(changed(changed(BATCH, "params.jobId", ...), "params.requestId", ...), "reconcile", ...),
        "target",
        "fill from the run what batch.projects.locations.jobs.create dedupes on: params.jobId (resource id), "
        "params.requestId (request id)",
    ),
    "a reconcile read not built from the run's id": (
        changed(BATCH, "reconcile.params.name", f"{PARENT}/jobs/x${{run_id:62}}"),
        "target",
        "reconcile.params: the read must find the resource the run's id names (its name built from the value of "
        "params.jobId (resource id))",
    ),
    "a client-chosen id that is the same for every run": (
        changed(changed(BATCH, "params.jobId", "nightly"), "reconcile", ...),
        "target",
        "params.jobId: 'nightly' does not tell runs apart, so batch.projects.locations.jobs.create would take every "
        "run after the first for a retry of it and start nothing",
    ),
    "a requestId that is the same for every run": (
        changed(BATCH, "params.requestId", "11111111-2222-4333-8444-555555555555"),
        "target",
        "params.requestId: '11111111-2222-4333-8444-555555555555' does not tell runs apart",
    ),
    "a handle holding too short a prefix of the run": (
        changed(BATCH, "params.requestId", "r-${run_id:8}"),
        "target",
        "params.requestId: 'r-${run_id:8}' does not tell runs apart",
    ),
    "the id of another resource the create makes": (
        {
            "type": "google_api",
            "api": "aiplatform.v1",
            "method": "projects.locations.trainingPipelines.create",
            "params": {"parent": PARENT},
            "body": {
                "displayName": "nightly",
                "trainingTaskDefinition": "gs://my-bucket/task.yaml",
                "trainingTaskInputs": {},
                "modelId": "m${run_id:62}",
            },
        },
        "target",
        "no way to dedupe (body.modelId holds the run but aiplatform.projects.locations.trainingPipelines.create "
        "does not dedupe on it)",
    ),
    **{
        f"a reconcile read of {what}": (read_by(method, name), "target", WRONG_READ)
        for what, method, name in [
            (
                "the id in another project",
                "projects.locations.jobs.get",
                f"projects/other/locations/{REGION}/jobs/{JOB_ID}",
            ),
            (
                "the id in another location",
                "projects.locations.jobs.get",
                f"projects/my-project/locations/eu/jobs/{JOB_ID}",
            ),
            (
                "a resource under the run's",
                "projects.locations.jobs.taskGroups.tasks.get",
                f"{JOB}/taskGroups/g/tasks/0",
            ),
            ("another collection", "projects.locations.operations.get", f"{PARENT}/operations/{JOB_ID}"),
            ("a location named like the run", "projects.locations.get", f"projects/my-project/locations/{JOB_ID}"),
        ]
    },
    **{
        f"a task named {where}": (
            changed(TASK, "body.task.name", name),
            "target",
            f"body.task.name: '{name.replace('${run_id}', '0' * 64)}' is not a name in {PARENT}/queues/q/tasks",
        )
        for where, name in [("in another queue", f"{PARENT}/queues/other/tasks/t-${{run_id}}"), ("bare", "t-${run_id}")]
    },
    "two fields the document says cannot be set at the same time": (
        changed(
            BIGQUERY,
            "body.configuration",
            {
                "load": {
                    "sourceUris": ["gs://b/f.csv"],
                    "destinationTable": TABLE,
                    "nullMarker": "-",
                    "nullMarkers": ["-"],
                }
            },
        ),
        "target.body",
        "body.configuration.load: nullMarker and nullMarkers are both set; JobConfigurationLoad takes only one",
    ),
    "two fields of one oneof in the API's protos": (
        changed(
            BATCH,
            "body.taskGroups.0.taskSpec.runnables",
            [{"script": {"text": "a"}, "container": {"imageUri": "busybox"}}],
        ),
        "target.body",
        "runnables[0]: container and script are both set; Runnable takes only one of barrier, container, script",
    ),
    "a required oneof left unset": (
        changed(BATCH, "body.taskGroups.0.taskSpec.runnables", [{"displayName": "nothing to run"}]),
        "target.body",
        "runnables[0]: Runnable needs one of container, script, barrier (the API refuses it without)",
    ),
    "two fields one says it cannot be specified with": (
        changed(DATAPROC, "body.config", {"gceClusterConfig": {"networkUri": "default", "subnetworkUri": "sub"}}),
        "target.body",
        "body.config.gceClusterConfig: networkUri and subnetworkUri are both set; GceClusterConfig takes only one",
    ),
    "a duration past the bound its description states": (
        changed(DATAPROC, "body.config", {"lifecycleConfig": {"idleDeleteTtl": "60s"}}),
        "target.body",
        "body.config.lifecycleConfig.idleDeleteTtl: 60s is below 300s, the minimum its description states",
    ),
    "a fixed cluster name beside a run-filled requestId": (
        changed(DATAPROC, "body.clusterName", "nightly-cluster"),
        "target",
        "body.clusterName: 'nightly-cluster' does not tell runs apart",
    ),
    "a fixed Compute Engine name beside a run-filled requestId (a document from the google-api extra)": (
        {
            "type": "google_api",
            "api": "compute.v1",
            "method": "instances.insert",
            "params": {"project": "my-project", "zone": "us-central1-a", "requestId": "${run_uuid}"},
            "body": {"name": "nightly-vm", "machineType": "zones/us-central1-a/machineTypes/e2-small"},
        },
        "target",
        "body.name: 'nightly-vm' does not tell runs apart",
    ),
    "a fixed job id in a Dataproc job's reference": (
        changed(DATAPROC_JOB, "body.job.reference.jobId", "nightly"),
        "target",
        "body.job.reference.jobId: 'nightly' does not tell runs apart",
    ),
    "a cluster name longer than Dataproc takes": (
        changed(DATAPROC, "body.clusterName", "c" + "-${run_id:16}" * 4),
        "target",
        "is not an id dataproc.v1 takes: a lower-case letter, then up to 51 characters",
    ),
    "a '..' segment in a path parameter": (
        changed(BATCH, "params.parent", "projects/../locations/us-central1"),
        "target.params",
        "params.parent='projects/../locations/us-central1': an empty value or a '.' or '..' segment",
    ),
    "an empty segment in a path parameter": (
        changed(BATCH, "params.parent", "projects/my-project/locations/us-central1/"),
        "target.params",
        "an empty value or a '.' or '..' segment, or an empty one ('//', or '/' first or last)",
    ),
    "a '//' in a path parameter": (
        changed(BATCH, "params.parent", "projects//my-project/locations/us-central1"),
        "target.params",
        "an empty value or a '.' or '..' segment, or an empty one",
    ),
    "a query parameter that is no duration": (
        {
            "type": "google_api",
            "api": "dataproc.v1",
            "method": "projects.regions.clusters.patch",
            "params": {
                "projectId": "my-project",
                "region": "us-central1",
                "clusterName": "c",
                "updateMask": "config.worker_config.num_instances",
                "gracefulDecommissionTimeout": "forever",
                "requestId": "${run_uuid}",
            },
            "body": {"clusterName": "c", "projectId": "my-project", "config": {}},
        },
        "target.params",
        "gracefulDecommissionTimeout='forever': 'forever' is not a duration",
    ),
    "a dry run that creates nothing": (
        changed(BIGQUERY, "body.configuration.dryRun", True),
        "target",
        "body.configuration.dryRun: true makes the call check the request and create nothing",
    ),
    "a requestId ending in a newline": (
        changed(BIGQUERY | {"method": "jobs.query", "body": {"query": "SELECT 1"}}, "body.requestId", "${run_uuid}\n"),
        "target.body",
        "body.requestId: '00000000-0000-4000-8000-000000000000\\n' holds a control character",
    ),
    "an unquoted date where text is needed": (
        changed(BATCH, "body.taskGroups.0.taskSpec.runnables", [{"script": {"text": date(2026, 2, 1)}}]),
        "target.body",
        "expected a string, got the date 2026-02-01: quote it",
    ),
    "a body left empty (null)": (
        changed(BATCH, "body", None),
        "target.body",
        "body: is empty (null); batch.projects.locations.jobs.create takes a Job object",
    ),
    "a placeholder in a key": (
        changed(BATCH, "body.labels", {"${run_id}": "x"}),
        "target.body",
        "body.labels: the key '${run_id}' holds a placeholder; runonce fills them in values only",
    ),
    "a reconcile read with only a requestId": (
        changed(BATCH, "params.jobId", ...),
        "target",
        "fill params.jobId (resource id) from the run and read the resource it names",
    ),
}
BAD_ENDPOINTS = {
    "plaintext to another host": (
        "http://example.com",
        "http:// (plaintext) is only for a loopback address (a local fake), not 'example.com'",
    ),
    "another host": ("https://googleapis.com.evil.example", "host 'googleapis.com.evil.example' is not under"),
    "a look-alike host": ("https://evilgoogleapis.com", "host 'evilgoogleapis.com' is not under googleapis.com"),
    "path, query, fragment": ("https://batch.googleapis.com/evil/path?x=1#frag", "has a path ('/evil/path')"),
    "query": ("https://batch.googleapis.com?x=1", "has a query"),
    "fragment": ("http://127.0.0.1:8085#f", "has a fragment"),
    "userinfo": ("https://user:hunter2@batch.googleapis.com", "holds a user or password (before '@')"),
    "file scheme": ("file:///etc/passwd", "scheme file://: only https://"),
    "no scheme": ("batch.googleapis.com", "scheme missing"),
    "port out of range": ("https://batch.googleapis.com:99999", "has no valid port (1-65535)"),
    "port zero": ("http://127.0.0.1:0", "port 0 is not from 1 to 65535"),
    "plaintext to every interface": ("http://0.0.0.0:8085", "not '0.0.0.0'"),
    "a newline": ("http://127.0.0.1:8085\n", "holds a space, control character or backslash"),
    "a user hidden before a Google host": ("https://batch.googleapis.com:443@evil.example", "holds a user"),
    "a backslash": ("https://evil.example\\@batch.googleapis.com", "backslash"),
    "loopback by name only": ("http://127.0.0.1.nip.io:80", "not '127.0.0.1.nip.io'"),
    "plaintext to Google": ("http://batch.googleapis.com", "not 'batch.googleapis.com'"),
    "plaintext to another host written as IPv6": ("http://[::ffff:10.0.0.1]:80", "not '::ffff:10.0.0.1'"),
    "no host": ("https:///v1", "has no host"),
    "a port with no host": ("https://:443", "has no host"),
    "an empty port": ("https://batch.googleapis.com:", "has an empty port"),
    "a scheme in capitals that is not one": ("HTTPS:/batch.googleapis.com", "must start with https:// or http://"),
    "a port in other digits": ("https://batch.googleapis.com:\u0664\u0664\u0663", "has no valid port (1-65535)"),
    "a trailing dot": ("https://batch.googleapis.com.", "host 'batch.googleapis.com.' is not under"),
    "a host label that starts with a hyphen": ("https://-batch.googleapis.com", "is not under googleapis.com"),
}
CASES.update(
    {
        f"endpoint: {name}": (BATCH | {"endpoint": url}, "target.endpoint", says)
        for name, (url, says) in BAD_ENDPOINTS.items()
    }
)


GOOD_ENDPOINTS = [
    "https://batch.googleapis.com",
    "https://batch.googleapis.com/",
    "https://us-central1-batch.googleapis.com:443",
    "https://batch-myendpoint.p.googleapis.com",
    "https://batch.mtls.googleapis.com",
    "http://127.0.0.1:8085",
    "http://127.8.9.10:1",
    "http://[::1]:65535",
    "http://[::ffff:127.0.0.1]:8085",  # IPv4 loopback, written as IPv6
    "http://localhost:8085/",
    "HTTPS://Batch.GoogleAPIs.com",
]


def _refusal(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_routes(text, "routes file routes.yaml")
    return str(caught.value)


@pytest.mark.parametrize("case", CASES)
def test_each_class_of_bad_route_is_refused_in_one_line(case: str) -> None:
    target, field, allowed = CASES[case]
    line = _refusal(routes_yaml(target))
    assert "\n" not in line and "Traceback" not in line, line
    assert line.startswith(f"routes file routes.yaml: route 'nightly': field '{field}': "), line
    assert allowed in line, line
    assert "hunter2" not in line  # a password in an endpoint is never echoed


def _cli(args: list[str], routes: Path | None = None) -> Result:
    """`runonce ARGS`; `routes` is the configured RUNONCE_ROUTES_FILE (serve's), none for lint's files."""
    env = {"RUNONCE_AUTH": "none", "RUNONCE_STORE": "sqlite:///:memory:", "RUNONCE_ROUTES_FILE": None}
    if routes is not None:
        env["RUNONCE_ROUTES_FILE"] = str(routes)
    return CliRunner().invoke(main, args, env=env)


@pytest.mark.parametrize(
    "case",
    [
        "unknown field",
        "int64 not a number",
        "null where an object is needed",
        "key that is a number",
        "label value with a newline",
        "a field ending in Id is no handle",
        "endpoint: userinfo",
        "exclusive fields",
    ],
)
def test_serve_and_lint_say_the_same_line(case: str, tmp_path: Path) -> None:
    target, _field, allowed = CASES[case]
    routes = tmp_path / "routes.yaml"
    routes.write_text(routes_yaml(target), encoding="utf-8")
    expected = _refusal(routes.read_text(encoding="utf-8")).replace("routes.yaml", str(routes))

    served = _cli(["serve", "--port", "1"], routes)
    assert served.exit_code != 0 and not isinstance(served.exception, (KeyError, TypeError, ValueError))
    assert expected in served.output and "Traceback" not in served.output, served.output

    linted = _cli(["lint", str(routes)])
    assert linted.exit_code == 1, linted.output
    assert f"{routes}: -: error: {expected} [invalid_routes]" in linted.output, linted.output
    assert allowed in linted.output and "Traceback" not in linted.output


@pytest.mark.parametrize("name", BAD_ENDPOINTS)
def test_an_endpoint_setting_follows_the_same_rule(name: str) -> None:
    url, says = BAD_ENDPOINTS[name]
    with pytest.raises(ConfigError) as caught:
        load_settings(batch_endpoint=url)
    line = str(caught.value)
    assert line.startswith("bad settings: RUNONCE_BATCH_ENDPOINT: ") and says in line, line
    assert "\n" not in line and "hunter2" not in line


@pytest.mark.parametrize("url", GOOD_ENDPOINTS)
def test_google_hosts_and_local_fakes_are_endpoints(url: str) -> None:
    assert load_settings(batch_endpoint=url).batch_endpoint == url
    assert parse_routes(routes_yaml(BATCH | {"endpoint": url}), "routes file routes.yaml")


# --- the first-class Google targets: each is a preset whose call is checked like a google_api route --


def example_target(name: str) -> dict[str, Any]:
    """The target of the first route of examples/NAME.yaml: a correct route of that type."""
    routes = yaml.safe_load((REPO / "examples" / f"{name}.yaml").read_text(encoding="utf-8"))["routes"]
    return dict(next(iter(routes.values()))["target"])


PRESET_CASES: dict[str, tuple[str, str, Any, tuple[str, ...]]] = {
    # class: (example, field, value, words the line holds: the field and what the API allows)
    "dataflow: fewer workers than its range": (
        "dataflow_flex_template",
        "launch_parameter.environment.maxWorkers",
        -1,
        ("environment.maxWorkers", "below 1"),
    ),
    "batch: two instance policies where one is taken": (
        "batch_job",
        "job.allocationPolicy.instances",
        [{"policy": {"machineType": "e2-standard-4"}}, {"policy": {"machineType": "e2-standard-8"}}],
        ("allocationPolicy.instances", "the API takes at most 1 here"),
    ),
    "batch: more retries than its range": (
        "batch_job",
        "job.taskGroups.0.taskSpec.maxRetryCount",
        11,
        ("maxRetryCount", "above 10"),
    ),
    "dataproc: a ttl below the minimum": (
        "dataproc_batch",
        "batch.environmentConfig.executionConfig.ttl",
        "60s",
        ("executionConfig.ttl", "below 600s"),
    ),
    "vertex: a date among the parameter values": (
        "vertex_pipeline_job",
        "pipeline_job.runtimeConfig.parameterValues",
        {"ds": date(2026, 1, 31)},
        ("parameterValues.ds: a date has no JSON form", "quote it"),
    ),
    "vertex: .nan among the parameter values": (
        "vertex_pipeline_job",
        "pipeline_job.runtimeConfig.parameterValues",
        {"threshold": float("nan")},
        ("parameterValues.threshold: nan has no JSON form", "'NaN'"),
    ),
    "vertex: a key that is a number among the parameter values": (
        "vertex_pipeline_job",
        "pipeline_job.runtimeConfig.parameterValues",
        {"m": {2024: "q4"}},
        ("parameterValues.m", "the key 2024 is a number, not text"),
    ),
    "batch: int64 as a word": ("batch_job", "job.taskGroups.0.taskCount", "many", ("taskCount", "int64")),
    "batch: null environment": ("batch_job", "job.taskGroups.0.taskSpec.environment", None, ("environment", "null")),
    "batch: unknown field": ("batch_job", "job.logsPolicy", {"destinaton": "CLOUD_LOGGING"}, ("destinaton",)),
    "batch: label with a newline": ("batch_job", "job.labels", {"team": "media\n"}, ("team", "63 characters")),
    "batch: label key a number": ("batch_job", "job.labels", {2024: "q4"}, ("2024", "not text")),
    "dataflow: int32 as a word": (
        "dataflow_flex_template",
        "launch_parameter.environment.maxWorkers",
        "four",
        ("maxWorkers", "integer"),
    ),
    "dataflow: null environment": ("dataflow_flex_template", "launch_parameter.environment", None, ("null",)),
    "dataproc: label key in upper case": ("dataproc_batch", "batch.labels", {"Team": "data"}, ("Team",)),
    "dataproc: null map": ("dataproc_batch", "batch.runtimeConfig.properties", None, ("properties", "null")),
    "vertex: label value with a newline": ("vertex_pipeline_job", "pipeline_job.labels", {"team": "ml\n"}, ("team",)),
    # Rules the documents state in prose: "Mutually exclusive with worker_zone.", "Only one TaskGroup is
    # supported", "No more than 32 labels can be associated with a batch."
    "dataflow: two fields the document calls mutually exclusive": (
        "dataflow_flex_template",
        "launch_parameter.environment",
        {"workerRegion": "us-west1", "workerZone": "us-west1-a"},
        ("workerRegion and workerZone are both set", "takes only one of"),
    ),
    "batch: more task groups than the API supports": (
        "batch_job",
        "job.taskGroups",
        [{"taskSpec": {"runnables": [{"script": {"text": "true"}}]}}] * 2,
        ("job.taskGroups: 2 items", "at most 1"),
    ),
    "batch: a label key the API reserves": ("batch_job", "job.labels", {"goog-team": "x"}, ("goog-team", "reserved")),
    "dataproc: more labels than a batch holds": (
        "dataproc_batch",
        "batch.labels",
        {f"l{index}": "x" for index in range(33)},
        ("batch.labels: 33 labels", "at most 32"),
    ),
    # A string's length and start, as its description states them: "The name can be up to 128
    # characters long", "Must be a valid Cloud Storage URL, beginning with `gs://`."
    "vertex: a display name longer than the API takes": (
        "vertex_pipeline_job",
        "pipeline_job.displayName",
        "nightly-" + "x" * 121,
        ("pipeline_job.displayName: 129 characters", "at most 128"),
    ),
    "dataflow: a temp location that is no Cloud Storage path": (
        "dataflow_flex_template",
        "launch_parameter.environment.tempLocation",
        "/tmp/dataflow",
        ("environment.tempLocation", "does not start with gs://"),
    ),
    # An id is held to the rule its description states wherever it stands in the request, not only
    # where runonce fills it: "The ID must contain only letters (a-z, A-Z), numbers (0-9), or underscores (_)."
    "bigquery: a dataset id with a dash as a query's default dataset": (
        "bigquery_job",
        "configuration.query.defaultDataset",
        {"projectId": "my-project", "datasetId": "my-analytics"},
        ("query.defaultDataset.datasetId: 'my-analytics' is not an id bigquery.v2 takes", "a-z A-Z 0-9 _"),
    ),
    # "A path in a Cloud Storage bucket", "requires a Cloud Storage bucket name, not a gs://... URI",
    # "Must be a .py file."
    "vertex: an output directory that is no Cloud Storage path": (
        "vertex_pipeline_job",
        "pipeline_job.runtimeConfig.gcsOutputDirectory",
        "/tmp/pipeline-root",
        ("runtimeConfig.gcsOutputDirectory", "does not start with gs://"),
    ),
    "dataproc: a staging bucket given as a URI": (
        "dataproc_batch",
        "batch.environmentConfig.executionConfig.stagingBucket",
        "gs://my-staging-bucket",
        ("executionConfig.stagingBucket", "asks for a bucket's name, without gs://"),
    ),
    "dataproc: a PySpark batch's main file that is no .py file": (
        "dataproc_batch",
        "batch.pysparkBatch.mainPythonFileUri",
        "gs://my-bucket/jobs/etl.jar",
        ("pysparkBatch.mainPythonFileUri", "does not end with .py"),
    ),
    # "Each tag must be 1-63 characters long, and comply with RFC1035."
    "batch: a network tag that is no RFC 1035 label": (
        "batch_job",
        "job.allocationPolicy.tags",
        ["render-nodes", "Render_Nodes"],
        ("job.allocationPolicy.tags[1]: 'Render_Nodes' is not an id batch.v1 takes", "RFC 1035"),
    ),
    "vertex: text as a number": (
        "vertex_pipeline_job",
        "pipeline_job.runtimeConfig.gcsOutputDirectory",
        5,
        ("gcsOutputDirectory", "string"),
    ),
}


@pytest.mark.parametrize("case", PRESET_CASES)
def test_preset_routes_are_held_to_their_api(case: str) -> None:
    """A batch_job, dataflow_flex_template, dataproc_batch or vertex_pipeline_job route whose call
    the API would refuse on every delivery is refused at start-up, in one line naming the field."""
    example, path, value, words = PRESET_CASES[case]
    line = _refusal(routes_yaml(changed(example_target(example), path, value)))
    assert "\n" not in line and line.startswith("routes file routes.yaml: route 'nightly': field 'target"), line
    for word in words:
        assert word in line, line


STRICT_SCALARS = "must be a whole number written in digits"
CONFIG_CASES: dict[str, tuple[str, str, Any, str, tuple[str, ...]]] = {
    # class: (example, field, value, field named, words the line holds: what is allowed)
    "cloud run: a count that is true": (
        "cloud_run_job",
        "task_count",
        True,
        "target.task_count",
        (STRICT_SCALARS, "True"),
    ),
    "cloud run: a count that is false": ("cloud_run_job", "task_count", False, "target.task_count", (STRICT_SCALARS,)),
    "cloud run: a count in quotes": (
        "cloud_run_job",
        "task_count",
        "4",
        "target.task_count",
        (STRICT_SCALARS + " (without quotes), got '4'",),
    ),
    "cloud run: a count with a point": (
        "cloud_run_job",
        "task_count",
        4.0,
        "target.task_count",
        (STRICT_SCALARS, "4.0"),
    ),
    "cloud build: run_fields yes": (
        "cloud_build_trigger",
        "run_fields",
        "yes",
        "target.run_fields",
        ("must be true or false (without quotes), got 'yes'",),
    ),
    "cloud build: a branch YAML reads as a date": (
        "cloud_build_trigger",
        "branch",
        date(2024, 1, 1),
        "target.branch",
        ("must be text, got a date (2024-01-01): quote it ('2024-01-01')",),
    ),
    "cloud tasks: a header value YAML reads as a number": (
        "cloud_tasks_task",
        "http_request.headers",
        {"X-Priority": 5},
        "target.http_request.headers.X-Priority",
        ("must be text, got the number 5: quote it ('5')",),
    ),
    "cloud build: a substitution YAML reads as false": (
        "cloud_build_trigger",
        "substitutions",
        {"_DRY_RUN": False},
        "target.substitutions._DRY_RUN",
        ("must be text, got false (YAML reads yes, no, on, off, true, false so): quote it",),
    ),
    "cloud build: a tag YAML reads as a number": (
        "cloud_build_trigger",
        "tag",
        2024.06,
        "target.tag",
        ("must be text, got the number 2024.06: quote it ('2024.06')",),
    ),
    "cloud tasks: a header value YAML reads as a date": (
        "cloud_tasks_task",
        "http_request.headers",
        {"X-Day": date(2024, 1, 1)},
        "target.http_request.headers.X-Day",
        ("must be text, got a date (2024-01-01): quote it",),
    ),
    "cloud build: run_fields 'false'": (
        "cloud_build_trigger",
        "run_fields",
        "false",
        "target.run_fields",
        ("must be true or false (without quotes)",),
    ),
    "cloud build: run_fields on": ("cloud_build_trigger", "run_fields", "on", "target.run_fields", ("true or false",)),
    "cloud build: run_fields 1": ("cloud_build_trigger", "run_fields", 1, "target.run_fields", ("true or false",)),
    "cloud build: run_fields 0": ("cloud_build_trigger", "run_fields", 0, "target.run_fields", ("true or false",)),
    "workflows: NaN in the argument": (
        "workflows",
        "argument.x",
        float("nan"),
        "target.argument",
        ("argument.x: nan has no JSON form",),
    ),
    "workflows: Infinity in the argument": (
        "workflows",
        "argument.x",
        float("inf"),
        "target.argument",
        ("has no JSON form",),
    ),
    "workflows: -Infinity deep in the argument": (
        "workflows",
        "argument.x",
        {"y": [1, float("-inf")]},
        "target.argument",
        ("has no JSON form",),
    ),
    "workflows: a date in the argument": (
        "workflows",
        "argument.day",
        date(2026, 1, 31),
        "target.argument",
        ("argument.day: a date has no JSON form (JSON holds text, numbers, true, false, null, lists and mappings)",),
    ),
    "workflows: a timestamp in a list in the argument": (
        "workflows",
        "argument.at",
        ["x", datetime(2026, 1, 31, 12, 0, tzinfo=UTC)],
        "target.argument",
        ("argument.at[1]: a timestamp has no JSON form", "quote it"),
    ),
    "workflows: binary data in the argument": (
        "workflows",
        "argument.blob",
        b"hi",
        "target.argument",
        ("argument.blob: binary data (!!binary) has no JSON form",),
    ),
    "workflows: an integer beyond 64 bits in the argument": (
        "workflows",
        "argument.n",
        2**64,
        "target.argument",
        ("the argument holds an integer beyond 64 bits",),
    ),
    "workflows: the argument sets the run's key": (
        "workflows",
        "argument.idempotency_key",
        "x",
        "target",
        ("argument: 'idempotency_key' is set by runonce (the run_id)",),
    ),
    "workflows: the argument sets a renamed key": (
        "workflows",
        "key_field",
        "mode",
        "target",
        ("argument: 'mode' is set by runonce (the run_id)",),
    ),
    "workflows: the argument sets runonce": (
        "workflows",
        "argument.runonce",
        {"job": "x"},
        "target",
        ("argument: 'runonce' is set by runonce (the run's job, schedule_time and source)",),
    ),
}


@pytest.mark.parametrize("case", CONFIG_CASES)
def test_a_preset_field_takes_only_its_own_type(case: str) -> None:
    """A preset's own fields are held to their type as written (a YAML boolean is no count, text is
    no boolean), and a workflows argument to what JSON holds and to the keys runonce leaves it."""
    example, path, value, field, words = CONFIG_CASES[case]
    line = _refusal(routes_yaml(changed(example_target(example), path, value)))
    assert "\n" not in line and line.startswith(f"routes file routes.yaml: route 'nightly': field '{field}': "), line
    for word in words:
        assert word in line, line


def test_a_preset_field_of_its_own_type_loads() -> None:
    cloud_run = parse_routes(routes_yaml(changed(example_target("cloud_run_job"), "task_count", 10000)), "r.yaml")
    assert cloud_run["nightly"].target.task_count == 10000
    for value in (True, False):
        build = parse_routes(routes_yaml(changed(example_target("cloud_build_trigger"), "run_fields", value)), "r.yaml")
        assert build["nightly"].target.run_fields is value
    argument = {"n": 2**63 - 1, "x": 1.5, "s": "2026-01-31", "l": [None, True], "m": {"runonce_x": 1}}
    workflows = parse_routes(routes_yaml(changed(example_target("workflows"), "argument", argument)), "r.yaml")
    assert workflows["nightly"].target.argument == argument


# --- what still loads --------------------------------------------------------------------------------

GOOD = {
    "batch with every handle": BATCH,
    "batch with labels in other scripts": changed(BATCH, "body.labels", {"チーム": "データ", "équipe": "données"}),
    "dataproc cluster by requestId": DATAPROC,
    "bigquery job by jobReference.jobId": BIGQUERY
    | {"reconcile": {"method": "jobs.get", "params": {"projectId": "my-project", "jobId": "q_${run_id}"}}},
    "pubsub topic by its name": TOPIC,
    "cloud tasks task by its caller-chosen name (a document from the google-api extra)": {
        "type": "google_api",
        "api": "cloudtasks.v2",
        "method": "projects.locations.queues.tasks.create",
        "params": {"parent": f"{PARENT}/queues/q"},
        "body": {
            "task": {
                "name": f"{PARENT}/queues/q/tasks/t-${{run_id}}",
                "httpRequest": {"url": "https://example.com/hook", "httpMethod": "POST"},
            }
        },
        "reconcile": {
            "method": "projects.locations.queues.tasks.get",
            "params": {"name": f"{PARENT}/queues/q/tasks/t-${{run_id}}"},
        },
    },
    "dataproc cluster by its run-named clusterName, reconciled by it": changed(
        DATAPROC,
        "reconcile",
        {
            "method": "projects.regions.clusters.get",
            "params": {"projectId": "my-project", "region": "us-central1", "clusterName": "c-${run_id:16}"},
        },
    ),
    "dataproc job by its run-named reference.jobId, reconciled by it": DATAPROC_JOB,
    "int64 as a number": changed(BATCH, "body.priority", 10),
    "a null scalar is its default": changed(BATCH, "body.priority", None),
}


@pytest.mark.parametrize("case", GOOD)
def test_correct_google_api_routes_load(case: str) -> None:
    routes = parse_routes(routes_yaml(GOOD[case]), "routes file routes.yaml")
    assert list(routes) == ["nightly"]


EXAMPLE_ROUTES_FILES = [
    path
    for path in sorted((REPO / "examples").glob("*.yaml"))
    if "routes" in (yaml.safe_load(path.read_text(encoding="utf-8")) or {})
]
"""The examples that are routes files (Scheduler job files are linted in test_examples)."""


def test_the_examples_hold_routes_files() -> None:
    assert len(EXAMPLE_ROUTES_FILES) >= 10


@pytest.mark.parametrize("path", EXAMPLE_ROUTES_FILES, ids=lambda path: path.name)
def test_every_example_routes_file_loads_and_lints_clean(path: Path) -> None:
    assert parse_routes(path.read_text(encoding="utf-8"), f"routes file {path}")
    result = _cli(["lint", str(path)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("api", "method", "handles"),
    [
        ("batch.v1", "projects.locations.jobs.create", "params.jobId (resource id), params.requestId (request id)"),
        (
            "dataproc.v1",
            "projects.regions.jobs.submit",
            "body.job.reference.jobId (resource id), body.requestId (request id)",
        ),
        (
            "dataproc.v1",
            "projects.regions.clusters.create",
            "body.clusterName (resource id), params.requestId (request id)",
        ),
        ("aiplatform.v1", "projects.locations.pipelineJobs.create", "params.pipelineJobId (resource id)"),
        (
            "aiplatform.v1",
            "projects.locations.deploymentResourcePools.create",
            "body.deploymentResourcePoolId (resource id)",
        ),
        ("bigquery.v2", "jobs.insert", "body.jobReference.jobId (resource id)"),
        ("pubsub.v1", "projects.topics.create", "params.name (resource name)"),
        ("run.v2", "projects.locations.jobs.create", "params.jobId (resource id)"),
        # a body that is the resource, its name chosen by the client (a document from the google-api extra)
        ("compute.v1", "instances.insert", "body.name (resource id), params.requestId (request id)"),
        # nothing to dedupe on: a field ending in Id, a server-chosen id, an update by PUT, a run
        ("bigquery.v2", "tabledata.insertAll", ""),
        ("bigquery.v2", "tables.update", ""),
        ("workflowexecutions.v1", "projects.locations.workflows.executions.create", ""),
        ("run.v2", "projects.locations.jobs.run", ""),
        ("cloudbuild.v1", "projects.locations.builds.create", ""),
        ("dataflow.v1b3", "projects.locations.flexTemplates.launch", ""),
        ("dataflow.v1b3", "projects.locations.jobs.create", ""),  # replaceJobId replaces, it does not dedupe
        # a `…Name` that is text for people, not held unique: "The name of the account. For an account
        # of type PERSONAL, this is the first and last name of the user account."
        ("mybusinessaccountmanagement.v1", "accounts.create", ""),
        # a requestId that dedupes only while the first instance runs ("prevents multiple concurrent
        # workflow instances with the same tag from running")
        ("dataproc.v1", "projects.locations.workflowTemplates.instantiate", ""),
        # a body that is the resource, its full name caller-specified ("Caller-specified and required in
        # CreateQueue"); not Dataflow's "user-specified" job name, unique only among active jobs (above)
        ("cloudtasks.v2", "projects.locations.queues.create", "body.name (resource name)"),
        # method ids that do not start with the API's name (sqladmin's are `sql.…`)
        ("sqladmin.v1", "blueGreenDeployments.create", "params.blueGreenDeploymentId (resource id)"),
        ("sqladmin.v1", "sql.blueGreenDeployments.create", "params.blueGreenDeploymentId (resource id)"),
    ],
)
def test_a_method_dedupes_on_what_its_document_says(api: str, method: str, handles: str) -> None:
    document = load(api)
    found = document.method(method)
    assert found is not None
    assert describe(handles_of(document, found)) == handles


@pytest.mark.parametrize(
    ("description", "handles"),
    [
        ("A unique id; a repeated request with it is answered with the first one's result.", "(request id)"),
        ("Deprecated. This field has no effect.", ""),
        ("Request ID used for debugging.", ""),
        ("The unique ID of the request that is used for debugging purposes.", ""),
        ("Optional. A tag that prevents multiple concurrent workflow instances with the same tag from running.", ""),
    ],
)
def test_a_request_id_its_description_says_the_api_ignores_is_no_handle(description: str, handles: str) -> None:
    """A `requestId` named like a handle that the API does not act on: a retry with it could run twice."""
    request_id = {"type": "string", "description": description}
    raw = {
        "name": "demo",
        "version": "v1",
        "rootUrl": "https://demo.googleapis.com/",
        "resources": {
            "items": {
                "methods": {
                    "import": {
                        "id": "demo.items.import",
                        "httpMethod": "POST",
                        "path": "v1/items:import",
                        "parameters": {"requestId": request_id | {"location": "query"}},
                        "request": {"$ref": "ImportRequest"},
                    }
                }
            }
        },
        "schemas": {"ImportRequest": {"type": "object", "properties": {"requestId": request_id}}},
    }
    document = ApiDocument(reduce_document(raw))
    method = document.method("items.import")
    assert method is not None
    found = " ".join(f"({handle.kind})" for handle in handles_of(document, method))
    assert found == (f"{handles} {handles}" if handles else "")


def test_a_document_whose_method_ids_start_differently_is_looked_up_under_its_name() -> None:
    """Method ids are taken with or without what every id of the document starts with; where they
    do not all start alike, that is the API's name, never one of the others."""
    method = {"httpMethod": "GET", "path": "v1/x", "parameters": {}}
    document = ApiDocument(
        {
            "name": "demo",
            "version": "v1",
            "rootUrl": "https://demo.googleapis.com/",
            "servicePath": "",
            "locational": {},
            "methods": {"alpha.items.get": method, "beta.items.list": method, "demo.things.get": method},
            "schemas": {},
        }
    )
    assert [document.method(m) is not None for m in ("things.get", "alpha.items.get", "beta.items.list")] == [
        True,
        True,
        True,
    ]
    assert document.method("items.get") is None
    assert document.method("items.list") is None


@pytest.mark.parametrize(
    ("description", "takes", "refuses"),
    [
        (
            "A secret ID is a string with a maximum length of 255 characters and can contain uppercase and "
            "lowercase letters, numerals, and the hyphen (`-`) and underscore (`_`) characters.",
            ["s" + "0" * 64, "S_" + "a" * 32, "0" * 255],
            ["a b", "x" * 256, "a.b"],
        ),
        (
            "This value must be 4-32 characters, and may contain the characters `[a-z0-9-]`.",
            ["abcd", "0" * 32],
            ["abc", "a" * 33, "ABCD"],
        ),
        (
            "The maximum length is 63 characters, and valid characters are `/^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$/`.",
            ["r" + "0" * 62],
            ["0abc", "a-", "r" + "0" * 63],
        ),
        (
            "This value may be up to 60 characters, and valid characters are `[a-z0-9_]`. The first character "
            "cannot be a number.",
            ["a_1"],
            ["1a", "a" * 61],
        ),
        ("This value should be 1-63 characters, and valid characters are /[a-z0-9_-]/.", ["a_b"], ["A", "a" * 64]),
        # "less than N": N - 1; "N characters or less": N
        (
            "This value should be less than 128 characters, and valid characters are `[a-z0-9-]`.",
            ["a" * 127],
            ["a" * 128],
        ),
        ("The ID is 40 characters or less, of `[a-z0-9-]`.", ["a" * 40], ["a" * 41]),
        # a class without a length: any length
        ("Valid characters are `[a-z0-9-]`.", ["a" * 300], ["A"]),
        # a class that is no regular expression: the words say it
        ("Up to 10 characters of letters and numbers `[a-z0-9`.", ["abc1"], ["ABC", "a_b", "a" * 11]),
        # words: the alphabet each one names, and no more
        # letters are of either case, unless only lower case is named (in words or as a-z)
        ("It has at most 20 characters: letters and hyphens.", ["ab-c", "AB"], ["ab1", "a_b", "a.b"]),
        ("At most 20 characters: lowercase letters and hyphens.", ["ab-c"], ["AB", "X", "a_b"]),
        ("Lowercase letters and hyphens only, at most 20 characters.", ["ab-c"], ["AB"]),
        # a class whose brackets Markdown took for a link: `/a-z-/` is [a-z][0-9]-
        ("This value should be 4-63 characters, and valid characters are /a-zA-Z0-9+/.", ["aB3d"], ["abc", "a-bc"]),
        ("Must be 4-128 characters in length. Valid characters are `/a-z-/`.", ["a-1b"], ["abc", "A-1b", "a_1b"]),
        # the documents' own words, from the APIs runonce does not carry (Firestore, Apigee, Analytics
        # Hub, IAM, Spanner, Workflows): a form it must not have, a literal start, Unicode letters,
        # "a minimum of … and a maximum of", "between N and M", a length and no alphabet (AIP-122's)
        (
            "Required. The ID to use for the database, which will become the final component of the database's "
            "resource name. This value should be 4-63 characters. Valid characters are /a-z-/ with first "
            "character a letter and the last a letter or a number. Must not be UUID-like "
            '/[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}/. "(default)" database ID is also valid if the '
            "database is Standard edition.",
            ["d" + "0" * 40, "abcd"],
            ["0abc", "abc-", "abcdef01-2345-6789-abcd-ef0123456789", "d_x0", "a" * 64],
        ),
        (
            "ID of the data collector. Overrides any ID in the data collector resource. Must be a string "
            "beginning with `dc_` that contains only letters, numbers, and underscores.",
            ["dc_abc", "dc_A1"],
            ["x0abc", "dc-a", "DC_a"],
        ),
        (
            "Must contain only Unicode letters, numbers (0-9), underscores (_). Max length: 100 bytes.",
            ["x_Ab", "x_\u00e9", "x" * 100],
            ["x-a", "a" * 101],
        ),
        (
            "A role ID may contain alphanumeric characters, underscores (`_`), and periods (`.`). It must contain "
            "a minimum of 3 characters and a maximum of 64 characters.",
            ["nightly_abc", "Nightly.abc"],
            ["ab", "r-a", "a" * 65],
        ),
        (
            "Required. The ID of the instance to create. Valid identifiers are of the form `a-z*[a-z0-9]` and "
            "must be between 2 and 64 characters in length.",
            ["i" + "a" * 63, "ab"],
            ["a", "A1", "a" * 65, "a-", "1a"],
        ),
        # more wordings of the documents: a forbidden form in other words (gkeonprem), a start it must not
        # have, `/a-z-_/` and `[a-z][0-9]-` (one class), `-` in quotes, "numeric characters", "a lowercase
        # letter or number" first, "lower-cased", "upper and lower-case", a length between other words, and
        # no length at all (AIP-122's 63)
        (
            "This value must be up to 63 characters, and valid characters are /a-z-/. The value must not be "
            "permitted to be a UUID (or UUID-like: anything matching /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-"
            "[0-9a-f]{4}-[0-9a-f]{12}$/i).",
            ["pool-0123456789abcdef"],
            ["ABCDEF01-2345-6789-abcd-ef0123456789", "abcdef01-2345-6789-abcd-ef0123456789", "a" * 64],
        ),
        ("Must contain only letters and numbers, up to 30 characters. Must not start with `goog`.", ["abc"], ["googa"]),
        ("This value should be 4-63 characters, and valid characters are /a-z-_/.", ["ctl-0123_ab"], ["CTL1", "a.bc"]),
        ("This value must be 4-63 characters. Valid characters are /[a-z][0-9]-/.", ["run-0a1"], ["RUN1", "ab"]),
        ("This value must be 4-63 characters, and valid characters are `[a-z]-`.", ["dest-grp"], ["dest1", "Dest"]),
        (
            "This value must: * contain at most 63 characters * contain only lowercase alphanumeric characters or "
            "`-` * start with an alphanumeric character",
            ["ns-0123"],
            ["NS", "ns_1"],
        ),
        (
            "The `environment_id` must be 1 to 63 characters long and contain only lowercase letters, numeric "
            "characters, and dashes. The first character must be a lowercase letter.",
            ["env-1"],
            ["Env", "1env"],
        ),
        (
            "It must start with a lowercase letter or number and can contain lowercase letters, numbers, and "
            "hyphens, up to 63 characters.",
            ["0abc-1", "abc"],
            ["Abc"],
        ),
        ("ID must be lower-cased and contain only letters, numbers and hyphens.", ["ext-1"], ["Ext-1", "a" * 64]),
        (
            "Can contain upper and lower-case alphanumeric characters, underscores and hyphens, up to 100 characters.",
            ["Ab_1-x"],
            ["a.b"],
        ),
        ("Only contains 1-63 alphanumeric characters and hyphens", ["ab-1"], ["a" * 64, "a_b"]),
        # a start it must not have (Pub/Sub's topic ids)
        (
            "It must start with a letter, contain only letters, numbers, dashes, underscores, periods, tildes, "
            'plus or percent signs, be between 3 and 255 characters, and it must not start with `"goog"`.',
            ["topic-1", "Goo"],
            ["goog-1", "1abc"],
        ),
        (
            "It has to fulfill the following requirements: * Must contain only letters, numbers, underscores "
            "and hyphens. * Must start with a letter. * Must be between 1-64 characters. * Must end with a "
            "number or a letter.",
            ["Wf_1", "a"],
            ["1a", "a-", "a" * 65],
        ),
        (
            "It has at most 20 characters: Uppercase and lowercase letters, digits, underscores and periods.",
            ["Ab_1.c"],
            ["a-b"],
        ),
        ("At most 20 characters: lower-case letters and dots.", ["a.b"], ["a1", "A", "X"]),
        # a regular expression written out after "must match the …", with or without backticks
        (
            "Optional. The Service id to use for this Service. Must match the pattern [a-z0-9\\-]+",
            ["0" * 64, "svc-1"],
            ["A", "a_b", ""],
        ),
        (
            "Must match the pattern ^[a-zA-Z0-9-_:.]+$. If omitted, an id will be generated.",
            ["slo:a.v1", "A-b_c"],
            ["a b", "a/b"],
        ),
        (
            "This value must match the regex: [a-zA-Z0-9@.\\-_]{1,64}",
            ["a@b.c-d_e", "a" * 64],
            ["a" * 65, "a b"],
        ),
        # `\p{L}` and `\p{N}`, which Python's `re` lacks, are any letter and any digit
        (
            "The ID must match the following regex: `[\\p{L}\\p{N}_\\-\\.]{1,256}`.",
            ["nightly_" + "0" * 64 + ".v1", "données"],
            ["a b", "a/b", "a" * 257],
        ),
        # "alpha-numeric" is letters of either case and digits
        (
            "This value must be between 2 and 63 characters long inclusive, begin with a letter, end with a letter "
            "or number, and consist of alpha-numeric ASCII characters or hyphens.",
            ["Nightly-" + "0" * 40, "ab"],
            ["1ab", "a_b", "ab-", "a"],
        ),
        # an alphanumeric first character
        (
            "Identifiers are limited to 100 characters and can include only letters, digits, underscores, hyphens, "
            "and periods. Bucket identifiers must start with an alphanumeric character.",
            ["0abc", "a.b_c-d"],
            ["_abc", ".abc", "-abc", "a" * 101],
        ),
        (
            "This value maximum length is 63 characters, and valid characters are /a-z-/. It must start with an "
            "english letter and must not end with a hyphen.",
            ["a-1"],
            ["1a", "a-"],
        ),
        ("Up to 30 characters of `[a-z0-9_]`; it must start with a letter or underscore.", ["_a", "a_"], ["a-b"]),
        ("The ID consists of letters and numbers.", ["Ab1"], ["a-b", "a" * 64]),
        (
            "Up to 63 characters of `[A-Za-z0-9-]`. Must not be UUID-like /[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}/.",
            ["ABCDEF01-ABCD-ABCD-ABCD-ABCDEF012345"],
            ["abcdef01-abcd-abcd-abcd-abcdef012345"],
        ),
        (
            "Up to 63 characters of `[A-Za-z0-9-]`. It must not be a UUID "
            "(/^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$/i).",
            ["abcdef01-abcd"],
            ["ABCDEF01-ABCD-ABCD-ABCD-ABCDEF012345", "abcdef01-abcd-abcd-abcd-abcdef012345"],
        ),
        ("Up to 63 characters of `[a-z0-9-]`; it must not end with a hyphen.", ["-a", "a"], ["a-"]),
        # characters an id must not open or end with, and a first character that is no digit
        (
            "The ID must contain only letters (a-z, A-Z), numbers (0-9), underscores (_), and hyphens (-). Cannot "
            "begin or end with underscore or hyphen. Must consist of from 3 to 33 characters.",
            ["ab_c-1", "A1b"],
            ["_abc", "-abc", "abc_", "abc-", "ab"],
        ),
        (
            "It must start with a letter and must not end with a dash; up to 64 characters of `[a-z0-9-]`.",
            ["a1", "ab"],
            ["a-", "1a"],
        ),
        (
            "This value may be up to 60 characters, and valid characters are `[a-z0-9_]`. The first character "
            "cannot be a number.",
            ["_features", "f_1"],
            ["1f", "F"],
        ),
        (
            "Up to 63 characters of `[a-z0-9_-]`. The first character cannot be a number or hyphen.",
            ["_m", "m-1"],
            ["1m", "-m"],
        ),
        (
            "This value may be up to 63 characters, and valid characters are `[a-z0-9-]`. The first and last "
            "characters must be a letter or number.",
            ["0s", "s-0"],
            ["-s", "s-"],
        ),
        (
            "They must contain only alphanumeric characters and dashes. They can be 1-64 characters long. They "
            "must begin and end with an alphanumeric character",
            ["Ghe-1", "1"],
            ["-ghe", "ghe-"],
        ),
    ],
)
def test_an_ids_rule_is_read_from_its_description(description: str, takes: list[str], refuses: list[str]) -> None:
    """A resource id is held to the length and alphabet its description states (AIP-122's rule only
    where it states none): Secret Manager takes 255 characters of A-Z a-z 0-9 - _, IAM's keys 4-32."""
    rule = described_id_rule(description)
    assert rule is not None
    assert [value for value in takes if not re.fullmatch(rule["pattern"], value)] == []
    assert [value for value in refuses if re.fullmatch(rule["pattern"], value)] == []


@pytest.mark.parametrize(
    "description",
    [
        "The ID to use for the job.",
        "It names the pool (a UUID). Only one is allowed.",
        # a placeholder in brackets is no class; a length the other way round is no rule
        "The `[SPAN_ID]` is a unique identifier for a span within a trace.",
        "Only letters and numbers, 1 to 0 characters.",
        # a relative link is no class: "[artifact](../../rest/x)"
        "The ID of the key; see the App's [configuration artifact](../../rest/v1beta1/x).",
    ],
)
def test_an_id_whose_description_states_no_alphabet_keeps_aip_122(description: str) -> None:
    assert described_id_rule(description) is None


@pytest.mark.parametrize(
    ("description", "words"),
    [
        ("Up to 10 characters of letters. " + "x" * 300, "1-10 characters of a-z A-Z"),
        (
            "This value must be 4-63 characters. Valid characters are /[a-z][0-9]-/.",
            "4-63 characters of a-z 0-9 -",
        ),
        (
            "Must be 2-63 characters, start with a letter, end with a letter or number, and "
            + "contain only lowercase letters, numbers and hyphens. " * 5
            + "Must not be UUID-like /[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}/.",
            "2-63 characters of a-z 0-9 -, starting with a letter, ending with a letter or digit, "
            "not of the form [0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}",
        ),
        ("The id must match `^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`.", "matching [a-z]([a-z0-9-]{0,61}[a-z0-9])?"),
        (
            "Valid characters are `[\\p{L}\\p{N}_\\-\\.]` and at most 64 characters.",
            "1-64 characters of any letter any digit _ - .",
        ),
        ("At least 3 characters, valid characters are `[a-z_]`.", "at least 3 characters of a-z _"),
        (
            "Only letters, numbers and underscores, beginning with `dc_`.",
            "1-63 characters of a-z A-Z 0-9 _, starting with 'dc_'",
        ),
        (
            "It can contain unicode letters, numbers and underscores; up to 100 characters.",
            "1-100 characters of a-z A-Z 0-9 _ and letters of any script",
        ),
        (
            "Cannot begin or end with underscore or hyphen. Only letters, numbers, underscores and hyphens.",
            "1-63 characters of a-z A-Z 0-9 _ -, not starting or ending with - or _",
        ),
        (
            "It must start with a letter and must not end with a dash; up to 64 characters of `[a-z0-9-]`.",
            "1-64 characters of a-z 0-9 -, starting with a letter, not ending with -",
        ),
        (
            "Up to 30 characters of `[a-z0-9-]`; it must not start with `goog`.",
            "1-30 characters of a-z 0-9 -, not starting with 'goog'",
        ),
        (
            "Up to 60 characters of `[a-z0-9_]`. The first character cannot be a number or hyphen.",
            "1-60 characters of a-z 0-9 _, not starting with a digit or -",
        ),
        (
            "The ID must be between 4 and 32 characters.",
            "4-32 characters of a-z 0-9 -, starting with a letter, ending with a letter or digit",
        ),
    ],
)
def test_an_id_rule_says_in_the_refusal_what_it_checks(description: str, words: str) -> None:
    """The refusal says the rule as runonce reads and checks it, never a truncated quote."""
    rule = described_id_rule(description)
    assert rule is not None
    assert rule["words"] == f"{words} (as its description states)"


def test_a_secret_id_is_held_to_secret_managers_rule_not_aip_122() -> None:
    route = {
        "type": "google_api",
        "api": "secretmanager.v1",
        "method": "projects.secrets.create",
        "params": {"parent": "projects/my-project", "secretId": "S_${run_id}"},
        "body": {"replication": {"automatic": {}}},
    }
    assert parse_routes(routes_yaml(route), "routes file routes.yaml")  # 66 characters, upper case, _: taken
    route["params"]["secretId"] = "s.${run_id}"
    line = _refusal(routes_yaml(route))
    assert "params.secretId: " in line and "takes: 1-255 characters of a-z A-Z 0-9 _ -" in line, line


def test_an_id_that_must_not_look_like_a_uuid_is_refused_one() -> None:
    """Firestore's database id "Must not be UUID-like": `${run_uuid}` is refused, `d${run_id:40}` taken
    (the document comes from google-api-python-client: runonce does not carry Firestore's)."""
    route = {
        "type": "google_api",
        "api": "firestore.v1",
        "method": "projects.databases.create",
        "params": {"parent": "projects/my-project", "databaseId": "d${run_id:40}"},
        "body": {"locationId": "nam5", "type": "FIRESTORE_NATIVE"},
    }
    assert parse_routes(routes_yaml(route), "routes file routes.yaml")
    route["params"]["databaseId"] = "${run_uuid}"
    line = _refusal(routes_yaml(route))
    assert "params.databaseId: " in line and "not of the form [0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}" in line, line


@pytest.mark.parametrize(
    ("api", "method", "params", "body", "field"),
    [
        # "A unique ID generated in the API responses": the server's, not the caller's
        (
            "jobs.v4",
            "projects.tenants.clientEvents.create",
            {"parent": "projects/p/tenants/t"},
            {"requestId": "${run_uuid}", "eventId": "e", "createTime": "2026-01-31T12:00:00Z"},
            "body.requestId",
        ),
        # "The id of the Idp to create a config for": an existing provider's, not a new resource's
        (
            "identitytoolkit.v2",
            "projects.defaultSupportedIdpConfigs.create",
            {"parent": "projects/p", "idpId": "i${run_id:40}"},
            {},
            "params.idpId",
        ),
    ],
)
def test_an_id_the_method_does_not_dedupe_on_is_no_handle(
    api: str, method: str, params: dict[str, Any], body: dict[str, Any], field: str
) -> None:
    route = {"type": "google_api", "api": api, "method": method, "params": params, "body": body}
    line = _refusal(routes_yaml(route))
    assert "no way to dedupe" in line and field in line and "does not dedupe on" in line, line


def test_a_name_the_caller_chooses_is_held_to_the_rule_its_description_states() -> None:
    """Cloud Scheduler: "`JOB_ID` can contain only letters ([A-Za-z]), numbers ([0-9]), hyphens (-), or
    underscores (_). The maximum length is 500 characters." (not AIP-122's 63 lower-case characters)."""
    route = {
        "type": "google_api",
        "api": "cloudscheduler.v1",
        "method": "projects.locations.jobs.create",
        "params": {"parent": PARENT},
        "body": {
            "name": f"{PARENT}/jobs/Nightly_${{run_id}}",
            "schedule": "0 3 * * *",
            "httpTarget": {"uri": "https://example.com/run"},
        },
    }
    assert parse_routes(routes_yaml(route), "routes file routes.yaml")
    route["body"]["name"] = f"{PARENT}/jobs/nightly.${{run_id}}"
    line = _refusal(routes_yaml(route))
    assert "body.name: the id 'nightly.0000" in line and "takes: 1-500 characters of a-z A-Z 0-9 _ -" in line, line


@pytest.mark.parametrize(
    "documents",
    [
        # a top-level collection: the parent's template `documents/**` takes zero segments, though
        # the document's pattern (`documents/.*$`) asks for one
        "projects/my-project/databases/(default)/documents",
        "projects/my-project/databases/(default)/documents/teams/data",  # a document's subcollection
    ],
)
def test_a_create_of_a_collection_the_route_names_dedupes_on_its_id(documents: str) -> None:
    """Firestore's `documents.createDocument` POSTs to `{+parent}/{collectionId}` and takes the
    client-assigned `documentId`: a second create of it is refused, and the read finds it by name."""
    route = {
        "type": "google_api",
        "api": "firestore.v1",
        "method": "projects.databases.documents.createDocument",
        "params": {"parent": documents, "collectionId": "runs", "documentId": "r${run_id:62}"},
        "body": {"fields": {"state": {"stringValue": "started"}}},
        "reconcile": {
            "method": "projects.databases.documents.get",
            "params": {"name": f"{documents}/runs/r${{run_id:62}}"},
        },
    }
    assert parse_routes(routes_yaml(route), "routes file routes.yaml")
    route["reconcile"]["params"]["name"] = f"{documents}/other/r${{run_id:62}}"
    assert "reconcile.params: the read must find the resource" in _refusal(routes_yaml(route))


def test_a_name_whose_description_says_a_taken_one_fails_is_a_handle() -> None:
    """Storage Transfer's `TransferJob.name`: "If the specified name is in use by a job, the creation
    request fails with an ALREADY_EXISTS error." A name it creates lives in `transferJobs/`, the
    collection `POST v1/transferJobs` creates in."""
    route = {
        "type": "google_api",
        "api": "storagetransfer.v1",
        "method": "transferJobs.create",
        "body": {
            "name": "transferJobs/r${run_id:62}",
            "projectId": "my-project",
            "transferSpec": {"gcsDataSource": {"bucketName": "a"}, "gcsDataSink": {"bucketName": "b"}},
        },
        "reconcile": {
            "method": "transferJobs.get",
            "params": {"jobName": "transferJobs/r${run_id:62}", "projectId": "my-project"},
        },
    }
    assert parse_routes(routes_yaml(route), "routes file routes.yaml")
    route["body"]["name"] = "jobs/r${run_id:62}"
    line = _refusal(routes_yaml(route))
    assert "body.name: 'jobs/r0000" in line and "is not a name in transferJobs" in line, line
    route["body"]["name"] = "transferJobs/nightly"
    line = _refusal(routes_yaml(route))
    assert "no way to dedupe: fill from the run what storagetransfer.transferJobs.create dedupes on: body.name" in line


def test_a_name_whose_description_says_nothing_of_it_is_no_handle() -> None:
    """Cloud Storage's `buckets.insert`: the bucket's `name` is unique, but the document does not say a
    taken one is refused, so it is no handle runonce relies on."""
    route = {
        "type": "google_api",
        "api": "storage.v1",
        "method": "buckets.insert",
        "params": {"project": "my-project"},
        "body": {"name": "b-${run_id:40}", "location": "US"},
    }
    line = _refusal(routes_yaml(route))
    assert "no way to dedupe (body.name holds the run but storage.buckets.insert does not dedupe on it)" in line


@pytest.mark.parametrize("parent", ["documents/", "documents//teams/data", "documents/teams/data/"])
def test_an_empty_segment_is_refused_where_the_pattern_lets_one_through(parent: str) -> None:
    """`…/documents/.*$` matches `…/documents/` too: the call would go to `…/documents//runs`."""
    route = {
        "type": "google_api",
        "api": "firestore.v1",
        "method": "projects.databases.documents.createDocument",
        "params": {
            "parent": f"projects/my-project/databases/(default)/{parent}",
            "collectionId": "runs",
            "documentId": "r${run_id:62}",
        },
        "body": {},
    }
    line = _refusal(routes_yaml(route))
    assert "field 'target.params': params.parent=" in line and "or an empty one ('//'" in line, line


def test_a_name_the_client_provides_is_held_to_the_rule_its_description_states() -> None:
    """Compute Engine's instance `name`, "provided by the client when initially creating the resource",
    "must be 1-63 characters long and match the regular expression `[a-z]([-a-z0-9]*[a-z0-9])?`"."""
    route = {
        "type": "google_api",
        "api": "compute.v1",
        "method": "instances.insert",
        "params": {"project": "my-project", "zone": "us-central1-a", "requestId": "${run_uuid}"},
        "body": {
            "name": "r${run_id:62}",
            "machineType": "zones/us-central1-a/machineTypes/e2-small",
            "disks": [{"boot": True, "initializeParams": {"sourceImage": "projects/debian-cloud/global/images/x"}}],
            "networkInterfaces": [{"network": "global/networks/default"}],
        },
    }
    assert parse_routes(routes_yaml(route), "routes file routes.yaml")
    route["body"]["name"] = "R${run_id:62}"
    line = _refusal(routes_yaml(route))
    assert "body.name: 'R0000" in line and "is not an id compute.v1 takes" in line, line


def test_a_request_id_that_must_be_a_uuid_is_filled_with_one() -> None:
    """Compute Engine (and every API whose description says "The request ID must be a valid UUID"):
    `${run_id}` is no UUID, and the API would refuse every call."""
    route = {
        "type": "google_api",
        "api": "compute.v1",
        "method": "instances.insert",
        "params": {"project": "my-project", "zone": "us-central1-a", "requestId": "${run_id}"},
        "body": {"name": "r${run_id:62}", "machineType": "zones/us-central1-a/machineTypes/e2-small"},
    }
    line = _refusal(routes_yaml(route))
    assert "params.requestId: " in line and "a UUID other than the zero UUID (fill it with ${run_uuid})" in line, line
    route["params"]["requestId"] = "${run_uuid}"
    assert parse_routes(routes_yaml(route), "routes file routes.yaml")


def test_the_docs_list_every_recognised_handle() -> None:
    """docs/how-to/targets/google_api.md lists, per API runonce carries, the methods runonce can call
    once and what each dedupes on: the same table the routes are checked with."""
    page = (REPO / "docs" / "how-to" / "targets" / "google_api.md").read_text(encoding="utf-8")
    assert handles_table() in page, (
        "the table of handles in docs/how-to/targets/google_api.md is stale: replace it with the output of "
        '.venv/bin/python -c "from runonce.targets.handles import handles_table; print(handles_table())"'
    )
    for api, methods in handles_by_api().items():
        for method, handles in methods.items():
            assert f"| `{api}` | `{method}` | {', '.join(f'`{h.path}`' for h in handles)} |" in page


TRAILING_NEWLINE_CASES: dict[str, tuple[str, str, Any, str]] = {
    # class: (example, field, value ending in a newline, what the line names)
    "cloud build: the run's substitution": ("cloud_build_trigger", "substitution", "_RUN_KEY\n", "substitution"),
    "cloud build: a substitution's key": ("cloud_build_trigger", "substitutions", {"_BRANCH\n": "main"}, "_BRANCH"),
    "cloud run: the run's env var": ("cloud_run_job", "env_var", "IDEMPOTENCY_KEY\n", "env_var"),
    "workflows: the argument key": ("workflows", "key_field", "idempotency_key\n", "key_field"),
    "google_api: a parameter's location": (
        "google_api",
        "params.parent",
        "projects/my-project/locations/us-central1\n",
        "parent",
    ),
    # a field that names or locates something, written as a YAML `|` block (which ends in a newline)
    "batch: an image URI": (
        "batch_job",
        "job.taskGroups.0.taskSpec.runnables.0.container.imageUri",
        "us-docker.pkg.dev/my-project/jobs/render:1\n",
        "imageUri",
    ),
    "batch: a service account": (
        "batch_job",
        "job.allocationPolicy.serviceAccount.email",
        "render@my-project.iam.gserviceaccount.com\n",
        "serviceAccount.email",
    ),
    "dataflow: a bucket path": (
        "dataflow_flex_template",
        "launch_parameter.environment.tempLocation",
        "gs://b/\n",
        "tempLocation",
    ),
    "dataproc: a file URI in a list": (
        "dataproc_batch",
        "batch.pysparkBatch.jarFileUris",
        ["gs://b/a.jar", "gs://b/c.jar\r"],
        "jarFileUris",
    ),
    "dataproc: a KMS key": (
        "dataproc_batch",
        "batch.environmentConfig.executionConfig.kmsKey",
        "projects/my-project/locations/us-central1/keyRings/r/cryptoKeys/k\n",
        "kmsKey",
    ),
    "dataflow: a KMS key's name": (
        "dataflow_flex_template",
        "launch_parameter.environment.kmsKeyName",
        "projects/my-project/locations/us-central1/keyRings/r/cryptoKeys/k\n",
        "kmsKeyName",
    ),
    "batch: a machine type": (
        "batch_job",
        "job.allocationPolicy.instances.0.policy.machineType",
        "e2-standard-4\n",
        "machineType",
    ),
    "vertex: a service account": (
        "vertex_pipeline_job",
        "pipeline_job.serviceAccount",
        "p@my-project.iam.gserviceaccount.com\n",
        "serviceAccount",
    ),
}


@pytest.mark.parametrize("case", TRAILING_NEWLINE_CASES)
def test_a_name_ending_in_a_newline_is_refused_by_serve_and_lint(case: str, tmp_path: Path) -> None:
    """Every pattern is matched whole (`fullmatch`): a `$` would let a final newline through."""
    example, field, value, named = TRAILING_NEWLINE_CASES[case]
    routes = tmp_path / "routes.yaml"
    routes.write_text(routes_yaml(changed(example_target(example), field, value)), encoding="utf-8")
    line = _refusal(routes.read_text(encoding="utf-8")).replace("routes.yaml", str(routes))
    assert "\n" not in line.rstrip("\n") and named in line, line
    assert line.startswith(f"routes file {routes}: route 'nightly': field 'target"), line

    served = _cli(["serve", "--port", "1"], routes)
    assert served.exit_code != 0 and line in served.output and "Traceback" not in served.output, served.output
    linted = _cli(["lint", str(routes)])
    assert linted.exit_code == 1 and f"{routes}: -: error: {line} [invalid_routes]" in linted.output, linted.output


@pytest.mark.parametrize(
    ("route", "field"),
    [
        # GKE's `cluster.name`: "The name must be unique within this project and location"
        (
            {
                "api": "container.v1",
                "method": "projects.locations.clusters.create",
                "params": {"parent": PARENT},
                "body": {"cluster": {"name": "c${run_id:39}", "initialNodeCount": 1}},
                "reconcile": {
                    "method": "projects.locations.clusters.get",
                    "params": {"name": f"{PARENT}/clusters/c${{run_id:39}}"},
                },
            },
            "body.cluster.name",
        ),
        # Logging's `LogSink.name`: "The client-assigned sink identifier, unique within the project."
        (
            {
                "api": "logging.v2",
                "method": "projects.sinks.create",
                "params": {"parent": "projects/my-project"},
                "body": {"name": "Sink_${run_id}", "destination": "storage.googleapis.com/my-bucket"},
            },
            "body.name",
        ),
        # AI Platform's `jobId`: "Required. The user-specified id of the job."
        (
            {
                "api": "ml.v1",
                "method": "projects.jobs.create",
                "params": {"parent": "projects/my-project"},
                "body": {
                    "jobId": "train-${run_id:40}",
                    "trainingInput": {
                        "region": "us-central1",
                        "packageUris": ["gs://my-bucket/trainer.tar.gz"],
                        "pythonModule": "trainer.task",
                        "scaleTier": "BASIC",
                    },
                },
            },
            "body.jobId",
        ),
        # Cloud Build's `BuildTrigger.name`: "User-assigned name of the trigger. Must be unique within the project."
        (
            {
                "api": "cloudbuild.v1",
                "method": "projects.locations.triggers.create",
                "params": {"parent": PARENT, "projectId": "my-project"},
                "body": {"name": "t-${run_id:40}", "filename": "cloudbuild.yaml"},
            },
            "body.name",
        ),
    ],
)
def test_an_id_the_description_says_the_client_assigns_is_a_handle(route: dict[str, Any], field: str) -> None:
    """A body id or name its description calls client- or user-assigned, or unique within its parent,
    dedupes the create: filled from the run, the route loads; fixed, it is refused as the same handle."""
    route = {"type": "google_api", **route}
    assert parse_routes(routes_yaml(route), "routes file routes.yaml")
    fixed = changed(route, field, "nightly")
    line = _refusal(routes_yaml(fixed))
    assert f"{field}: 'nightly' does not tell runs apart" in line or f"dedupes on: {field}" in line, line


def _notebook(**params: str) -> dict[str, Any]:
    """A Vertex AI Workbench instance's create (the document comes from google-api-python-client)."""
    return {
        "type": "google_api",
        "api": "notebooks.v2",
        "method": "projects.locations.instances.create",
        "params": {"parent": "projects/my-project/locations/us-central1-a", **params},
        "body": {"gceSetup": {"machineType": "e2-standard-4"}},
    }


def test_a_query_parameter_the_description_calls_required_must_be_given() -> None:
    """Notebooks' `instanceId`: "Required. User-defined unique ID of this instance." Without it the API
    refuses every call."""
    route = _notebook(requestId="${run_uuid}")
    line = _refusal(routes_yaml(route))
    assert "field 'target.params': params: notebooks.projects.locations.instances.create needs the query " in line
    assert "parameter 'instanceId' (its description: Required.)" in line, line
    route["params"]["instanceId"] = "n${run_id:40}"
    assert parse_routes(routes_yaml(route), "routes file routes.yaml")


def test_a_required_field_the_description_calls_deprecated_is_not_required() -> None:
    """AlloyDB's `Cluster.network`: "Required. … Deprecated, use network_config.network instead." """
    route = {
        "type": "google_api",
        "api": "alloydb.v1",
        "method": "projects.locations.clusters.create",
        "params": {"parent": PARENT, "clusterId": "c${run_id:40}", "requestId": "${run_uuid}"},
        "body": {
            "networkConfig": {"network": "projects/my-project/global/networks/default"},
            "initialUser": {"password": "x"},
        },
    }
    assert parse_routes(routes_yaml(route), "routes file routes.yaml")


def test_a_request_id_described_as_a_request_uuid_must_be_one() -> None:
    """Notebooks' `requestId`: "Optional. Idempotent request UUID." """
    line = _refusal(routes_yaml(_notebook(instanceId="n${run_id:40}", requestId="r-${run_id:40}")))
    assert "params.requestId: " in line and "a UUID other than the zero UUID (fill it with ${run_uuid})" in line, line


def test_a_required_field_of_an_optional_message_in_the_query_is_needed_only_with_that_message() -> None:
    """Spanner's `backups.create` takes `encryptionConfig.encryptionType` ("Required. The encryption
    type of the backup.") as a query parameter: required once `encryptionConfig` is given, not before."""
    route = {
        "type": "google_api",
        "api": "spanner.v1",
        "method": "projects.instances.backups.create",
        "params": {"parent": "projects/my-project/instances/i", "backupId": "b${run_id:40}"},
        "body": {"database": "projects/my-project/instances/i/databases/d", "expireTime": "2027-01-01T00:00:00Z"},
    }
    assert parse_routes(routes_yaml(route), "routes file routes.yaml")
    route["params"]["encryptionConfig.kmsKeyName"] = "projects/my-project/locations/l/keyRings/r/cryptoKeys/k"
    line = _refusal(routes_yaml(route))
    assert "needs the query parameter 'encryptionConfig.encryptionType'" in line, line
