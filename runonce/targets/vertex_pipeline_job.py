"""`vertex_pipeline_job` target: one Vertex AI pipeline run per run (Vertex AI API v1
`projects.locations.pipelineJobs.create`, REST).

Vertex AI takes the pipeline job's id from the caller: `pipelineJobId` is `runonce-` + the run_id
(72 characters; Vertex takes fewer than 128 of a-z 0-9 -, starting with a letter). A retry after a
lost answer creates the same id again: Vertex answers 409 ALREADY_EXISTS, and runonce reads the job
(`pipelineJobs.get`) and completes the run with it. The job carries the label `runonce-run-id`.

The pipeline gets the run's identity as runtime parameters where the route maps them
(`run_parameters: {run_id: PARAM, schedule_time: PARAM}`, or `[run_id, schedule_time]` for
parameters of those names), in `runtimeConfig.parameterValues`. A job in PIPELINE_STATE_QUEUED,
_PENDING or _RUNNING is running (overlap). Answers: the engine's table (`engine.py`).
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import Field, model_validator

from runonce.targets.base import DispatchRequest, config_error
from runonce.targets.engine import Running
from runonce.targets.presets import (
    ParentConfig,
    RunNamedPreset,
    RunParameters,
    act_as,
    check_preset,
    mapped_parameters,
    preset_type,
    refuse_mapped_parameters,
    with_label,
)
from runonce.targets.registry import Grant

MAX_ID_LENGTH = 127


class VertexPipelineJobTargetConfig(ParentConfig):
    type: Literal["vertex_pipeline_job"]
    pipeline_job: dict[str, Any] = Field(
        description="A Vertex AI PipelineJob, as pipelineJobs.create takes it (pipelineSpec or templateUri, …)."
    )
    run_parameters: RunParameters = Field(
        default_factory=dict,
        description="Which pipeline parameters receive the run's identity: {run_id: PARAM, schedule_time: PARAM}.",
    )

    @model_validator(mode="after")
    def _against_the_api(self) -> VertexPipelineJobTargetConfig:
        why = {"name": "runonce names the pipeline job from the run (pipelineJobId)"}
        check_preset(VertexPipelineJobTarget, self, why, "labels", self._check_job)
        return self

    def _check_job(self, job: dict[str, Any]) -> None:
        if not job.get("pipelineSpec") and not job.get("templateUri"):
            raise config_error("pipeline_job needs pipelineSpec (a compiled pipeline) or templateUri")
        runtime = job.get("runtimeConfig") or {}
        for field in ("parameterValues", "parameters"):  # `parameters`: the deprecated form of the same
            given = runtime.get(field) or {}
            refuse_mapped_parameters(self.run_parameters, given, f"pipeline_job.runtimeConfig.{field}")


class VertexPipelineJobTarget(RunNamedPreset[VertexPipelineJobTargetConfig]):
    type = "vertex_pipeline_job"
    API = "aiplatform.v1"
    NOUN = "Vertex AI pipeline job"
    COLLECTION = "pipelineJobs"
    ID_PARAM = "pipelineJobId"
    MAX_ID_LENGTH = MAX_ID_LENGTH
    RUNNING = Running(
        "state", running=frozenset({"PIPELINE_STATE_QUEUED", "PIPELINE_STATE_PENDING", "PIPELINE_STATE_RUNNING"})
    )
    BODY_FIELD = ("", "pipeline_job")
    BODY_SCHEMA = "GoogleCloudAiplatformV1PipelineJob"
    REGIONAL_ENDPOINT = "https://{location}-aiplatform.googleapis.com"

    def body(self, request: DispatchRequest) -> dict[str, Any]:
        """The route's PipelineJob with the label, and the run's identity in the mapped parameters."""
        job = copy.deepcopy(self.config.pipeline_job)
        job["labels"] = with_label(job.get("labels"), request.run_id)
        mapped = mapped_parameters(self.config.run_parameters, request)
        if mapped:
            runtime = job["runtimeConfig"] = job.get("runtimeConfig") or {}
            runtime["parameterValues"] = {**(runtime.get("parameterValues") or {}), **mapped}
        return job


TARGET = preset_type(
    VertexPipelineJobTargetConfig,
    VertexPipelineJobTarget,
    "aiplatform",
    # pipelineJobs.create and .get in the project.
    Grant("roles/aiplatform.user", on="project"),
    # The pipeline runs as its service account: creating it needs actAs on it.
    act_as("pipeline_job.serviceAccount"),
)
