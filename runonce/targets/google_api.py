"""`google_api` target: any Google REST method that can be made idempotent, declared in the route.

A route names a method of a Google discovery document and what to send:

    target:
      type: google_api
      api: batch.v1
      method: projects.locations.jobs.create
      params: {parent: projects/p/locations/us-central1, jobId: "r${run_id:62}"}
      body: {taskGroups: [...]}
      reconcile:
        method: projects.locations.jobs.get
        params: {name: "projects/p/locations/us-central1/jobs/r${run_id:62}"}
      running: {field: status.state, values: [QUEUED, SCHEDULED, RUNNING]}

Placeholders in params and body strings: `${run_id}`, `${run_id:N}` (its first N hex characters),
`${run_uuid}` (a UUID made from the run_id) and `${schedule_time}`.

Everything is checked at start-up against the document (google_api_discovery.py): the method, each
param (name, type, enum, pattern, with the placeholders expanded), the body against the request
schema, the reconcile method (a GET) and its params, the `running` field and values against the
reconcile method's response. A route must fill from the run a field the method dedupes on
(handles.py: a client-chosen id, the name in a create's path, a requestId); a reconcile read must
read the resource that id names.

Answers to the call: the engine's table (`engine.py`), the same as every Google target's. A 2xx
records the reconcile call (the run's resource), else the answer's name; ALREADY_EXISTS adopts the
resource the reconcile call reads (without one, the id the API deduped on is the proof).
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Iterator
from typing import Any, Literal
from urllib.parse import quote

import httpx
from pydantic import Field, ValidationInfo, field_validator, model_validator

from runonce.targets.base import DispatchRequest, TargetConfigModel, TargetFailed, config_error
from runonce.targets.endpoints import endpoint_problem
from runonce.targets.engine import Call, GoogleEngineTarget, Running, build_path, run_hex, wire
from runonce.targets.google import CONTROL_CHARACTER, LOCATION, GoogleAuth
from runonce.targets.google_api_discovery import (
    ApiDocument,
    ApiMethod,
    DocumentNotFound,
    load,
    scalar_problem,
)
from runonce.targets.handles import Handle, describe, handles_of, id_problem, value_at
from runonce.targets.registry import TargetType

PLACEHOLDER = re.compile(r"\$(\$)?\{([^}]*)\}")
"""`${name}`, or `$${name}`: written for a literal `${name}` (a shell variable in a script)."""
PLACEHOLDERS = "${run_id}, ${run_id:N} (N = 1-64), ${run_uuid}, ${schedule_time}"
MIN_HANDLE_HEX = 16
"""A run_id prefix shorter than this (64 bits) could be shared by two runs of a route: it cannot dedupe."""

SAMPLE_RUN_IDS = ("0" * 64, "f" * 64, "9" * 16 + "a" * 48)
"""Expansions checked at start-up: a run_id is 64 hex characters, starting with a digit or a letter."""
SAMPLE_SCHEDULE_TIME = "2026-01-31T12:00:00Z"
STANDARD_PARAMETERS = frozenset(
    {"$.xgafv", "access_token", "alt", "callback", "fields", "key", "oauth_token", "prettyPrint", "quotaUser"}
    | {"upload_protocol", "uploadType"}
)
"""The query parameters every discovery document lists for all its methods (`parameters` at its top)."""
DRY_RUN_FIELDS = ("validateOnly", "dryRun")
"""A request that sets one of these to true is only checked by the API: nothing is created."""
EXAMPLE_HANDLES = '"r${run_id:62}" or "${run_uuid}"'
RUN_PLACEHOLDERS = f"${{run_id}}, ${{run_id:N}} with N >= {MIN_HANDLE_HEX}, or ${{run_uuid}}"
"""The placeholders that tell runs apart."""


# --- placeholders ----------------------------------------------------------------------------------


def run_uuid(run_id: str) -> str:
    """A UUID (version 4 layout) made from the run_id's first 32 hex characters, for APIs whose
    requestId must be a UUID. Same run, same UUID."""
    return str(uuid.UUID(hex=run_hex(run_id)[:32], version=4))


def placeholder_problem(text: str) -> str | None:
    """The first placeholder in `text` that runonce does not know, or None."""
    for match in PLACEHOLDER.finditer(text):
        escaped, name = match.groups()
        if escaped:
            continue
        run_id = re.fullmatch(r"run_id(?::([0-9]+))?", name)
        if name in ("run_uuid", "schedule_time") or (
            run_id and (not run_id.group(1) or 1 <= int(run_id.group(1)) <= 64)
        ):
            continue
        return (
            f"unknown placeholder {match.group(0)!r} (runonce fills {PLACEHOLDERS}; write "
            f"'${match.group(0)}' to send it as it is)"
        )
    if "${" in PLACEHOLDER.sub("", text):
        return f"a '${{' that no '}}' closes (runonce fills {PLACEHOLDERS})"
    return None


def strings_in(value: Any) -> Iterator[str]:
    """Every string among a value's values, at any depth (keys are not values)."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            yield from strings_in(item)
    elif isinstance(value, str):
        yield value


