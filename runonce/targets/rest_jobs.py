"""What the batch-workload targets share (`batch_job`, `dataflow_flex_template`, `dataproc_batch`,
`vertex_pipeline_job`): each creates one resource per run under a name runonce picks from the
run_id, in `projects/P/locations/L`, through a Google REST API.

The name is the run's handle. A retry after a lost answer sends the same name again, and the API
answers 409 ALREADY_EXISTS: the run's execution exists, runonce reads it and the run completes with
it. Answers to the create, the same for all four:

    2xx                                   the execution: completed with it
    409 / ALREADY_EXISTS                  the run's execution exists: looked up, completed with it
    429 / RESOURCE_EXHAUSTED              TargetThrottled (nothing created)
    other 4xx                             TargetFailed (nothing created)
    5xx, timeout or reset after sending   TargetOutcomeUnknown: the API may have created it before
                                          failing; the claim is kept and the retry after the
                                          lease reconciles (looks it up by its name)
"""

from __future__ import annotations

import hashlib
import re
import uuid
from abc import abstractmethod
from typing import Annotated, Any

import httpx
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from runonce.targets.base import (
    DispatchRequest,
    Target,
    TargetError,
    TargetFailed,
    TargetOutcomeUnknown,
    TargetThrottled,
)
from runonce.targets.google import (
    PROJECT,
    RUN_ID_LABEL,
    GoogleAuth,
    check_labels,
    error_of,
    json_of,
    outcome_for_response,
    read_state,
    reconciling,
    rest_base_url,
    run_id_label,
    send_rest,
)

ID_PREFIX = "runonce-"
RUN_ID_NAMESPACE = uuid.UUID("6f1d1e52-8a43-4f0e-9c53-2b1c1a7e5d10")
"""Namespace of the request ids derived from run_ids (uuid5): fixed, so a retry sends the same one."""
MAX_LABELS = 64
RUN_ID_ENV = "RUNONCE_RUN_ID"
SCHEDULE_TIME_ENV = "RUNONCE_SCHEDULE_TIME"
RUN_FIELDS = ("run_id", "schedule_time")
REGION = r"[a-z]+-[a-z]+[0-9]+"


def run_hex(run_id: str) -> str:
    """The run_id as 64 lowercase hex characters (every run_id is; anything else is hashed, so the
    ids derived from it always fit the APIs' `[a-z0-9-]` rules)."""
    if re.fullmatch(r"[0-9a-f]{64}", run_id):
        return run_id
    return hashlib.sha256(run_id.encode("utf-8")).hexdigest()  # pragma: no mutate - codec names ignore case


def resource_id_for(run_id: str, max_length: int) -> str:
    """`runonce-` + the run_id's hex, cut to `max_length`: starts with a letter, ends with a hex
    digit, only `[a-z0-9-]`, so it is a valid id for all four APIs."""
    return (ID_PREFIX + run_hex(run_id))[:max_length]


def request_id_for(run_id: str) -> str:
    """A UUID derived from the run_id (36 characters, never the zero UUID): the `requestId` that
    Batch and Dataproc dedupe a retried create on."""
    return str(uuid.uuid5(RUN_ID_NAMESPACE, run_id))


def run_values(request: DispatchRequest) -> dict[str, str]:
    """The run's identity as the workload receives it: `run_id`, and `schedule_time` when the run
    has one (a Cloud Tasks or manual run may not)."""
    values = {"run_id": request.run_id}
    if request.schedule_time:
        values["schedule_time"] = request.schedule_time
    return values


# --- configuration checks ------------------------------------------------------------------------


def config_error(message: str) -> PydanticCustomError:
    """A route's mistake as pydantic reports it (the routes loader makes it one line). No context:
    pydantic then shows the message as it is, braces included."""
    return PydanticCustomError("target_config", message)  # pragma: no mutate - routes shows the message, not the type


