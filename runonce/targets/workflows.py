"""`workflows` target: one Workflows execution per run (Workflow Executions API v1
`projects.locations.workflows.executions.create`, REST).

The token travels twice: in full as `argument[key_field]`, and as the execution label
`runonce-run-id`, which reconciliation lists by. Label values hold at most 63 characters, so the
label carries the first 63 of the run_id's 64 hex characters (`run_id_label`); a match on the label
is confirmed against the full run_id in the argument.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from runonce.targets.base import (
    DispatchRequest,
    PayloadNotSendable,
    TargetConfigModel,
    TargetFailed,
    config_error,
    encode_json,
)
from runonce.targets.engine import Call, GoogleEngineTarget, Listing, Running
from runonce.targets.google import RUN_ID_LABEL, resource_name_problem, run_id_label
from runonce.targets.google_api_discovery import json_problem
from runonce.targets.presets import check_route
from runonce.targets.registry import Grant, TargetType

FINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
MAX_ARGUMENT_BYTES = 32 * 1024  # the API's limit on `argument`
WORKFLOW_ID = r"[A-Za-z](?:[A-Za-z0-9_-]{0,62}[A-Za-z0-9])?"
ARGUMENT_KEY_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*"


class WorkflowsTargetConfig(TargetConfigModel):
    type: Literal["workflows"]
    workflow: str = Field(description="projects/PROJECT/locations/LOCATION/workflows/WORKFLOW")
    argument: dict[str, Any] = Field(default_factory=dict, description="Merged under the delivery's payload.")
    key_field: str = Field("idempotency_key", description="Argument field that receives the run_id.")
    labels: dict[str, str] = Field(default_factory=dict, description="Extra execution labels.")
    call_log_level: Literal["CALL_LOG_LEVEL_UNSPECIFIED", "LOG_ALL_CALLS", "LOG_ERRORS_ONLY", "LOG_NONE"] | None = (
        Field(None, description="The execution's call logging; CALL_LOG_LEVEL_UNSPECIFIED or none: the workflow's own.")
    )

    @field_validator("workflow")
    @classmethod
    def _workflow(cls, value: str) -> str:
        problem = resource_name_problem(
            value,
            "workflows",
            WORKFLOW_ID,
            "workflow ID must be 1-64 characters of A-Z a-z 0-9 _ -, starting with a letter, ending with a letter "
            "or digit",
            regional="workflows",
        )
        if problem:
            raise config_error(problem)
        return value

    @field_validator("argument")
    @classmethod
    def _argument(cls, argument: dict[str, Any]) -> dict[str, Any]:
        """The argument travels as JSON text: a value JSON cannot hold is refused here, not on every run."""
        problem = json_problem(argument, "argument")
        if problem:
            raise config_error(problem)
        try:
            encode_json(argument)
        except PayloadNotSendable as exc:
            raise config_error(exc.message.replace("the payload", "the argument")) from None
        return argument

    @field_validator("key_field")
    @classmethod
    def _key_field(cls, value: str) -> str:
        if not re.fullmatch(ARGUMENT_KEY_PATTERN, value) or value == "runonce":
            raise config_error(f"must be an identifier ([A-Za-z_][A-Za-z0-9_]*) other than 'runonce' (got {value!r})")
        return value

    @model_validator(mode="after")
    def _against_the_api(self) -> WorkflowsTargetConfig:
        for key, holds in ((self.key_field, "the run_id"), ("runonce", "the run's job, schedule_time and source")):
            if key in self.argument:
                raise config_error(f"argument: {key!r} is set by runonce ({holds})")
        if RUN_ID_LABEL in self.labels:
            raise config_error(f"labels: label {RUN_ID_LABEL!r} is set by runonce itself")
        check_route(WorkflowsTarget, self)
        return self


class WorkflowsTarget(GoogleEngineTarget[WorkflowsTargetConfig]):
    type = "workflows"
    API = "workflowexecutions.v1"
    NOUN = "execution"
    TAKES_PAYLOAD = True  # the delivery's body is merged into the argument
    BODY_FIELD = ("labels", "labels")
    RUNNING = Running("state", running=frozenset({"ACTIVE", "QUEUED"}), final=FINAL_STATES)
    """ACTIVE or QUEUED (in the backlog) runs; SUCCEEDED, FAILED or CANCELLED does not; UNAVAILABLE
    ("execution data is unavailable") cannot tell."""

    def argument(self, request: DispatchRequest) -> dict[str, Any]:
        """Route argument, then the delivery payload over it, then the token and run identity."""
        return {
            **self.config.argument,
            **request.payload,
            self.config.key_field: request.run_id,
            "runonce": request.runonce_fields(),
        }

    def describe(self, request: DispatchRequest) -> str:
        return f"create an execution of {self.config.workflow}"

    def describe_lookup(self, request: DispatchRequest) -> str:
        label = run_id_label(request.run_id)
        return f"list executions of {self.config.workflow} labelled {RUN_ID_LABEL}={label}"

    def create_call(self, request: DispatchRequest) -> Call:
        argument = json.dumps(self.argument(request), separators=(",", ":"), ensure_ascii=False)
        if len(argument.encode("utf-8")) > MAX_ARGUMENT_BYTES:
            raise TargetFailed(f"{self.describe(request)}: the argument is over the API's {MAX_ARGUMENT_BYTES} bytes")
        execution: dict[str, Any] = {
            "argument": argument,
            "labels": {**self.config.labels, RUN_ID_LABEL: run_id_label(request.run_id)},
        }
        if self.config.call_log_level:
            execution["callLogLevel"] = self.config.call_log_level
        return Call("projects.locations.workflows.executions.create", {"parent": self.config.workflow}, execution)

    def list_call(self, request: DispatchRequest) -> Listing:
        """The workflow's executions labelled with the run (labels and argument come only with FULL)."""
        params = {
            "parent": self.config.workflow,
            "view": "FULL",
            "filter": f'labels.{RUN_ID_LABEL}="{run_id_label(request.run_id)}"',
            "pageSize": 100,
        }
        return Listing(Call("projects.locations.workflows.executions.list", params), items="executions")

    def matches(self, item: dict[str, Any], request: DispatchRequest) -> str | None:
        """The label carries 63 of the run_id's 64 characters: confirmed on the argument."""
        labelled = (item.get("labels") or {}).get(RUN_ID_LABEL) == run_id_label(request.run_id)
        if labelled and self._carries(str(item.get("argument") or ""), request.run_id) and item.get("name"):
            return str(item["name"])
        return None

    def state_call(self, resource: str) -> Call:
        return Call("projects.locations.workflows.executions.get", {"name": resource})

    def _carries(self, argument: str, run_id: str) -> bool:
        """Does this execution's argument carry `run_id` (or no token at all, only the label)?"""
        try:
            data = json.loads(argument or "{}")
        except ValueError:
            return True
        return not isinstance(data, dict) or data.get(self.config.key_field, run_id) == run_id


TARGET = TargetType(
    name="workflows",
    config=WorkflowsTargetConfig,
    adapter=WorkflowsTarget,
    build=WorkflowsTarget.build,
    endpoint="workflows",
    resource_field="workflow",
    grants=(Grant("roles/workflows.invoker", on="project"),),  # Workflows has no per-workflow IAM
)