def carries_run(value: Any) -> bool:
    """Whether a value's placeholders tell runs apart: ${run_id}, ${run_uuid}, or ${run_id:N} with
    N >= MIN_HANDLE_HEX."""
    for text in strings_in(value):
        for match in PLACEHOLDER.finditer(text):
            escaped, name = match.groups()
            prefix = re.fullmatch(r"run_id:([0-9]+)", name)
            if escaped:
                continue
            if name in ("run_id", "run_uuid") or (prefix and int(prefix.group(1)) >= MIN_HANDLE_HEX):
                return True
    return False


def uses_schedule_time(value: Any) -> bool:
    return any(
        match.groups() == (None, "schedule_time") for text in strings_in(value) for match in PLACEHOLDER.finditer(text)
    )


def expand(value: Any, run_id: str, schedule_time: str | None) -> Any:
    """`value` with every placeholder in its strings filled from the run (keys are left as they are)."""
    if isinstance(value, dict):
        return {key: expand(item, run_id, schedule_time) for key, item in value.items()}
    if isinstance(value, list):
        return [expand(item, run_id, schedule_time) for item in value]
    if not isinstance(value, str):
        return value

    def fill(match: re.Match[str]) -> str:
        escaped, name = match.groups()
        if escaped:
            return match.group(0)[1:]  # `$${name}` is sent as `${name}`
        if name == "run_uuid":
            return run_uuid(run_id)
        if name == "schedule_time":
            return schedule_time or ""
        if name == "run_id":
            return run_id
        return run_id[: int(name.removeprefix("run_id:"))]

    return PLACEHOLDER.sub(fill, value)


