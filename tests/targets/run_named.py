"""The batch-workload target types under test (`batch_job`, `dataflow_flex_template`,
`dataproc_batch`, `vertex_pipeline_job`), described once so one fault matrix runs over all of them:
each type's route, its fake, the fake's names for its calls, and where the run's identity must
appear in what the fake received."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fakes.aiplatform import CREATE as VERTEX_CREATE
from tests.fakes.aiplatform import GET as VERTEX_GET
from tests.fakes.aiplatform import FakeAiPlatform
from tests.fakes.batch import CREATE as BATCH_CREATE
from tests.fakes.batch import GET as BATCH_GET
from tests.fakes.batch import FakeBatch
from tests.fakes.dataflow import GET as DATAFLOW_GET
from tests.fakes.dataflow import LAUNCH as DATAFLOW_LAUNCH
from tests.fakes.dataflow import LIST as DATAFLOW_LIST
from tests.fakes.dataflow import FakeDataflow
from tests.fakes.dataproc import CREATE as DATAPROC_CREATE
from tests.fakes.dataproc import GET as DATAPROC_GET
from tests.fakes.dataproc import FakeDataproc
from tests.fakes.google_api import Created
from tests.fakes.metadata import FakeMetadataServer

PROJECT = "runonce-test"
LOCATION = "us-central1"
# Short enough that a test waits out a lease in seconds; the lease covers the dispatch timeout,
# two store timeouts and the margin (settings.py's rule).
LEASE_SECONDS = 4
DISPATCH_TIMEOUT_SECONDS = 2


def _batch_identity(created: Created, run_id: str, when: str) -> None:
    [group] = created.data["body"]["taskGroups"]
    variables = group["taskSpec"]["environment"]["variables"]
    assert variables == {"STAGE": "prod", "RUNONCE_RUN_ID": run_id, "RUNONCE_SCHEDULE_TIME": when}
    assert [e["variables"]["RUNONCE_RUN_ID"] for e in group["taskEnvironments"]] == [run_id, run_id]
    assert created.data["body"]["labels"] == {"team": "data", "runonce-run-id": run_id[:63]}
    assert created.resource == f"projects/{PROJECT}/locations/{LOCATION}/jobs/runonce-{run_id[:55]}"


def _dataflow_identity(created: Created, run_id: str, when: str) -> None:
    launch = created.data["body"]["launchParameter"]
    assert launch["jobName"] == f"runonce-{run_id}"
    assert launch["parameters"] == {"input": "gs://in/*.csv", "run_id": run_id, "schedule_time": when}
    assert launch["environment"]["additionalUserLabels"] == {"team": "data", "runonce-run-id": run_id[:63]}
    assert launch["environment"]["maxWorkers"] == 4
    assert created.resource == f"projects/{PROJECT}/locations/{LOCATION}/jobs/{created.data['job']['id']}"


def _dataproc_identity(created: Created, run_id: str, when: str) -> None:
    body = created.data["body"]
    assert body["runtimeConfig"]["properties"] == {
        "spark.executor.instances": "2",
        "spark.dataproc.driverEnv.RUNONCE_RUN_ID": run_id,
        "spark.dataproc.driverEnv.RUNONCE_SCHEDULE_TIME": when,
        "spark.executorEnv.RUNONCE_RUN_ID": run_id,
        "spark.executorEnv.RUNONCE_SCHEDULE_TIME": when,
    }
    assert body["labels"] == {"team": "data", "runonce-run-id": run_id[:63]}
    assert created.resource == f"projects/{PROJECT}/locations/{LOCATION}/batches/runonce-{run_id[:55]}"


def _vertex_identity(created: Created, run_id: str, when: str) -> None:
    body = created.data["body"]
    assert body["runtimeConfig"]["parameterValues"] == {"threshold": 0.5, "run": run_id, "ds": when}
    assert body["labels"] == {"team": "data", "runonce-run-id": run_id[:63]}
    assert created.resource == f"projects/{PROJECT}/locations/{LOCATION}/pipelineJobs/runonce-{run_id}"


def _get_lags(method: str) -> Callable[[Any], None]:
    return lambda fake: fake.fail(method, "NOT_FOUND", "Resource not found")


@dataclass
class JobType:
    """One target type of the matrix."""

    type: str
    route: str
    target: dict[str, Any]
    make_fake: Callable[[FakeMetadataServer], Any]
    create: str
    lookup: str  # what reconciliation and the 409 path read
    state_read: str  # what `is_running` reads
    endpoint_variable: str
    check_identity: Callable[[Created, str, str], None]
    failed_state: str
    lag: Callable[[Any], None] = lambda fake: None
    """Make the lookups of the next retry lag the create (they do not see it yet)."""


TYPES: dict[str, JobType] = {
    "batch_job": JobType(
        type="batch_job",
        route="batch",
        target={
            "type": "batch_job",
            "project": PROJECT,
            "location": LOCATION,
            "job": {
                "taskGroups": [
                    {
                        "taskCount": "2",
                        "taskSpec": {
                            "runnables": [{"container": {"imageUri": "gcr.io/p/etl:1", "commands": ["run"]}}],
                            "environment": {"variables": {"STAGE": "prod"}},
                        },
                        "taskEnvironments": [{"variables": {"SHARD": "0"}}, {"variables": {"SHARD": "1"}}],
                    }
                ],
                "labels": {"team": "data"},
                "logsPolicy": {"destination": "CLOUD_LOGGING"},
            },
        },
        make_fake=FakeBatch,
        create=BATCH_CREATE,
        lookup=BATCH_GET,
        state_read=BATCH_GET,
        endpoint_variable="RUNONCE_BATCH_ENDPOINT",
        check_identity=_batch_identity,
        failed_state="FAILED",
        lag=_get_lags(BATCH_GET),
    ),
    "dataflow_flex_template": JobType(
        type="dataflow_flex_template",
        route="flex",
        target={
            "type": "dataflow_flex_template",
            "project": PROJECT,
            "location": LOCATION,
            "launch_parameter": {
                "containerSpecGcsPath": "gs://templates/etl.json",
                "parameters": {"input": "gs://in/*.csv"},
                "environment": {"maxWorkers": 4, "additionalUserLabels": {"team": "data"}},
            },
            "run_parameters": ["run_id", "schedule_time"],
        },
        make_fake=FakeDataflow,
        create=DATAFLOW_LAUNCH,
        lookup=DATAFLOW_LIST,
        state_read=DATAFLOW_GET,
        endpoint_variable="RUNONCE_DATAFLOW_ENDPOINT",
        check_identity=_dataflow_identity,
        failed_state="JOB_STATE_FAILED",
        # the runner's reconciliation and the launch's own check before it
        lag=lambda fake: fake.lag_lists(2),
    ),
    "dataproc_batch": JobType(
        type="dataproc_batch",
        route="spark",
        target={
            "type": "dataproc_batch",
            "project": PROJECT,
            "location": LOCATION,
            "batch": {
                "pysparkBatch": {"mainPythonFileUri": "gs://code/etl.py", "args": ["--full"]},
                "runtimeConfig": {"properties": {"spark.executor.instances": "2"}},
                "labels": {"team": "data"},
            },
        },
        make_fake=FakeDataproc,
        create=DATAPROC_CREATE,
        lookup=DATAPROC_GET,
        state_read=DATAPROC_GET,
        endpoint_variable="RUNONCE_DATAPROC_ENDPOINT",
        check_identity=_dataproc_identity,
        failed_state="FAILED",
        lag=_get_lags(DATAPROC_GET),
    ),
    "vertex_pipeline_job": JobType(
        type="vertex_pipeline_job",
        route="pipeline",
        target={
            "type": "vertex_pipeline_job",
            "project": PROJECT,
            "location": LOCATION,
            "pipeline_job": {
                "displayName": "nightly-training",
                "templateUri": "https://us-central1-kfp.pkg.dev/p/repo/train/v1",
                "runtimeConfig": {"gcsOutputDirectory": "gs://out/", "parameterValues": {"threshold": 0.5}},
                "labels": {"team": "data"},
            },
            "run_parameters": {"run_id": "run", "schedule_time": "ds"},
        },
        make_fake=FakeAiPlatform,
        create=VERTEX_CREATE,
        lookup=VERTEX_GET,
        state_read=VERTEX_GET,
        endpoint_variable="RUNONCE_AIPLATFORM_ENDPOINT",
        check_identity=_vertex_identity,
        failed_state="PIPELINE_STATE_FAILED",
        lag=_get_lags(VERTEX_GET),
    ),
}


def run_id_of(route: str, schedule_time: str) -> str:
    """The run_id runonce derives for a Scheduler delivery of `route` at `schedule_time`."""
    canonical = f"runonce/v1|scheduler|{PROJECT}|{LOCATION}|{route}|nightly-job|{schedule_time}"
    return hashlib.sha256(canonical.encode()).hexdigest()


def routes(types: list[JobType]) -> dict[str, Any]:
    """Each type's route, and again as `ROUTE-skip` and `ROUTE-wait` (overlap)."""
    namespace = {"project": PROJECT, "location": LOCATION}
    found: dict[str, Any] = {}
    for kind in types:
        found[kind.route] = {"target": kind.target, "namespace": namespace}
        for policy in ("skip", "wait"):
            found[f"{kind.route}-{policy}"] = {"target": kind.target, "namespace": namespace, "overlap": policy}
    return {"routes": found}


def env(tmp: Path, metadata: FakeMetadataServer, fakes: dict[str, Any], db: str = "runonce.db") -> dict[str, str]:
    routes_file = tmp / "routes.json"
    routes_file.write_text(json.dumps(routes([TYPES[name] for name in fakes])))
    gcloud_config = tmp / "gcloud"
    gcloud_config.mkdir(exist_ok=True)
    return {
        **metadata.env(),
        "CLOUDSDK_CONFIG": str(gcloud_config),
        "RUNONCE_AUTH": "none",
        "RUNONCE_STORE": f"sqlite:///{tmp / db}",
        "RUNONCE_ROUTES_FILE": str(routes_file),
        "RUNONCE_LEASE_SECONDS": str(LEASE_SECONDS),
        "RUNONCE_DISPATCH_TIMEOUT_SECONDS": str(DISPATCH_TIMEOUT_SECONDS),
        "RUNONCE_STORE_TIMEOUT_SECONDS": "0.5",
        "RUNONCE_LOG_FORMAT": "json",
        **{TYPES[name].endpoint_variable: fake.url for name, fake in fakes.items()},
    }
