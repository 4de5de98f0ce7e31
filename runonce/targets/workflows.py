"""`workflows` target: one Workflows execution per run (Workflows Executions API, gRPC).

The token travels twice: in full as `argument[key_field]`, and as the execution label
`runonce-run-id`, which reconciliation lists by. Label values hold at most 63 characters, so the
label carries the first 63 of the run_id's 64 hex characters (`run_id_label`); a match on the label
is confirmed against the full run_id in the argument.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from runonce.targets.base import DispatchRequest, Target, TargetFailed, TargetOutcomeUnknown
from runonce.targets.engine import reading, reconciling, translated
from runonce.targets.google import (
    RUN_ID_LABEL,
    GoogleAuth,
    check_labels,
    grpc_target,
    resource_name_problem,
    run_id_label,
)
from runonce.targets.registry import Grant, TargetType

logger = logging.getLogger("runonce.target.workflows")

DEFAULT_HOST = "workflowexecutions.googleapis.com"
MAX_ARGUMENT_BYTES = 32 * 1024  # the API's limit on `argument`
MAX_LABELS = 64
WORKFLOW_ID = r"[A-Za-z][A-Za-z0-9_-]{0,63}"
ARGUMENT_KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


class WorkflowsTargetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["workflows"]
    workflow: str = Field(description="projects/PROJECT/locations/LOCATION/workflows/WORKFLOW")
    argument: dict[str, Any] = Field(default_factory=dict, description="Merged under the delivery's payload.")
    key_field: str = Field("idempotency_key", description="Argument field that receives the run_id.")
    labels: dict[str, str] = Field(default_factory=dict, description="Extra execution labels.")
    call_log_level: Literal["LOG_ALL_CALLS", "LOG_ERRORS_ONLY", "LOG_NONE"] | None = None

    @field_validator("workflow")
    @classmethod
    def _workflow(cls, value: str) -> str:
        problem = resource_name_problem(
            value,
            "workflows",
            WORKFLOW_ID,
            "workflow ID must be 1-64 characters of A-Z a-z 0-9 _ -, starting with a letter",
        )
        if problem:
            raise PydanticCustomError("resource_name", "{problem}", {"problem": problem})
        return value

    @field_validator("key_field")
    @classmethod
    def _key_field(cls, value: str) -> str:
        if not re.match(ARGUMENT_KEY_PATTERN, value) or value == "runonce":
            raise PydanticCustomError(
                "key_field",
                "must be an identifier ([A-Za-z_][A-Za-z0-9_]*) other than 'runonce' (got {value})",
                {"value": repr(value)},
            )
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        return check_labels(labels, MAX_LABELS)


class WorkflowsTarget(Target):
    type = "workflows"

    def __init__(self, config: WorkflowsTargetConfig, auth: GoogleAuth, endpoint: str | None = None):
        # The gRPC client loads with a workflows route only: tests/test_cold_start.py checks that a
        # start without one imports neither grpc nor google.cloud.workflows.
        import grpc  # deferred (cold start)
        from google.cloud.workflows.executions_v1 import ExecutionsAsyncClient  # deferred (cold start)
        from google.cloud.workflows.executions_v1.services.executions.transports import (  # deferred (cold start)
            ExecutionsGrpcAsyncIOTransport,
        )

        self.config = config
        self._auth = auth
        target, secure = grpc_target(endpoint, DEFAULT_HOST)
        # The channel carries no call credentials: each call sends the shared ADC token itself
        # (`_metadata`), which also works over the plaintext channel of a local endpoint.
        if secure:
            self._channel = grpc.aio.secure_channel(target, grpc.ssl_channel_credentials())
        else:
            self._channel = grpc.aio.insecure_channel(target)
        self._client = ExecutionsAsyncClient(transport=ExecutionsGrpcAsyncIOTransport(channel=self._channel))

    async def _metadata(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {await self._auth.access_token()}")]

    def argument(self, request: DispatchRequest) -> dict[str, Any]:
        """Route argument, then the delivery payload over it, then the token and run identity."""
        return {
            **self.config.argument,
            **request.payload,
            self.config.key_field: request.run_id,
            "runonce": request.runonce_fields(),
        }

    async def dispatch(self, request: DispatchRequest) -> str:
        from google.cloud.workflows.executions_v1.types import Execution  # deferred (cold start)

        action = f"create an execution of {self.config.workflow}"
        argument = json.dumps(self.argument(request), separators=(",", ":"), ensure_ascii=False)
        if len(argument.encode("utf-8")) > MAX_ARGUMENT_BYTES:
            raise TargetFailed(f"{action}: the argument is over the API's {MAX_ARGUMENT_BYTES} bytes")
        execution = Execution(
            argument=argument,
            labels={**self.config.labels, RUN_ID_LABEL: run_id_label(request.run_id)},
        )
        if self.config.call_log_level:
            # proto-plus enums are IntEnums at run time; the stubs do not show their metaclass's __getitem__
            execution.call_log_level = Execution.CallLogLevel[self.config.call_log_level]  # type: ignore[misc]  # see above
        with translated(action):
            created = await self._client.create_execution(
                parent=self.config.workflow, execution=execution, metadata=await self._metadata(), retry=None
            )
        return created.name

    async def reconcile(self, request: DispatchRequest) -> str | None:
        from google.cloud.workflows.executions_v1.types import (  # deferred (cold start)
            ExecutionView,
            ListExecutionsRequest,
        )

        label = run_id_label(request.run_id)
        found: list[str] = []
        with reconciling(f"list executions of {self.config.workflow} labelled {RUN_ID_LABEL}={label}"):
            pager = await self._client.list_executions(
                request=ListExecutionsRequest(
                    parent=self.config.workflow,
                    view=ExecutionView.FULL,  # labels and argument come only with FULL
                    filter=f'labels.{RUN_ID_LABEL}="{label}"',
                    page_size=100,
                ),
                metadata=await self._metadata(),
            )
            async for execution in pager:
                if execution.labels.get(RUN_ID_LABEL) == label and self._carries(execution.argument, request.run_id):
                    found.append(execution.name)
        if len(found) > 1:
            logger.warning("run %s has %d executions: %s", request.run_id, len(found), ", ".join(found))
        return found[-1] if found else None  # newest first: the last is the earliest

    async def is_running(self, resource: str) -> bool:
        """`executions.get`: ACTIVE or QUEUED (in the backlog) runs; SUCCEEDED, FAILED, CANCELLED
        or gone does not; UNAVAILABLE ("execution data is unavailable") cannot tell."""
        from google.api_core.exceptions import NotFound  # deferred (cold start)
        from google.cloud.workflows.executions_v1.types import Execution  # deferred (cold start)

        states = Execution.State
        with reading(f"get {resource}", f"cannot read the state of {resource}"):
            try:
                execution = await self._client.get_execution(name=resource, metadata=await self._metadata(), retry=None)
            except NotFound:
                return False
        if execution.state in (states.ACTIVE, states.QUEUED):
            return True
        if execution.state in (states.SUCCEEDED, states.FAILED, states.CANCELLED):
            return False
        raise TargetOutcomeUnknown(f"get {resource}: state {execution.state.name}")

    def _carries(self, argument: str, run_id: str) -> bool:
        """Does this execution's argument carry `run_id` (or no token at all, only the label)?"""
        try:
            data = json.loads(argument or "{}")
        except ValueError:
            return True
        return not isinstance(data, dict) or data.get(self.config.key_field, run_id) == run_id

    async def aclose(self) -> None:
        await self._channel.close()


TARGET = TargetType(
    name="workflows",
    config=WorkflowsTargetConfig,
    adapter=WorkflowsTarget,
    build=lambda config, context, endpoint: WorkflowsTarget(config, context.google_auth, endpoint),
    endpoint="workflows",
    resource_field="workflow",
    grants=(Grant("roles/workflows.invoker", on="project"),),  # Workflows has no per-workflow IAM
)