def _check_placeholders(value: Any, where: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and PLACEHOLDER.search(key):
                raise config_error(
                    f"{where}: the key {key!r} holds a placeholder; runonce fills them in values only (keys "
                    "are sent as written)"
                )
            _check_placeholders(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_placeholders(item, f"{where}[{index}]")
    elif isinstance(value, str):
        problem = placeholder_problem(value)
        if problem:
            raise config_error(f"{where}: {problem}")


def _samples(value: Any) -> list[Any]:
    """`value` expanded as it would be for a few runs (distinct when it holds a placeholder)."""
    return [expand(value, run_id, SAMPLE_SCHEDULE_TIME) for run_id in SAMPLE_RUN_IDS]


# --- parameters ------------------------------------------------------------------------------------


def param_problem(method: ApiMethod, name: str, value: Any) -> str | None:
    """What the document says against `value` (already expanded) for the parameter `name`: its
    type (integers within their format's range), enum, and pattern, matched whole."""
    spec = method.parameters[name]
    values = value if isinstance(value, list) and spec.get("repeated") else [value]
    for item in values:
        if isinstance(item, (dict, list)) or item is None:
            shown = "nothing (null)" if item is None else type(item).__name__
            kind = spec.get("type", "string")
            return f"{name}: expected {'an' if kind[0] in 'aeiou' else 'a'} {kind}, got {shown}"
        text = wire(item)
        where = f"{name}={text!r}"
        if CONTROL_CHARACTER.search(text):
            return f"{where}: holds a control character (a newline?); a parameter is sent in the URL as it is"
        if spec.get("type") == "integer" or spec.get("format") in ("int64", "uint64"):
            problem = scalar_problem(text, {"type": "integer", "format": spec.get("format") or "int32"}, where)
            if problem:
                return problem
        if spec.get("type") == "boolean" and text not in ("true", "false"):
            return f"{where}: expected true or false"
        # `{+name}` sends its slashes as they are, `{name}` escapes them: its value is one segment
        segments = text.removeprefix("//").split("/") if f"{{+{name}}}" in method.path else [text]
        if spec.get("location") == "path" and {"", ".", ".."} & set(segments):
            return (
                f"{where}: an empty value or a '.' or '..' segment, or an empty one ('//', or '/' first or "
                "last); the URL would name another resource"
            )
        if spec.get("format") in ("google-duration", "google-datetime"):
            problem = scalar_problem(text, {"type": "string", "format": spec["format"]}, where)
            if problem:
                return problem
        if "enum" in spec and text not in spec["enum"]:
            return f"{where}: not one of {', '.join(spec['enum'])}"
        pattern = spec.get("pattern")
        if pattern and not re.fullmatch(template_pattern(pattern), text):
            return f"{where} does not match {pattern}, the pattern {method.id} states for {name}"
        problem = _parent_problem(text) if spec.get("location") == "path" else None
        if problem:
            return f"{where}: {problem}"
    return None


def template_pattern(pattern: str) -> str:
    """A parameter's pattern as the path template it was made from means it. A document writes the
    template's last `**` (zero or more segments) as `/.*`, which asks for one at least: Firestore's
    `{parent=projects/*/databases/*/documents/**}` takes `…/documents`, a top-level collection's
    parent, which `^projects/[^/]+/databases/[^/]+/documents/.*$` would refuse."""
    return pattern.removesuffix("/.*$") + "(?:/.*)?$" if pattern.endswith("/.*$") else pattern


def _parent_problem(path: str) -> str | None:
    """What is wrong with the project or the location a resource name holds (`projects/P/locations/L/…`):
    a location is held to the rule every Google target's is (`LOCATION`); a project only to the
    characters a project ID, domain-scoped ID or number may hold, a-z 0-9 - . : (`My_Project` is
    refused), since where the first-class targets take the project whole, here it is part of a path."""
    for kind, value in itertools.pairwise(path.split("/")):
        if kind == "projects" and not re.fullmatch(r"[a-z0-9][a-z0-9.:-]*|-", value):
            return f"the project {value!r} is not a project ID (a-z 0-9 -, starting with a letter) or number"
        if kind == "locations" and not re.fullmatch(rf"{LOCATION}|-", value):
            return f"the location {value!r} is not a location (a-z 0-9 -, e.g. us-central1, or global)"
    return None


def check_params(method: ApiMethod, params: dict[str, Any], where: str) -> None:
    """Every param is one of the method's, every path parameter is given, every value (with each
    sample expansion) fits the document's type, enum and pattern."""
    for name in params:
        if name in STANDARD_PARAMETERS and name not in method.parameters:
            raise config_error(
                f"{where}.{name}: a standard parameter of every Google API, not one of {method.id}'s; "
                "a route sets none of them: they change the answer runonce reads (fields, alt, prettyPrint) "
                "or how it calls"
            )
        if name not in method.parameters:
            takes = ", ".join(sorted(method.parameters)) or "no parameters"
            raise config_error(f"{where}.{name}: {method.id} has no parameter {name!r} (it takes: {takes})")
    for name in method.path_parameters():
        if name not in params:
            pattern = method.parameters[name].get("pattern")
            rule = f" (pattern {pattern})" if pattern else ""
            raise config_error(f"{where}: {method.id} needs the path parameter {name!r}{rule}")
    for name, spec in method.parameters.items():
        # `encryptionConfig.encryptionType`: a field of an optional message, required once it is given
        within = name.rpartition(".")[0]
        needed = not within or any(given.startswith(f"{within}.") for given in params)
        if spec.get("location") == "query" and spec.get("required") and needed and name not in params:
            raise config_error(
                f"{where}: {method.id} needs the query parameter {name!r} (its description: Required.); "
                "the API refuses every call without it"
            )
    _check_placeholders(params, where)
    for name, value in params.items():
        for sample in _samples(value):
            problem = param_problem(method, name, sample)
            if problem:
                raise config_error(f"{where}.{problem}")


def check_body(document: ApiDocument, method: ApiMethod, body: dict[str, Any]) -> None:
    """The body, as each sample run would send it, against the method's request schema. A field the
    path already carries (Pub/Sub's `name` in `PUT v1/{+name}`) counts as given."""
    assert method.request is not None  # the caller checked
    carried = frozenset(method.path_parameters())
    for sample in _samples(body):
        problem = document.value_problem(sample, {"$ref": method.request}, "body", carried)
        if problem:
            raise config_error(problem)


def _location(params: dict[str, Any]) -> str | None:
    """The `locations/L` a method's parameters name, for the API's locational endpoint."""
    for value in params.values():
        if not isinstance(value, str):
            continue
        match = re.search(r"(?:^|/)locations/([a-z0-9-]+)(?:/|\Z)", value)
        if match:
            return match.group(1)
    return None


# --- config ----------------------------------------------------------------------------------------


class ReconcileConfig(TargetConfigModel):
    method: str = Field(description="A GET method of the same API that reads the run's resource (404: none).")
    params: dict[str, Any] = Field(default_factory=dict)


class RunningConfig(TargetConfigModel):
    field: str = Field(description="Dotted field of the reconcile method's answer, e.g. status.state.")
    values: list[str] = Field(min_length=1, description="The field's values that mean still running.")


class GoogleApiTargetConfig(TargetConfigModel):
    NULL_CHECKED = frozenset({"body"})  # says which request object the method takes

    type: Literal["google_api"]
    api: str = Field(description="A discovery document, as name.version (batch.v1).")
    method: str = Field(description="The method's id as the document names it (projects.locations.jobs.create).")
    params: dict[str, Any] = Field(default_factory=dict, description="Path and query parameters, with placeholders.")
    body: dict[str, Any] | None = Field(None, description="The request body, with placeholders.")
    reconcile: ReconcileConfig | None = None
    running: RunningConfig | None = None
    endpoint: str | None = Field(
        None,
        description="Base URL instead of Google's: https:// to a host under googleapis.com, or http:// to a "
        "loopback address (plaintext, for local fakes); an origin without path, query or user.",
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        problem = endpoint_problem(value) if value is not None else None
        if problem:
            raise config_error(problem)
        return value

    @field_validator("api")
    @classmethod
    def _api(cls, value: str) -> str:
        try:
            load(value)
        except DocumentNotFound as exc:
            raise config_error(str(exc)) from None
        return value

    @field_validator("method")
    @classmethod
    def _method(cls, value: str, info: ValidationInfo) -> str:
        document = _document(info)
        if document is not None and document.method(value) is None:
            raise config_error(f"{document.api} has no method {value!r}{_hint(document, value)}")
        return value

    @field_validator("params")
    @classmethod
    def _params(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        method = _method_of(info)
        if method is not None:
            check_params(method, value, "params")
        return value

    @field_validator("body")
    @classmethod
    def _body(cls, value: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        document, method = _document(info), _method_of(info)
        if document is None or method is None:
            return value
        if value is None:
            if method.request is None:
                return value
            raise config_error(
                f"body: is empty (null); {method.id} takes a {method.request} object: give its fields, "
                "or remove the key (an empty key in YAML is null)"
            )
        if method.request is None:
            raise config_error(f"{method.id} takes no request body")
        _check_placeholders(value, "body")
        check_body(document, method, value)
        return value

    @field_validator("reconcile")
    @classmethod
    def _reconcile(cls, value: ReconcileConfig | None, info: ValidationInfo) -> ReconcileConfig | None:
        document = _document(info)
        if document is None or value is None:
            return value
        method = document.method(value.method)
        if method is None:
            hint = _hint(document, value.method)
            raise config_error(f"reconcile.method: {document.api} has no method {value.method!r}{hint}")
        if method.http_method != "GET":
            raise config_error(
                f"reconcile.method: {method.id} is an HTTP {method.http_method}; reconciliation only "
                "reads (a GET method, e.g. a get)"
            )
        response = document.schemas.get(method.response or "", {}).get("properties", {})
        if "nextPageToken" in response:
            raise config_error(
                f"reconcile.method: {method.id} lists resources, and a list answers 200 even when the "
                "run's resource is not in it; reconciliation needs a get of the run's resource (404 "
                "when it does not exist)"
            )
        check_params(method, value.params, "reconcile.params")
        if not carries_run(value.params):
            raise config_error(
                f"reconcile.params: no parameter carries the run ({RUN_PLACEHOLDERS}); the lookup would find "
                "another run's resource"
            )
        return value

    @model_validator(mode="after")
    def _whole(self) -> GoogleApiTargetConfig:
        dry = next(_dry_runs({"params": self.params, "body": self.body}, ""), None)
        if dry:
            raise config_error(
                f"{dry}: true makes the call check the request and create nothing, and runonce would "
                "record every run done"
            )
        document = load(self.api)
        method = document.method(self.method)
        assert method is not None  # the field validators ran
        if self.body is None and method.request is not None:
            check_body(document, method, {})  # the adapter sends {}: its required fields
        if self.running is not None:
            self._check_running(document, self.running)
        check_handles(document, method, self.params, self.body, self.reconcile)
        return self

    def _check_running(self, document: ApiDocument, running: RunningConfig) -> None:
        if self.reconcile is None:
            raise config_error(
                "running: reads the state with the reconcile method; give reconcile {method, params} too"
            )
        method = document.method(self.reconcile.method)
        assert method is not None  # the reconcile validator ran
        field = document.field(method.response, running.field) if method.response else None
        if field is None:
            raise config_error(
                f"running.field: {method.response or 'the answer'} (the answer of {method.id}) has no field "
                f"{running.field!r}"
            )
        allowed: list[str] = field.get("enum") or []
        if field.get("type") != "string" or field.get("format"):
            kind = f"a {field['format']} field" if field.get("format") else "not a string field"
            raise config_error(
                f"running.field: {running.field!r} is {kind}; a state is a string field (such as status.state)"
            )
        wrong = [value for value in running.values if allowed and value not in allowed]
        if wrong:
            raise config_error(
                f"running.values: {wrong[0]!r} is not a value of {running.field} (it takes: {', '.join(allowed)})"
            )

    @property
    def state_problem(self) -> str | None:
        """Why this route cannot tell whether an execution still runs (overlap: skip and wait ask)."""
        if self.running is None:
            return "the route's target has no 'running' {field, values} to read the state with"
        return None


def _dry_runs(value: Any, where: str) -> Iterator[str]:
    """Where a route sets `validateOnly` or `dryRun` to true (a parameter or a body field at any depth)."""
    if isinstance(value, dict):
        for key, item in value.items():
            place = f"{where}.{key}" if where else str(key)
            if key in DRY_RUN_FIELDS and item in (True, "true"):
                yield place
            yield from _dry_runs(item, place)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _dry_runs(item, f"{where}[{index}]")


def check_handles(
    document: ApiDocument,
    method: ApiMethod,
    params: dict[str, Any],
    body: dict[str, Any] | None,
    reconcile: ReconcileConfig | None,
) -> None:
    """The route fills from the run a field the method dedupes on, with ids the API takes; and a
    reconcile read, when given, reads the resource that id names."""
    handles = handles_of(document, method)
    filled = [h for h in handles if carries_run(value_at(params, body, h))]
    if not filled:
        raise config_error(_no_handle(document, method, handles, params, body))
    for handle in handles:
        value = value_at(params, body, handle)
        if value is not None and handle not in filled:
            raise config_error(
                f"{handle.path}: {value!r} does not tell runs apart, so {method.id} would take every run after "
                f"the first for a retry of it and start nothing; fill it from the run ({RUN_PLACEHOLDERS}) or "
                "leave it out"
            )
    for handle in filled:
        for sample in _samples(value_at(params, body, handle)):
            problem = id_problem(document.api, handle, wire(sample))  # (control characters: refused before)
            if problem:
                raise config_error(problem)
        collection = _collection_name(method, params)
        if handle.kind == "resource name" and handle.where == "body" and collection is not None:
            for name, parent in zip(_samples(value_at(params, body, handle)), _samples(collection), strict=True):
                if wire(name).rsplit("/", 1)[0] != parent:
                    raise config_error(
                        f"{handle.path}: {wire(name)!r} is not a name in {parent}, where {method.id} creates it "
                        f"({parent}/ID)"
                    )
    if reconcile is not None:
        _check_reconcile_reads(document, method, handles, filled, params, body, reconcile)


def _check_reconcile_reads(
    document: ApiDocument,
    method: ApiMethod,
    handles: list[Handle],
    filled: list[Handle],
    params: dict[str, Any],
    body: dict[str, Any] | None,
    reconcile: ReconcileConfig,
) -> None:
    """A reconcile read counts only when, for every sample run, it GETs the very resource the call
    creates: the path of the create's collection and the id the run filled (or the name the create
    takes), in the same project, location and parent. A read elsewhere finds nothing after a lost
    answer, or finds another resource."""
    named = [h for h in filled if h.names_resource]
    read = document.method(reconcile.method)
    assert read is not None  # the reconcile validator ran
    reads = [build_path(document, read, sample)[0] for sample in _samples(reconcile.params)]
    for handle in named:
        created = [
            _resource_path(document, method, sample_params, sample_body, handle)
            for sample_params, sample_body in zip(_samples(params), _samples(body), strict=True)
        ]
        if reads == created:
            return
    resource_ids = [h for h in handles if h.names_resource]
    if named:
        wanted = f"its name built from the value of {describe(named)}"
    elif resource_ids:
        wanted = f"fill {describe(resource_ids)} from the run and read the resource it names"
    else:
        wanted = f"{method.id} takes no client-chosen id, so its requestId alone dedupes: leave reconcile out"
    raise config_error(
        f"reconcile.params: the read must find the resource the run's id names ({wanted}); a read of a name "
        "the API picks, or of one merely holding ${run_id}, finds nothing after a lost answer"
    )


def _resource_path(
    document: ApiDocument, method: ApiMethod, params: dict[str, Any], body: dict[str, Any] | None, handle: Handle
) -> str:
    """The path (under the API's root) of the resource a create makes, with its params and body
    as one run fills them: the create's own path when it takes the name there (`PUT v1/{+name}`),
    else its collection's path and the resource's id."""
    path = build_path(document, method, params)[0]
    if handle.where == "params" and handle.field == "name":
        return path
    path = path.removesuffix(":" + method.id.rsplit(".", 1)[-1])  # Dataproc's `…/jobs:submit`: the collection
    resource_id = wire(value_at(params, body, handle)).rsplit("/", 1)[-1]
    return f"{path}/{quote(resource_id, safe='')}"


def _collection_name(method: ApiMethod, params: dict[str, Any]) -> str | None:
    """The name of the collection a create POSTs to (`projects/p/…/queues/q/tasks` of
    `v2/{+parent}/tasks`): its path from the first parameter on, as the route fills it; of a path
    without parameters, the collection after the version (`transferJobs` of `v1/transferJobs`)."""
    if method.http_method != "POST":
        return None
    start = method.path.find("{")
    if start < 0:
        top = re.sub(r"^v[0-9][a-z0-9]*/", "", method.path)
        return top if re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", top) else None
    name = method.path[start:]
    for parameter in method.path_parameters():
        value = params.get(parameter)
        if not isinstance(value, str):
            return None
        name = name.replace(f"{{+{parameter}}}", value).replace(f"{{{parameter}}}", value)
    return name


def _no_handle(
    document: ApiDocument, method: ApiMethod, handles: list[Handle], params: dict[str, Any], body: Any
) -> str:
    """Why the route cannot dedupe, with what the method does dedupe on (or that nothing)."""
    look_alike = [f"params.{name}" for name, value in params.items() if carries_run(value)] + [
        f"body.{name}" for name, value in (body or {}).items() if carries_run(value)
    ]
    not_handles = (
        f" ({', '.join(look_alike)} {'holds' if len(look_alike) == 1 else 'hold'} the run but "
        f"{method.id} does not dedupe on {'it' if len(look_alike) == 1 else 'them'})"
        if look_alike
        else ""
    )
    if not handles:
        return (
            f"no way to dedupe{not_handles}: {method.id} has no client-chosen id and no requestId, so a retry "
            "after a lost answer could run it twice and runonce cannot call it exactly once (a field ending in "
            "Id or holding ${run_id} is no handle, nor is a reconcile read of a name the API picks)"
        )
    return (
        f"no way to dedupe{not_handles}: fill from the run what {method.id} dedupes on: {describe(handles)} "
        f"(e.g. {EXAMPLE_HANDLES}); otherwise a retry after a lost answer could create a second execution"
    )


def _document(info: ValidationInfo) -> ApiDocument | None:
    api = info.data.get("api")
    return load(api) if api else None


def _method_of(info: ValidationInfo) -> ApiMethod | None:
    document, method = _document(info), info.data.get("method")
    return document.method(method) if document is not None and method else None


def _hint(document: ApiDocument, method_id: str) -> str:
    similar = document.similar_methods(method_id)
    return f" (methods like it: {', '.join(similar)})" if similar else ""


# --- the adapter -----------------------------------------------------------------------------------


class GoogleApiTarget(GoogleEngineTarget[GoogleApiTargetConfig]):
    """The engine driven by the route's own method, params and body."""

    type = "google_api"
    NOUN = "resource"

    def __init__(
        self, config: GoogleApiTargetConfig, http: httpx.AsyncClient, auth: GoogleAuth, endpoint: str | None = None
    ) -> None:
        super().__init__(config, http, auth, endpoint or config.endpoint)
        method = self.document.method(config.method)
        assert method is not None  # validated with the config
        self.method = method
        self.needs_schedule_time = uses_schedule_time(
            [config.params, config.body, config.reconcile and config.reconcile.params]
        )
        running = config.running
        self.running = Running(running.field, running=frozenset(running.values)) if running else None

    def api(self) -> str:
        return self.config.api

    def default_endpoint(self) -> str:
        return self.document.default_endpoint(_location(self.config.params))

    def describe(self, request: DispatchRequest) -> str:
        return f"call {self.method.id}"

    def describe_lookup(self, request: DispatchRequest) -> str:
        return f"look up the run's resource: {self.lookup_url(request)}"

    def create_call(self, request: DispatchRequest) -> Call:
        params = expand(self.config.params, request.run_id, request.schedule_time)
        body = None
        if self.method.request is not None:
            body = expand(self.config.body or {}, request.run_id, request.schedule_time)
        return Call(self.method.id, params, body)

    def lookup_call(self, request: DispatchRequest) -> Call | None:
        if self.config.reconcile is None:
            return None  # the run's id or requestId dedupes the re-sent call
        params = expand(self.config.reconcile.params, request.run_id, request.schedule_time)
        return Call(self.config.reconcile.method, params)

    def lookup_url(self, request: DispatchRequest) -> str | None:
        """The reconcile call for this run, as `relative_url` writes it; None without one."""
        lookup = self.lookup_call(request)
        return self.url_of(lookup) if lookup else None

    async def dispatch(self, request: DispatchRequest) -> str:
        # (a delivery with a body is refused by the engine first)
        if request.schedule_time is None and self.needs_schedule_time and not request.payload:
            raise TargetFailed(
                f"{self.describe(request)}: the route uses ${{schedule_time}} and this run has no schedule time"
            )
        return await super().dispatch(request)

    def created(self, answer: dict[str, Any], request: DispatchRequest) -> str:
        found = self.lookup_url(request)
        if found is not None:
            return found
        name = answer.get("name")
        return name if isinstance(name, str) and name else self.url_of(self.create_call(request))

    def found(self, answer: dict[str, Any], request: DispatchRequest) -> str:
        return self.url_of(self.lookup_call(request))  # type: ignore[arg-type]  # found only through it

    def adopted_without_lookup(self, request: DispatchRequest) -> str | None:
        """Without a reconcile call, ALREADY_EXISTS on the run's id is the proof (start-up accepted
        the route only with a handle the API dedupes on)."""
        return None if self.config.reconcile else self.url_of(self.create_call(request))

    def state_call(self, resource: str) -> str:
        return resource  # the recorded reconcile call, query and all


TARGET = TargetType(
    name="google_api",
    config=GoogleApiTargetConfig,
    adapter=GoogleApiTarget,
    build=GoogleApiTarget.build,
    # No grants derived: the method decides the permission; the route's IAM is the user's to grant.
    takes_payload=False,  # its workload is the route's: no delivery body
    event_payload="none",
)
