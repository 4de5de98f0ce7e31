"""`batch_job` target: one Cloud Batch job per run (Batch API v1 `projects.locations.jobs.create`, REST).

Batch takes a job id from the caller, unique in its project and location, so runonce picks it from
the run: `jobId` is `runonce-` + the run_id's first 55 hex characters (63 in all, Batch's limit).
It also sends `requestId`, a UUID derived from the run_id, which Batch dedupes a retried create on
for an hour. A retry after a lost answer creates the same id again: Batch answers with the job, or
409 ALREADY_EXISTS, and runonce reads the job (`jobs.get`) and completes the run with it.

Every task gets the run's identity in its environment, `RUNONCE_RUN_ID` and `RUNONCE_SCHEDULE_TIME`
(when the run has one), so the job's code can use `runonce-guard`; the job carries the label
`runonce-run-id`. A job whose `status.state` is QUEUED, SCHEDULED or RUNNING is running (overlap).
Answers: the engine's table (`engine.py`).
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


def _check_job(job: dict[str, Any]) -> None:
    """What the document cannot say of a Job: no environment setting the run's variables; and two
    rules its descriptions state across fields."""
    logs = job.get("logsPolicy") or {}
    if logs.get("destination") == "PATH" and not logs.get("logsPath"):
        # LogsPolicy.logsPath: "When `destination` is set to `PATH`, you must set this field"
        raise config_error("job.logsPolicy: destination PATH needs logsPath, the path the logs are written to")
    for index, group in enumerate(job["taskGroups"]):
        where = f"job.taskGroups[{index}]"
        if group.get("schedulingPolicy") == "IN_ORDER" and int(group.get("parallelism") or 1) != 1:
            # TaskGroup.parallelism: "Field parallelism must be 1 if the scheduling_policy is IN_ORDER."
            raise config_error(f"{where}.parallelism: must be 1 with schedulingPolicy IN_ORDER")
        spec = group["taskSpec"]
        environments = [(f"{where}.taskSpec.environment", spec.get("environment"))]
        environments += [
            (f"{where}.taskSpec.runnables[{i}].environment", runnable.get("environment"))
            for i, runnable in enumerate(spec["runnables"])
        ]
        environments += [(f"{where}.taskEnvironments[{i}]", e) for i, e in enumerate(group.get("taskEnvironments", []))]
        for place, environment in environments:
            for kind in ("variables", "secretVariables"):
                for name in RUN_ENV:
                    if name in ((environment or {}).get(kind) or {}):
                        raise config_error(f"{place}.{kind}: {name} is set by runonce")
        for name in RUN_ENV:  # the deprecated map of the task's environment: a plain name -> value
            if name in (spec.get("environments") or {}):
                raise config_error(f"{where}.taskSpec.environments: {name} is set by runonce")


class BatchJobTargetConfig(ParentConfig):
    type: Literal["batch_job"]
    job: dict[str, Any] = Field(description="A Batch Job, as jobs.create takes it (taskGroups, allocationPolicy, …).")

    @model_validator(mode="after")
    def _against_the_api(self) -> BatchJobTargetConfig:
        check_preset(BatchJobTarget, self, {"name": "runonce names the job from the run (jobId)"}, "labels", _check_job)
        return self


class BatchJobTarget(RunNamedPreset[BatchJobTargetConfig]):
    type = "batch_job"
    API = "batch.v1"
    NOUN = "Batch job"
    COLLECTION = "jobs"
    ID_PARAM = "jobId"
    REQUEST_ID = True
    RUNNING = Running("status.state", running=frozenset({"QUEUED", "SCHEDULED", "RUNNING"}))
    BODY_FIELD = ("", "job")
    BODY_SCHEMA = "Job"

    def body(self, request: DispatchRequest) -> dict[str, Any]:
        """The route's Job with the label, and the run's identity in every task's environment."""
        job = copy.deepcopy(self.config.job)
        job["labels"] = with_label(job.get("labels"), request.run_id)
        identity = run_env(request)
        for group in job["taskGroups"]:  # a null in them is refused at start-up (presets.check_preset)
            environment = group["taskSpec"].setdefault("environment", {})
            environment["variables"] = {**environment.get("variables", {}), **identity}
            for per_task in group.get("taskEnvironments", []):
                per_task["variables"] = {**per_task.get("variables", {}), **identity}
        return job


TARGET = preset_type(
    BatchJobTargetConfig,
    BatchJobTarget,
    "batch",
    # jobs.create and jobs.get in the project (Batch has no per-job IAM before the job exists).
    Grant("roles/batch.jobsEditor", on="project"),
    # The job's VMs run as its service account: creating the job needs actAs on it.
    act_as("job.allocationPolicy.serviceAccount.email"),
)
