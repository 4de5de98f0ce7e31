"""`cloud_run_job` target: one Cloud Run job execution per run (Cloud Run Admin API v2, REST).

`jobs.run` with a container override: env `env_var` = run_id (plus `RUNONCE_JOB`,
`RUNONCE_SCHEDULE_TIME` or `RUNONCE_TASK`, `RUNONCE_SOURCE`, and `RUNONCE_PAYLOAD` when the delivery
had a body). The answer is a long-running operation whose metadata is the new Execution: its name
is the resource, known at once; runonce never waits for the operation.

Executions cannot carry per-run labels, so reconciliation lists the job's executions (newest first)
back to when the run was first claimed and matches the env override.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from runonce.targets.base import DispatchRequest, TargetConfigModel, TargetFailed, TargetOutcomeUnknown, config_error
from runonce.targets.engine import Call, GoogleEngineTarget, Listing, operation_result
from runonce.targets.google import resource_name_problem, resource_pattern
from runonce.targets.presets import check_route, run_fields
from runonce.targets.registry import Grant, TargetType

JOB_ID = r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?"
JOB_PATTERN = resource_pattern("jobs", JOB_ID)
EXECUTION_PATTERN = JOB_PATTERN.removesuffix("$") + r"/executions/[a-z0-9-]{1,63}$"
ENV_NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*"
RESERVED_ENV = {
    "CLOUD_RUN_JOB",
    "CLOUD_RUN_EXECUTION",
    "CLOUD_RUN_TASK_INDEX",
    "CLOUD_RUN_TASK_ATTEMPT",
    "CLOUD_RUN_TASK_COUNT",
}
MAX_ENV_VALUE_BYTES = 32768
MAX_TASK_TIMEOUT_SECONDS = 168 * 3600
"""Cloud Run's longest task timeout: "up to 168 hours (7 days)" (1 hour with GPUs, which the route cannot see)."""


