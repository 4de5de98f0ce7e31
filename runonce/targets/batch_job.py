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

from pydantic import Field, field_validator, model_validator

from runonce.targets.base import DispatchRequest
from runonce.targets.engine import Running
from runonce.targets.presets import (
    RUN_ID_ENV,
    SCHEDULE_TIME_ENV,
    ParentConfig,
    RunNamedPreset,
    check_route,
    check_route_labels,
    config_error,
    mapping_at,
    refuse_fields,
    run_values,
    with_label,
)
from runonce.targets.registry import Grant, TargetType

RESERVED_ENV = (RUN_ID_ENV, SCHEDULE_TIME_ENV)


def _check_environment(environment: Any, where: str) -> None:
    """An `Environment` the route gives: a mapping, not setting the run's variables."""
    if environment is None:
        return
    if not isinstance(environment, dict):
        raise config_error(f"{where} must be a mapping")
    for kind in ("variables", "secretVariables"):
        variables = environment.get(kind) or {}
        if not isinstance(variables, dict):
            raise config_error(f"{where}.{kind} must be a mapping")
        for name in RESERVED_ENV:
            if name in variables:
                raise config_error(f"{where}.{kind}: {name} is set by runonce")


def _check_task_group(group: Any, where: str) -> None:
    if not isinstance(group, dict):
        raise config_error(f"{where} must be a mapping")
    spec = group.get("taskSpec")
    if not isinstance(spec, dict):
        raise config_error(f"{where}.taskSpec must be a mapping (a TaskSpec with its runnables)")
    runnables = spec.get("runnables")
    if not isinstance(runnables, list) or not runnables or not all(isinstance(r, dict) for r in runnables):
        raise config_error(f"{where}.taskSpec.runnables must be a non-empty list of runnables")
    _check_environment(spec.get("environment"), f"{where}.taskSpec.environment")
    for index, runnable in enumerate(runnables):
        _check_environment(runnable.get("environment"), f"{where}.taskSpec.runnables[{index}].environment")
    environments = group.get("taskEnvironments") or []
    if not isinstance(environments, list):
        raise config_error(f"{where}.taskEnvironments must be a list")
    for index, environment in enumerate(environments):
        _check_environment(environment, f"{where}.taskEnvironments[{index}]")


class BatchJobTargetConfig(ParentConfig):
    type: Literal["batch_job"]
    job: dict[str, Any] = Field(description="A Batch Job, as jobs.create takes it (taskGroups, allocationPolicy, …).")

    @field_validator("job")
    @classmethod
    def _job(cls, value: dict[str, Any]) -> dict[str, Any]:
        refuse_fields(value, {"name": "runonce names the job from the run (jobId)"}, "job")
        groups = value.get("taskGroups")
        if not isinstance(groups, list) or not groups:
            raise config_error("job.taskGroups must be a non-empty list of task groups")
        for index, group in enumerate(groups):
            _check_task_group(group, f"job.taskGroups[{index}]")
        mapping_at(value, "allocationPolicy", "job")
        check_route_labels(value, "labels", "job")
        return value

    @model_validator(mode="after")
    def _against_the_api(self) -> BatchJobTargetConfig:
        check_route(BatchJobTarget, self)
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

    def body(self, request: DispatchRequest) -> dict[str, Any]:
        """The route's Job with the label, and the run's identity in every task's environment."""
        job = copy.deepcopy(self.config.job)
        job["labels"] = with_label(job.get("labels"), request.run_id)
        identity = {f"RUNONCE_{field.upper()}": value for field, value in run_values(request).items()}
        for group in job["taskGroups"]:  # a null in them is refused at start-up (presets.refuse_nulls)
            environment = group["taskSpec"].setdefault("environment", {})
            environment["variables"] = {**environment.get("variables", {}), **identity}
            for per_task in group.get("taskEnvironments", []):
                per_task["variables"] = {**per_task.get("variables", {}), **identity}
        return job


TARGET = TargetType(
    name="batch_job",
    config=BatchJobTargetConfig,
    adapter=BatchJobTarget,
    build=BatchJobTarget.build,
    endpoint="batch",
    resource_field="project",
    grants=(
        # jobs.create and jobs.get in the project (Batch has no per-job IAM before the job exists).
        Grant("roles/batch.jobsEditor", on="project"),
        # The job's VMs run as its service account: creating the job needs actAs on it.
        Grant("roles/iam.serviceAccountUser", on="service-account", field="job.allocationPolicy.serviceAccount.email"),
    ),
    takes_payload=False,  # its workload is the route's: no delivery body
    event_payload="none",
)