class ParentConfig(BaseModel):
    """The parent every one of these routes names: `project` and `location` (a region)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    project: str = Field(description="The project the workload runs in (and is billed to).")
    location: str = Field(description="The region it runs in, e.g. us-central1.")

    @field_validator("project")
    @classmethod
    def _project(cls, value: str) -> str:
        if not re.fullmatch(PROJECT, value, flags=re.ASCII):
            raise config_error(
                f"must be a project ID (6-30 characters of a-z 0-9 -, starting with a letter) or number (got {value!r})"
            )
        return value

    @field_validator("location")
    @classmethod
    def _location(cls, value: str) -> str:
        if not re.fullmatch(REGION, value):
            raise config_error(f"must be a region such as us-central1 (got {value!r})")
        return value


def mapping_at(body: dict[str, Any], path: str, where: str) -> dict[str, Any]:
    """`body[a][b]` for the dotted `path` when it is a mapping; {} when absent; a config error
    naming `where`.`a` (or `where`.`a`.`b`) when something else is there."""
    value: Any = body
    parts = path.split(".")
    for depth, part in enumerate(parts, 1):
        value = value.get(part)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise config_error(f"{where}.{'.'.join(parts[:depth])} must be a mapping")
    mapping: dict[str, Any] = value
    return mapping


def check_route_labels(body: dict[str, Any], path: str, where: str) -> None:
    """The route's labels at `path`: valid Google labels, not `runonce-run-id` (runonce sets it)."""
    check_labels(mapping_at(body, path, where), MAX_LABELS)


def refuse_fields(body: dict[str, Any], fields: dict[str, str], where: str) -> None:
    """A config error for the first of `fields` (name -> why) that the route sets in `body`."""
    for name, why in fields.items():
        if body.get(name) is not None:
            raise config_error(f"{where}.{name}: {why}")


def run_parameters_schema(schema: dict[str, Any]) -> None:
    """The JSON Schema of `run_parameters` as a routes file writes it (a list or a mapping), not
    the mapping it is parsed into: editors validate what people type."""
    schema.pop("type", None)  # pragma: no mutate - pydantic's schema of dict[str, str] always has it
    schema.pop("additionalProperties", None)  # pragma: no mutate - pydantic's schema of dict[str, str] always has it
    schema["anyOf"] = [
        {"type": "array", "items": {"enum": ["run_id", "schedule_time"]}, "uniqueItems": True},
        {"type": "object", "additionalProperties": {"type": "string"}},
    ]


def parse_run_parameters(value: Any) -> dict[str, str]:
    """`run_parameters:` as a route gives it -> {run field: parameter name}.

    A list names the parameters after the fields (`[run_id, schedule_time]`); a mapping maps each
    field to the parameter that receives it (`{run_id: idempotency_key}`)."""
    if value is None:
        return {}
    if isinstance(value, list):
        value = {item: item for item in value} if all(isinstance(item, str) for item in value) else None
    if not isinstance(value, dict):
        raise config_error("must be a list of run_id, schedule_time or a mapping of them to parameter names")
    for field, parameter in value.items():
        if field not in RUN_FIELDS:
            raise config_error(f"{field!r} is not one of run_id, schedule_time")
        if not isinstance(parameter, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}", parameter):
            raise config_error(f"{field}: {parameter!r} is not a parameter name")
    if len(set(value.values())) != len(value):
        raise config_error("run_id and schedule_time must go to different parameters")
    return dict(value)


RunParameters = Annotated[
    dict[str, str], BeforeValidator(parse_run_parameters), Field(json_schema_extra=run_parameters_schema)
]
"""`run_parameters:` of a route whose workload takes parameters: written as a list or a mapping,
held as {run field: parameter name}."""


def refuse_mapped_parameters(run_parameters: dict[str, str], given: dict[str, Any], where: str) -> None:
    """A parameter runonce fills from the run must not also be given in the workload."""
    for field, parameter in run_parameters.items():
        if parameter in given:
            raise config_error(f"{where}.{parameter} is set by runonce (run_parameters.{field})")


def mapped_parameters(run_parameters: dict[str, str], request: DispatchRequest) -> dict[str, str]:
    """{parameter name: value} for the run fields a route maps (`parse_run_parameters`); a field
    the run lacks (no schedule time) is left out, so the workload's default applies."""
    values = run_values(request)
    return {parameter: values[field] for field, parameter in run_parameters.items() if field in values}


def with_label(labels: dict[str, str] | None, run_id: str) -> dict[str, str]:
    return {**(labels or {}), RUN_ID_LABEL: run_id_label(run_id)}


# --- the adapter -----------------------------------------------------------------------------------


