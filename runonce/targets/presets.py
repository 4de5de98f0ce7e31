"""What the Google target presets share: the start-up check every preset route passes, the
run-named base (`RunNamedPreset`: one resource per run under a name runonce picks from the run),
and the vocabulary of their configs (parent, labels, run parameters, fields runonce sets).

The start-up check (`check_route`) builds each call a route's preset would make, for a few sample
runs, and holds it to the API's discovery document with the same checks as a `google_api` route:
every parameter (name, type, enum, pattern) and the request body against the method's request
schema. Before that, `check_preset` holds the route's part of the body to its schema as the route
wrote it (before runonce adds to it), then runs the preset's own checks of what the document cannot
say (the env vars, labels and fields runonce sets), each a one-line error.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, field_validator

from runonce.targets.base import (
    DispatchRequest,
    TargetConfigModel,
    TargetError,
    TargetOutcomeUnknown,
    config_error,
)
from runonce.targets.engine import Call, GoogleEngineTarget, dotted, request_id_for, run_hex
from runonce.targets.google import PROJECT, REGION, RUN_ID_LABEL, run_id_label
from runonce.targets.google_api import SAMPLE_RUN_IDS, SAMPLE_SCHEDULE_TIME, check_params
from runonce.targets.google_api_discovery import load
from runonce.targets.registry import Grant, TargetType

ID_PREFIX = "runonce-"
RUN_ENV = ("RUNONCE_RUN_ID", "RUNONCE_SCHEDULE_TIME")
"""The environment variables that carry the run's identity into a job's workload (`run_env`)."""
RUN_FIELDS = ("run_id", "schedule_time")

ConfigT = TypeVar("ConfigT", bound=BaseModel)
SAMPLE_RUN: dict[str, Any] = {"route": "r", "job": "j", "schedule_time": SAMPLE_SCHEDULE_TIME, "source": "scheduler"}
"""The rest of a sample run: any values do, since only the run_id shapes a call's ids."""


def resource_id_for(run_id: str, max_length: int) -> str:
    """`runonce-` + the run_id's hex, cut to `max_length`: starts with a letter, ends with a hex
    digit, only `[a-z0-9-]`, so it is a valid id for every API that takes one."""
    return (ID_PREFIX + run_hex(run_id))[:max_length]


def run_values(request: DispatchRequest) -> dict[str, str]:
    """The run's identity as the workload receives it: `run_id`, and `schedule_time` when the run
    has one (a Cloud Tasks or manual run may not)."""
    values = {"run_id": request.run_id}
    if request.schedule_time:
        values["schedule_time"] = request.schedule_time
    return values


def run_env(request: DispatchRequest) -> dict[str, str]:
    """The run's identity as a job's environment: `RUNONCE_RUN_ID`, and `RUNONCE_SCHEDULE_TIME`
    when the run has one."""
    return {f"RUNONCE_{field.upper()}": value for field, value in run_values(request).items()}


def run_fields(request: DispatchRequest, prefix: str) -> dict[str, str]:
    """The run's job and source, and its schedule time and task when it has them, as
    `{prefix}JOB`, `{prefix}SOURCE`, `{prefix}SCHEDULE_TIME` and `{prefix}TASK`: the env vars or
    substitutions of a workload that runonce does not name from the run."""
    optional = {"SCHEDULE_TIME": request.schedule_time, "TASK": request.task}
    values = {"JOB": request.job, "SOURCE": request.source, **{key: value for key, value in optional.items() if value}}
    return {prefix + key: value for key, value in values.items()}


def with_label(labels: dict[str, str] | None, run_id: str) -> dict[str, str]:
    """The route's labels and `runonce-run-id`."""
    return {**(labels or {}), RUN_ID_LABEL: run_id_label(run_id)}


def act_as(field: str) -> Grant:  # pragma: no mutate block - runs at import, in every CLI subprocess too
    """actAs on the service account the route's workload runs as (the dotted config `field`):
    creating a workload that runs as an account needs it."""
    return Grant("roles/iam.serviceAccountUser", on="service-account", field=field)