class CloudRunJobTargetConfig(TargetConfigModel):
    type: Literal["cloud_run_job"]
    job: str = Field(description="projects/PROJECT/locations/LOCATION/jobs/JOB")
    env_var: str = Field("IDEMPOTENCY_KEY", description="Env var that receives the run_id.")
    args: list[str] | None = Field(None, description="Replace the container's args.")
    task_count: int | None = Field(None, ge=1, le=10000, strict=True)  # strict: `true` is not a count
    timeout: str | None = Field(None, description="Task timeout, e.g. '600s'.")
    container: str | None = Field(None, description="Container to override (multi-container jobs).")

    @field_validator("job")
    @classmethod
    def _job(cls, value: str) -> str:
        problem = resource_name_problem(
            value,
            "jobs",
            JOB_ID,
            "job ID must be 1-63 characters of a-z 0-9 -, starting with a letter, not ending with -",
            regional="Cloud Run jobs",
        )
        if problem:  # names the part at fault: the project, the location or the job
            raise config_error(problem)
        return value

    @field_validator("env_var")
    @classmethod
    def _env_var(cls, value: str) -> str:
        if not re.fullmatch(ENV_NAME_PATTERN, value) or value in RESERVED_ENV or value.startswith("RUNONCE_"):
            raise config_error(
                "must be an env var name ([A-Za-z_][A-Za-z0-9_]*), not reserved by Cloud Run or runonce "
                f"(CLOUD_RUN_*, RUNONCE_*) (got {value!r})"
            )
        return value

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9]{1,6}(\.[0-9]{1,9})?s", value):
            raise config_error(f"must be a duration in seconds like '600s' (got {value!r})")
        if value is not None and float(value[:-1]) > MAX_TASK_TIMEOUT_SECONDS:
            raise config_error(
                f"{value} is longer than a Cloud Run task may run: at most {MAX_TASK_TIMEOUT_SECONDS}s (168 hours)"
            )
        return value

    @field_validator("container")
    @classmethod
    def _container(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?", value):
            raise config_error(f"must be a container name (a DNS label: a-z 0-9 -) (got {value!r})")
        return value

    @model_validator(mode="after")
    def _against_the_api(self) -> CloudRunJobTargetConfig:
        check_route(CloudRunJobTarget, self)
        return self


class CloudRunJobTarget(GoogleEngineTarget[CloudRunJobTargetConfig]):
    type = "cloud_run_job"
    API = "run.v2"
    NOUN = "execution"
    TAKES_PAYLOAD = True  # the delivery's body travels as RUNONCE_PAYLOAD

    def env(self, request: DispatchRequest) -> list[dict[str, str]]:
        env = {self.config.env_var: request.run_id, **run_fields(request, "RUNONCE_")}
        if request.payload:
            env["RUNONCE_PAYLOAD"] = json.dumps(request.payload, separators=(",", ":"), ensure_ascii=False)
        return [{"name": name, "value": value} for name, value in env.items()]

    def run_request(self, request: DispatchRequest) -> dict[str, Any]:
        """The `GoogleCloudRunV2RunJobRequest` body."""
        container: dict[str, Any] = {"env": self.env(request)}
        if self.config.container:
            container["name"] = self.config.container
        if self.config.args is not None:
            container["args"] = list(self.config.args)
            if not self.config.args:
                container["clearArgs"] = True
        overrides: dict[str, Any] = {"containerOverrides": [container]}
        if self.config.task_count is not None:
            overrides["taskCount"] = self.config.task_count
        if self.config.timeout is not None:
            overrides["timeout"] = self.config.timeout
        return {"overrides": overrides}

    def describe(self, request: DispatchRequest) -> str:
        return f"run {self.config.job}"

    def describe_lookup(self, request: DispatchRequest) -> str:
        return f"list executions of {self.config.job}"

    def create_call(self, request: DispatchRequest) -> Call:
        body = self.run_request(request)
        for var in body["overrides"]["containerOverrides"][0]["env"]:
            if len(var["value"].encode("utf-8")) > MAX_ENV_VALUE_BYTES:
                raise TargetFailed(
                    f"{self.describe(request)}: env {var['name']} is over Cloud Run's {MAX_ENV_VALUE_BYTES} bytes"
                )
        return Call("projects.locations.jobs.run", {"name": self.config.job}, body)

    def created(self, answer: dict[str, Any], request: DispatchRequest) -> str:
        """The new Execution named in the operation's metadata (runonce never waits for it)."""
        return operation_result(answer, (answer.get("metadata") or {}).get("name"), self.describe(request))

    def list_call(self, request: DispatchRequest) -> Listing:
        """The job's executions, newest first, back to the run's first claim (they carry no labels)."""
        call = Call("projects.locations.jobs.executions.list", {"parent": self.config.job, "pageSize": 100})
        return Listing(call, items="executions", since=request.created_at)

    def matches(self, item: dict[str, Any], request: DispatchRequest) -> str | None:
        containers = (item.get("template") or {}).get("containers") or []
        carries = any(
            var.get("name") == self.config.env_var and var.get("value") == request.run_id
            for container in containers
            for var in container.get("env") or []
        )
        return str(item["name"]) if carries and item.get("name") else None

    def state_call(self, resource: str) -> Call:
        if not re.fullmatch(EXECUTION_PATTERN, resource):
            raise TargetOutcomeUnknown(f"{resource} is not an execution's name")
        return Call("projects.locations.jobs.executions.get", {"name": resource})

    async def is_running(self, resource: str) -> bool:
        """`executions.get`: an execution without `completionTime`, or with tasks still running
        (`runningCount`), runs; one that no longer exists does not."""
        execution = await self.read_state(resource)
        if execution is None:
            return False
        return not execution.get("completionTime") or int(execution.get("runningCount") or 0) > 0


TARGET = TargetType(
    name="cloud_run_job",
    config=CloudRunJobTargetConfig,
    adapter=CloudRunJobTarget,
    build=CloudRunJobTarget.build,
    endpoint="run",
    resource_field="job",
    grants=(
        Grant("roles/run.jobsExecutorWithOverrides", on="run-job"),
        # roles/run.jobsExecutorWithOverrides cannot read executions; roles/run.viewer reads far more.
        Grant("runonceExecutionReader", on="run-job", permissions=("run.executions.get", "run.executions.list")),
    ),
)