class RunNamedJobTarget(Target):
    """A create of `collection` under `projects/P/locations/L` with a run-derived id; the subclass
    says where the id goes, what the body is, and how a state reads as running."""

    collection: str
    """The resource collection (`jobs`, `batches`, `pipelineJobs`)."""
    noun: str
    """How messages name one (`Batch job`)."""
    running_states: frozenset[str]
    max_id_length: int = 63
    api_version: str = "v1"

    config: ParentConfig

    def __init__(self, config: Any, http: httpx.AsyncClient, auth: GoogleAuth, endpoint: str | None = None):
        self.config = config
        self._http = http
        self._auth = auth
        self._base = rest_base_url(endpoint, self.default_endpoint())

    @abstractmethod
    def default_endpoint(self) -> str:
        """Google's endpoint for the API (regional where the API is)."""

    @property
    def parent(self) -> str:
        return f"projects/{self.config.project}/locations/{self.config.location}"

    def resource_id(self, request: DispatchRequest) -> str:
        return resource_id_for(request.run_id, self.max_id_length)

    def resource_name(self, request: DispatchRequest) -> str:
        return f"{self.parent}/{self.collection}/{self.resource_id(request)}"

    @abstractmethod
    def create_params(self, request: DispatchRequest) -> dict[str, str]:
        """The create's query parameters: the run's id (and request id)."""

    @abstractmethod
    def body(self, request: DispatchRequest) -> dict[str, Any]:
        """The create's request body for this run."""

    def state_of(self, resource: dict[str, Any]) -> str:
        return str(resource.get("state") or "")  # pragma: no mutate - no state is no running state

    def created_resource(self, answer: dict[str, Any], request: DispatchRequest) -> str:
        """The execution's name from the create's answer (the resource, or its operation)."""
        return self.resource_name(request)

    def _url(self, name: str) -> str:
        return f"{self._base}/{self.api_version}/{name}"

    def create_url(self) -> str:
        return self._url(f"{self.parent}/{self.collection}")

    async def dispatch(self, request: DispatchRequest) -> str:
        name = self.resource_name(request)
        action = f"create {self.noun} {name}"
        if request.payload:
            raise TargetFailed(f"{action}: a {self.type} route takes no delivery body (its workload is the route's)")
        response = await send_rest(
            self._http,
            self._auth,
            "POST",  # pragma: no mutate - httpx upper-cases the method: "post" is the same request
            self.create_url(),
            action,
            body=self.body(request),
            params=self.create_params(request),
        )
        if is_already_exists(response):
            return await self.adopt(request, f"{action}: it already exists; read it")
        if not response.is_success:
            raise create_outcome(action, response)
        return self.created_resource(json_of(action, response), request)

    async def adopt(self, request: DispatchRequest, action: str) -> str:
        """The run's execution, which the API says exists: never None (a lookup that lags the
        create cannot tell, so the claim is kept)."""
        with reconciling(action):
            found = await self.find(request, action)
            if found is None:
                raise TargetOutcomeUnknown(f"{action}: the API says it exists but it cannot be read yet")
        return found

    async def reconcile(self, request: DispatchRequest) -> str | None:
        name = self.resource_name(request)
        action = f"get {self.noun} {name}"
        with reconciling(action):
            return await self.find(request, action)

    async def find(self, request: DispatchRequest, action: str) -> str | None:
        """The run's execution by its name, or None when there is none (404)."""
        name = self.resource_name(request)
        response = await send_rest(
            self._http,
            self._auth,
            "GET",  # pragma: no mutate - httpx upper-cases the method: "get" is the same request
            self._url(name),
            action,
        )
        if response.status_code == 404:
            return None
        json_of(action, response)
        return name

    async def is_running(self, resource: str) -> bool:
        if not re.fullmatch(rf"projects/[^/]+/locations/[^/]+/{self.collection}/[^/]+", resource):
            raise TargetOutcomeUnknown(f"{resource} is not a {self.noun}'s name")
        found = await read_state(self._http, self._auth, self._url(resource), resource)
        return found is not None and self.state_of(found) in self.running_states


def is_already_exists(response: httpx.Response) -> bool:
    """ALREADY_EXISTS (409, or a 409 without Google's error body): the id is taken, by the run's
    own execution. A 409 ABORTED (a concurrency conflict) is not: it created nothing."""
    if response.is_success:
        return False
    status = error_of(response.text).get("status")
    return status == "ALREADY_EXISTS" or (response.status_code == 409 and not status)


def create_outcome(action: str, response: httpx.Response) -> TargetError:
    """The outcome of a create's answer other than 2xx and ALREADY_EXISTS (the module's table):
    a 5xx may come after the execution was created, so it is unknown, not failed."""
    outcome = outcome_for_response(action, response)
    if isinstance(outcome, TargetThrottled):
        return outcome
    if response.status_code >= 500:
        return TargetOutcomeUnknown(outcome.message)
    return outcome
