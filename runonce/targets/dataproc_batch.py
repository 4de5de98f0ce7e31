"""`dataproc_batch` target: one Dataproc Serverless batch per run (Dataproc API v1
`projects.locations.batches.create`, REST).

Dataproc takes the batch's id from the caller: `batchId` is `runonce-` + the run_id's first 55 hex
characters (63 in all: Dataproc takes 4-63 characters of a-z 0-9 -). It also sends `requestId`, a
UUID derived from the run_id (36 characters; Dataproc takes at most 40), on which Dataproc answers a
repeated create with the first one's operation. A retry after a lost answer creates the same id
again: Dataproc answers 409 ALREADY_EXISTS (or the first operation), and runonce reads the batch
(`batches.get`) and completes the run with it. The answer is a long-running operation; runonce never
waits for it: the batch's name is known from its id.

The workload gets the run's identity as Spark properties that set environment variables in the
driver and the executors (`spark.dataproc.driverEnv.RUNONCE_RUN_ID`,
`spark.executorEnv.RUNONCE_RUN_ID`, and the same for `RUNONCE_SCHEDULE_TIME`), and the batch carries
the label `runonce-run-id`. A batch in PENDING or RUNNING is running (overlap). Answers: the
engine's table (`engine.py`).
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import Field, model_validator

from runonce.targets.base import DispatchRequest, config_error
from runonce.targets.engine import Running
from runonce.targets.presets import (
    RUN_ENV,
    ParentConfig,
    RunNamedPreset,
    act_as,
    check_preset,
    preset_type,
    run_env,
    with_label,
)
from runonce.targets.registry import Grant

WORKLOADS = ("pysparkBatch", "sparkBatch", "sparkRBatch", "sparkSqlBatch", "pysparkNotebookBatch")
ENV_PROPERTY_PREFIXES = ("spark.dataproc.driverEnv.", "spark.executorEnv.")


def identity_properties(request: DispatchRequest) -> dict[str, str]:
    """The Spark properties that put the run's identity in the driver's and executors' environment."""
    return {f"{prefix}{name}": value for prefix in ENV_PROPERTY_PREFIXES for name, value in run_env(request).items()}


def _check_batch(batch: dict[str, Any]) -> None:
    """What the document cannot say of a Batch: a workload (its oneof keeps it to one), no session's
    setting, and no property setting the run's variables."""
    if not any(kind in batch for kind in WORKLOADS):
        raise config_error(f"batch must hold exactly one workload of {', '.join(WORKLOADS)} (got none)")
    if ((batch.get("environmentConfig") or {}).get("executionConfig") or {}).get("idleTtl") is not None:
        # ExecutionConfig.idleTtl: "Applies to sessions only. … This field cannot be set on a batch workload."
        raise config_error("batch.environmentConfig.executionConfig.idleTtl: applies to sessions only, not to a batch")
    for key in (batch.get("runtimeConfig") or {}).get("properties") or {}:
        if key.startswith(ENV_PROPERTY_PREFIXES) and key.rsplit(".", 1)[1] in RUN_ENV:
            raise config_error(f"batch.runtimeConfig.properties: {key} is set by runonce")


class DataprocBatchTargetConfig(ParentConfig):
    type: Literal["dataproc_batch"]
    batch: dict[str, Any] = Field(
        description="A Dataproc Batch, as batches.create takes it: one workload (pysparkBatch, sparkBatch, …)."
    )

    @model_validator(mode="after")
    def _against_the_api(self) -> DataprocBatchTargetConfig:
        why = {"name": "runonce names the batch from the run (batchId)"}
        check_preset(DataprocBatchTarget, self, why, "labels", _check_batch)
        return self


class DataprocBatchTarget(RunNamedPreset[DataprocBatchTargetConfig]):
    type = "dataproc_batch"
    API = "dataproc.v1"
    NOUN = "Dataproc batch"
    COLLECTION = "batches"
    ID_PARAM = "batchId"
    REQUEST_ID = True
    RUNNING = Running("state", running=frozenset({"PENDING", "RUNNING"}))
    BODY_FIELD = ("", "batch")
    BODY_SCHEMA = "Batch"
    REGIONAL_ENDPOINT = "https://{location}-dataproc.googleapis.com"  # batches live in a region

    def body(self, request: DispatchRequest) -> dict[str, Any]:
        """The route's Batch with the label, and the run's identity in the Spark properties."""
        batch = copy.deepcopy(self.config.batch)
        batch["labels"] = with_label(batch.get("labels"), request.run_id)
        runtime = batch["runtimeConfig"] = batch.get("runtimeConfig") or {}
        runtime["properties"] = {**(runtime.get("properties") or {}), **identity_properties(request)}
        return batch


TARGET = preset_type(
    DataprocBatchTargetConfig,
    DataprocBatchTarget,
    "dataproc",
    # batches.create and batches.get in the project (no per-batch IAM before the batch exists);
    # roles/dataproc.editor would also manage clusters and jobs.
    Grant("runonceDataprocBatchRunner", on="project", permissions=("dataproc.batches.create", "dataproc.batches.get")),
    # The batch runs as its execution service account: creating it needs actAs on it.
    act_as("batch.environmentConfig.executionConfig.serviceAccount"),
)