def preset_type(
    config: type[BaseModel], adapter: type[GoogleEngineTarget[Any]], endpoint: str, *grants: Grant
) -> TargetType:  # pragma: no mutate block - runs at import, in every CLI subprocess too
    """The registry entry of a preset whose workload is the route's alone, in the route's
    `project`: no delivery body reaches it, and an event route sends none."""
    return TargetType(
        name=adapter.type,
        config=config,
        adapter=adapter,
        build=adapter.build,
        endpoint=endpoint,
        resource_field="project",
        grants=grants,
        takes_payload=False,
        event_payload="none",
    )


# --- the start-up check ----------------------------------------------------------------------------


def check_route(adapter: type[GoogleEngineTarget[Any]], config: Any) -> None:
    """Every call `adapter` would make for `config`, for each sample run, held to the API's
    discovery document: the first problem raised as the route's error, naming the route's field."""
    target = adapter(config, None, None)  # type: ignore[arg-type]  # no clients: it only builds calls
    document = target.document
    for request in [DispatchRequest(run_id=run_id, **SAMPLE_RUN) for run_id in SAMPLE_RUN_IDS]:
        try:
            listing = target.list_call(request)
            calls = [target.create_call(request), target.lookup_call(request), listing.call if listing else None]
        except TargetError as exc:  # a run of this route could never be sent (an argument over the API's limit)
            raise config_error(exc.message.split(": ", 1)[-1]) from None
        except (AttributeError, KeyError, TypeError, IndexError) as exc:  # a shape the config's checks let through
            raise config_error(f"the request cannot be built from this route ({type(exc).__name__}: {exc})") from None
        for call in [call for call in calls if call is not None]:
            method = document.method(call.method)
            if method is None:
                raise config_error(f"{document.api} has no method {call.method}")
            check_params(method, call.params, f"{method.id} parameters")
            if call.body is None or method.request is None:
                continue
            problem = document.value_problem(call.body, {"$ref": method.request}, "body")
            if problem:
                raise config_error(adapter.route_where(problem))


def check_preset(
    adapter: type[GoogleEngineTarget[Any]],
    config: Any,
    set_by_runonce: dict[str, str],
    labels: str,
    *checks: Callable[[dict[str, Any]], None],
) -> None:
    """A preset route's start-up check, in this order: the fields runonce sets (name -> why) and its
    label (at the dotted `labels`) refused; the route's part of the body (`BODY_FIELD`) held to its
    schema in the document (`BODY_SCHEMA`) as written, before runonce adds to it; the preset's own
    `checks` of that part, for what the document cannot say; then every call (`check_route`)."""
    field = adapter.BODY_FIELD[1]
    part = getattr(config, field)
    for name, why in set_by_runonce.items():
        if part.get(name) is not None:
            raise config_error(f"{field}.{name}: {why}")
    problem = load(adapter.API).value_problem(part, {"$ref": adapter.BODY_SCHEMA}, field, frozenset(set_by_runonce))
    if problem:
        raise config_error(problem)
    if RUN_ID_LABEL in (dotted(part, labels) or {}):
        raise config_error(f"{field}.{labels}: label {RUN_ID_LABEL!r} is set by runonce itself")
    for check in checks:
        check(part)
    check_route(adapter, config)


# --- run-named presets -------------------------------------------------------------------------------


class RunNamedPreset(GoogleEngineTarget[ConfigT]):
    """A create of `COLLECTION` under `projects/P/locations/L` with a run-derived id (`ID_PARAM`,
    and a `requestId` when `REQUEST_ID`), found again by a GET of that name.

    The name is the run's handle: a retry after a lost answer sends the same name again, the API
    answers ALREADY_EXISTS, and the engine reads the resource and completes the run with it.
    """

    COLLECTION: ClassVar[str]
    ID_PARAM: ClassVar[str]
    REQUEST_ID: ClassVar[bool] = False
    MAX_ID_LENGTH: ClassVar[int] = 63
    REGIONAL_ENDPOINT: ClassVar[str] = ""
    """The API's host in the route's location (`https://{location}-….googleapis.com`), where the
    preset's resources live; empty: the discovery document's root."""

    def default_endpoint(self) -> str:
        if self.REGIONAL_ENDPOINT:
            return self.REGIONAL_ENDPOINT.format(location=self.config.location)  # type: ignore[attr-defined]
        return super().default_endpoint()

    @property
    def parent(self) -> str:
        return f"projects/{self.config.project}/locations/{self.config.location}"  # type: ignore[attr-defined]

    def resource_id(self, request: DispatchRequest) -> str:
        return resource_id_for(request.run_id, self.MAX_ID_LENGTH)

    def resource_name(self, request: DispatchRequest) -> str:
        return f"{self.parent}/{self.COLLECTION}/{self.resource_id(request)}"

    def describe(self, request: DispatchRequest) -> str:
        return f"create {self.NOUN} {self.resource_name(request)}"

    def describe_lookup(self, request: DispatchRequest) -> str:
        return f"get {self.NOUN} {self.resource_name(request)}"

    def body(self, request: DispatchRequest) -> dict[str, Any]:
        """The create's request body for this run."""
        raise NotImplementedError

    def create_call(self, request: DispatchRequest) -> Call:
        params = {"parent": self.parent, self.ID_PARAM: self.resource_id(request)}
        if self.REQUEST_ID:
            params["requestId"] = request_id_for(request.run_id)
        return Call(f"projects.locations.{self.COLLECTION}.create", params, self.body(request))

    def lookup_call(self, request: DispatchRequest) -> Call | None:
        return Call(f"projects.locations.{self.COLLECTION}.get", {"name": self.resource_name(request)})

    def created(self, answer: dict[str, Any], request: DispatchRequest) -> str:
        return self.resource_name(request)

    def state_call(self, resource: str) -> Call:
        if not re.fullmatch(rf"projects/[^/]+/locations/[^/]+/{self.COLLECTION}/[^/]+", resource):
            raise TargetOutcomeUnknown(f"{resource} is not a {self.NOUN}'s name")
        return Call(f"projects.locations.{self.COLLECTION}.get", {"name": resource})


# --- the configs' vocabulary ------------------------------------------------------------------------


def check_project(value: str) -> str:
    """A route's project as the APIs take it in a resource name: an ID or a number."""
    if not re.fullmatch(PROJECT, value, flags=re.ASCII):  # pragma: no mutate - ASCII classes only: the flag guards
        raise config_error(
            f"must be a project ID (6-30 characters of a-z 0-9 -, starting with a letter) or number (got {value!r})"
        )
    return value


def project_number_as_text(value: Any) -> Any:
    """A project number YAML read as a number (`project: 123456789012`) is the project's number."""
    return str(value) if type(value) is int else value  # (a bool is no int here; -5 is then refused as text)


ProjectId = Annotated[str, BeforeValidator(project_number_as_text), AfterValidator(check_project)]
"""A route's `project`: a project ID or number (written as text or as a number)."""


class ParentConfig(TargetConfigModel):
    """The parent every run-named route names: `project` and `location` (a region)."""

    project: ProjectId = Field(description="The project the workload runs in (and is billed to).")
    location: str = Field(description="The region it runs in, e.g. us-central1.")

    @field_validator("location")
    @classmethod
    def _location(cls, value: str) -> str:
        if not re.fullmatch(REGION, value):
            raise config_error(f"must be a region such as us-central1 (got {value!r})")
        return value


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
    if isinstance(value, list):
        value = {item: item for item in value} if all(isinstance(item, str) for item in value) else None
    if not isinstance(value, dict):
        raise config_error("must be a list of run_id, schedule_time or a mapping of them to parameter names")
    for run_field, parameter in value.items():
        if run_field not in RUN_FIELDS:
            raise config_error(f"{run_field!r} is not one of run_id, schedule_time")
        if not isinstance(parameter, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}", parameter):
            raise config_error(f"{run_field}: {parameter!r} is not a parameter name")
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
    for run_field, parameter in run_parameters.items():
        if parameter in given:
            raise config_error(f"{where}.{parameter} is set by runonce (run_parameters.{run_field})")


def mapped_parameters(run_parameters: dict[str, str], request: DispatchRequest) -> dict[str, str]:
    """{parameter name: value} for the run fields a route maps (`parse_run_parameters`); a field
    the run lacks (no schedule time) is left out, so the workload's default applies."""
    values = run_values(request)
    return {parameter: values[run_field] for run_field, parameter in run_parameters.items() if run_field in values}
