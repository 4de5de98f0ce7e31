"""Route configuration: which target each `/v1/routes/{route}:run` calls, and who may call it.

Loaded once at start-up from `RUNONCE_ROUTES_FILE` (YAML or JSON) or `RUNONCE_ROUTES` (inline).
Any mistake stops start-up with one `ConfigError` naming the file, the route and the field.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
import types
import typing
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from runonce import names
from runonce.run.delivery import (
    JOB_PATTERN,
    LOCATION_PATTERN,
    PATTERN_WORDS,
    PROJECT_PATTERN,
    SchedulePolicy,
    pattern_words,
)
from runonce.run.events import IDENTITY_KEYS, EventPolicy
from runonce.run.guarantees import RouteGuard
from runonce.schedules import ScheduleError, get_zone, parse_schedule
from runonce.settings import EMAIL_PATTERN, MAX_DURATION_SECONDS, ConfigError, Settings
from runonce.targets import TARGET_TYPES, PayloadNotSendable, TargetConfig, encode_json
from runonce.targets.base import NULL_IS_ABSENT, refuse_empty_keys
from runonce.targets.google_api_discovery import YAML_KINDS

ROUTE_NAME_PATTERN = rf"^{names.ROUTE_NAME}$"
"""Lower-case letters, digits, `-` and `_`, at most 63 characters (as in URLs and the run_id)."""

logger = logging.getLogger("runonce.routes")

MAX_CONCURRENT_DISPATCHES = 10_000
"""More dispatches in flight than one process could hold open is a typo."""
MAX_NESTING = 64
"""Deepest nesting of mappings and lists a routes file may have (a target's body included)."""

RouteName = Annotated[str, StringConstraints(pattern=ROUTE_NAME_PATTERN)]
Email = Annotated[str, StringConstraints(pattern=EMAIL_PATTERN)]


class Namespace(BaseModel):
    """The project and location that enter a run's key when the delivery's URL names none."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    project: Annotated[str, StringConstraints(pattern=PROJECT_PATTERN)] = Field(description="A project id.")
    location: Annotated[str, StringConstraints(pattern=LOCATION_PATTERN)] = Field(
        description="A location, such as us-central1."
    )

    @model_validator(mode="before")
    @classmethod
    def _no_empty_keys(cls, data: Any, info: ValidationInfo) -> Any:
        return refuse_empty_keys(cls, data, info)


class Route(BaseModel):
    """One route: where its runs go, who may call it, and the policies of its schedule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: TargetConfig = Field(description="The downstream: `type` picks it, the other fields are that type's.")
    source: Literal["scheduler", "pubsub", "cloudevents"] = Field(
        "scheduler",
        description="Who delivers: Cloud Scheduler and Cloud Tasks (headers), Pub/Sub push (the JSON envelope), "
        "or CloudEvents (Eventarc); a delivery of another shape is refused with 400.",
    )
    identity: list[str] | None = Field(
        None,
        min_length=1,
        description="An event route's identity keys: pubsub: subscription, message_id, ordering_key; cloudevents: "
        "source, id, type, subject; both: bucket, object, generation, metageneration, event_type. Default: "
        "subscription + message_id, or source + id; Cloud Storage events: bucket, object, generation, event_type "
        "(+ metageneration for metadata updates).",
    )
    event_payload: Literal["event", "data", "none"] | None = Field(
        None,
        description="An event route's payload to the target: the event (data decoded, attributes, ids), its data "
        "alone (a JSON object), or none (the run_id alone). Default: event; none for targets that take no "
        "delivery body, and for cloud_build_trigger (whose payload is substitutions).",
    )
    allowed_callers: list[Email] = Field(
        default_factory=list,
        description="Service-account emails allowed on this route (instead of RUNONCE_ALLOWED_CALLERS).",
    )
    namespace: Namespace | None = Field(
        None, description="The project and location of the run key when the URL names none."
    )
    # The Scheduler job's schedule (unix-cron or groc) and zone, as in the Job: needed to snap.
    schedule: str | None = Field(None, description="The Scheduler job's schedule, unix-cron or groc, as in the Job.")
    time_zone: str | None = Field(None, description="The job's time zone (tz database name); UTC when unset.")
    missing_schedule_time: Literal["reject", "snap"] = Field(
        "reject",
        description="A delivery without X-CloudScheduler-ScheduleTime: 400, or keyed by the latest fire time "
        "(`snap`, needs `schedule`).",
    )
    forced_runs: Literal["separate", "dedupe", "reject"] = Field(
        "separate",
        description="A Scheduler force run: a run of its own, the run at that time, or refused with 409.",
    )
    max_concurrent_dispatches: int | None = Field(
        None, ge=1, le=MAX_CONCURRENT_DISPATCHES, strict=True, description="Per process; over it: 429."
    )
    overlap: Literal["allow", "skip", "wait"] = Field(
        "allow", description="While the route's previous execution runs: dispatch, record skipped, or 409."
    )
    max_lateness_seconds: int | None = Field(
        None,
        gt=0,
        le=MAX_DURATION_SECONDS,
        strict=True,
        description="A run first claimed later than this after its schedule time is skipped.",
    )
    # Missed runs (runonce/missed/audit.py): the Scheduler job that calls this route, so every fire time of
    # `schedule` has the run_id that job's delivery would get; what the audit dispatches when one
    # is missed; and the body that job sends (a catch-up or backfill must send the same body).
    job: Annotated[str, StringConstraints(pattern=JOB_PATTERN)] | None = Field(
        None,
        description="The Scheduler job id that calls this route (needs `schedule` and `namespace`): "
        "every fire time's run_id is then known to the audit, catch-up and backfill.",
    )
    catch_up: Literal["none", "latest", "all"] = Field(
        "none", description="What the audit dispatches when a run was missed (needs `job`)."
    )
    catch_up_window_seconds: int | None = Field(
        None,
        ge=1,
        le=MAX_DURATION_SECONDS,
        strict=True,
        description="How far back a catch-up looks; below RUNONCE_RETENTION_SECONDS, which is the default.",
    )
    body: dict[str, Any] = Field(
        default_factory=dict,
        description="The JSON object the Scheduler job sends: a catch-up or backfill sends the same.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_empty_keys(cls, data: Any, info: ValidationInfo) -> Any:
        return refuse_empty_keys(cls, data, info)

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_schedule(value)
            except ScheduleError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("time_zone")
    @classmethod
    def _time_zone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                get_zone(value)
            except ScheduleError as exc:
                raise ValueError(exc.reason) from None
        return value

    @field_validator("body")
    @classmethod
    def _sendable(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            encode_json(value)
        except PayloadNotSendable as exc:
            raise ValueError(exc.message) from None
        return value

    @model_validator(mode="after")
    def _source_fields(self) -> Route:
        """An event route has no Scheduler job: the fields of schedules and missed runs are refused on
        it, and the event fields on a Scheduler route."""
        if self.source == "scheduler":
            for name in ("identity", "event_payload"):
                if name in self.model_fields_set:
                    raise ValueError(f"field {name!r}: applies only to routes with source pubsub or cloudevents")
            return self
        defaults = {"missing_schedule_time": "reject", "forced_runs": "separate", "catch_up": "none"}
        for name in ("schedule", "time_zone", "job", "catch_up_window_seconds", "body", *defaults):
            if name in self.model_fields_set and getattr(self, name) not in (None, {}, defaults.get(name)):
                raise ValueError(
                    f"field {name!r}: a route with source {self.source} has no Scheduler job: schedules, audit, "
                    "catch-up and backfill apply only to routes with source: scheduler"
                )
        kind = TARGET_TYPES[self.target.type]
        if self.event_payload in ("event", "data") and not kind.takes_payload:
            raise ValueError(
                f"field 'event_payload': a {self.target.type!r} target takes no delivery body (its workload is the "
                "route's); use event_payload: none, or leave it out"
            )
        allowed = IDENTITY_KEYS[self.source]
        for key in self.identity or ():
            if key not in allowed:
                raise ValueError(
                    f"field 'identity': unknown key {key!r} for source {self.source}; use: {', '.join(allowed)}"
                )
        if self.identity and len(set(self.identity)) != len(self.identity):
            raise ValueError("field 'identity': a key is listed twice")
        return self

    @model_validator(mode="after")
    def _snap_needs_schedule(self) -> Route:
        if self.missing_schedule_time == "snap" and self.schedule is None:
            raise ValueError("missing_schedule_time 'snap' needs the job's 'schedule' (and its 'time_zone')")
        return self

    @model_validator(mode="after")
    def _overlap_needs_state(self) -> Route:
        problem = TARGET_TYPES[self.target.type].state_problem(self.target) if self.overlap != "allow" else None
        if problem is not None:
            readers = sorted(name for name, kind in TARGET_TYPES.items() if kind.reads_state)
            raise ValueError(
                f"overlap {self.overlap!r} asks the target whether the previous execution still runs, and "
                f"{problem}; use {', '.join(readers)}, or overlap: allow"
            )
        return self

    @property
    def events(self) -> EventPolicy | None:
        """How the delivery parser reads an event route's deliveries; None for a Scheduler route."""
        if self.source == "scheduler":
            return None
        payload = self.event_payload or TARGET_TYPES[self.target.type].event_payload
        return EventPolicy(self.source, tuple(self.identity) if self.identity else None, payload)

    @property
    def guard(self) -> RouteGuard:
        """What the Runner checks before dispatching (guarantees.py)."""
        lateness = self.max_lateness_seconds
        return RouteGuard(self.overlap, timedelta(seconds=lateness) if lateness is not None else None)

    @model_validator(mode="after")
    def _audit_needs_a_key(self) -> Route:
        """Every fire time's run_id needs the job, the schedule and the namespace Scheduler's URL carries."""
        if self.catch_up != "none" and self.job is None:
            raise ValueError(
                f"field 'catch_up': {self.catch_up!r} needs 'job' (the Scheduler job id that calls this route)"
            )
        if self.catch_up == "none" and self.catch_up_window_seconds is not None:
            raise ValueError("field 'catch_up_window_seconds': applies only with catch_up 'latest' or 'all'")
        if self.job is not None and (self.schedule is None or self.namespace is None):
            missing = " and ".join(f"'{name}'" for name in ("schedule", "namespace") if getattr(self, name) is None)
            raise ValueError(
                f"field 'job': needs {missing}: a missed run's run_id is made from the job, its schedule time and the "
                "namespace (project, location) the job's URL carries"
            )
        return self

    @property
    def policy(self) -> SchedulePolicy:
        """What the delivery parser does with a missing or early schedule time on this route."""
        return SchedulePolicy(
            missing_schedule_time=self.missing_schedule_time,
            forced_runs=self.forced_runs,
            schedule=parse_schedule(self.schedule) if self.schedule else None,
            zone=get_zone(self.time_zone),
        )


class RoutesConfig(BaseModel):
    """A routes file: `RUNONCE_ROUTES_FILE` (YAML or JSON) or `RUNONCE_ROUTES` (inline)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    routes: dict[RouteName, Route] = Field(
        min_length=1,
        description="Route name (a-z, 0-9, `_` and `-`; at most 63; a letter or digit first) to route.",
    )


def routes_origin(settings: Settings) -> str:
    """Where the settings take the routes from, as start-up's refusals name it."""
    return f"routes file {settings.routes_file}" if settings.routes_file else "RUNONCE_ROUTES"


def load_routes(settings: Settings) -> dict[str, Route]:
    """The routes named by the settings, validated. Raises `ConfigError`."""
    if settings.routes_file and settings.routes:
        raise ConfigError("set RUNONCE_ROUTES_FILE or RUNONCE_ROUTES, not both")
    origin = routes_origin(settings)
    if settings.routes_file:
        try:
            text = Path(settings.routes_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{origin}: cannot read: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{origin}: {not_utf8(exc)}") from exc
    elif settings.routes:
        text = settings.routes
    else:
        raise ConfigError("no routes configured: set RUNONCE_ROUTES_FILE (a YAML or JSON file) or RUNONCE_ROUTES")
    routes = parse_routes(text, origin)
    for message in route_warnings(routes):
        logger.warning("%s: %s", origin, message)
    return routes


def not_utf8(exc: UnicodeDecodeError) -> str:
    """Why a file is not read as text, and how to fix it."""
    return f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); save it as UTF-8"


def one_line(origin: str, problems: Sequence[str]) -> str:
    """Several problems of one routes file as the one line start-up (and `runonce lint`) refuses it
    with: each named by `origin`, joined with `; `."""
    return "; ".join(f"{origin}: {problem}" for problem in problems)


def route_warnings(routes: Mapping[str, Route]) -> list[str]:
    """Start-up warnings: configurations that work but will reject deliveries Scheduler sends."""
    warnings = []
    for name, route in routes.items():
        if (
            route.schedule
            and not parse_schedule(route.schedule).header_guaranteed
            and route.missing_schedule_time == "reject"
        ):
            warnings.append(
                f"route {name!r}: groc schedule {route.schedule!r} with missing_schedule_time 'reject': Cloud "
                "Scheduler does not guarantee X-CloudScheduler-ScheduleTime for groc jobs, so such deliveries "
                "get 400; set missing_schedule_time: snap"
            )
    return warnings


def read_document(text: str) -> object:
    """`text` (JSON or YAML) read with the routes loader's rules (below). Raises `ConfigError`: one
    line, with the line and column where YAML gives them. `runonce lint` reads every file with it,
    so it refuses a file in the words start-up does."""
    return _read(text)[0]


def _read(text: str) -> tuple[object, bool]:
    """`read_document`'s data, and whether `text` was JSON (there a null is a field left out)."""
    try:
        data = _json(text) if text.lstrip()[:1] in ("{", "[") else _NOT_JSON
        if data is not _NOT_JSON:
            return data, True
        return yaml.load(text, Loader=_RoutesLoader), False  # a SafeLoader (below)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(yaml_problem(exc)) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML or JSON: {' '.join(str(exc).split())}") from exc


def parse_routes(text: str, origin: str) -> dict[str, Route]:
    """The routes in `text` (YAML or JSON), validated. Raises `ConfigError`: one line naming
    `origin`, the route, the field and the reason."""
    try:
        data, written_as_json = _read(text)
    except ConfigError as exc:
        raise ConfigError(f"{origin}: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ConfigError(f"{origin}: expected a mapping with a top-level 'routes:' key")
    too_big = _check_size(data)
    if too_big:
        raise ConfigError(f"{origin}: {too_big}")
    bad_key = _non_text_key(data)
    if bad_key:
        raise ConfigError(f"{origin}: {bad_key}")
    try:
        return dict(RoutesConfig.model_validate(data, context={NULL_IS_ABSENT: written_as_json}).routes)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(origin, exc)) from exc


_NOT_JSON = object()


def _json(text: str) -> object:
    """`text` read as JSON, with the routes loader's rules (no repeated key, no NaN, integers of
    at most 20 digits), or `_NOT_JSON` when it is not JSON (then it is read as YAML, which reports
    the error with its line). JSON is read as JSON because YAML 1.1 reads an escaped UTF-16 pair
    (`"\\ud83d\\ude00"`) as two halves that are not text."""
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_no_constant, parse_int=_short_int)
    except json.JSONDecodeError:
        return _NOT_JSON
    except RecursionError as exc:
        raise ConfigError(f"nested more than {MAX_NESTING} deep") from exc


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ConfigError(f"the key {key!r} is given twice in one object")
            seen.add(key)
    return value


def _no_constant(name: str) -> Any:
    raise ConfigError(f"{name} is not a JSON number")


def _short_int(digits: str) -> int:
    if len(digits.lstrip("-")) > 20:
        raise ConfigError("an integer is beyond 64 bits")
    return int(digits)


def yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    """`line 3, column 5: found the key 'a' twice`, in one line."""
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = " ".join(str(exc.problem or exc.context or "not valid YAML or JSON").split())
    return f"not valid YAML or JSON: {where}{problem}"


def _refused(problem: str, mark: yaml.Mark | None) -> ConfigError:
    """What the routes loader refuses that YAML allows, at its line and column."""
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return ConfigError(where + problem)


_INT = re.compile(r"[-+]?[0-9]+\Z")
_FLOAT = re.compile(
    r"(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z"
)
MAX_NODES = 100_000
"""Most values a routes file may hold, counting every use of a YAML alias (`*name`) anew."""


class _RoutesLoader(yaml.SafeLoader):
    """YAML's safe loader, stricter where a routes file could mean something else than it says:

    - a key given twice in one mapping is refused (YAML and JSON parsers keep the last one);
    - numbers are YAML 1.2's and JSON's: decimal ASCII digits, so `017` is not octal 15, `1_000`
      and `1:30` (sexagesimal 90) are not numbers, and `1e30` is a float (a string in YAML 1.1);
    - an integer is at most 20 digits, and nesting at most `MAX_NESTING` deep, so neither reaches
      Python's own limits (whose errors are tracebacks);
    - a set (`!!set`) is refused: it has no order, so a list made of it would differ per process;
    - a value YAML resolves but cannot build (an unquoted date that is no date, `2026-02-30`, a
      timestamp at hour 25) is refused at its route, field, line and column, asking to quote it;
      PyYAML's constructors raise Python's own errors there (`day is out of range for month`).
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._root: yaml.Node | None = None

    def construct_document(self, node: yaml.Node) -> Any:
        self._root = node
        return super().construct_document(node)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (yaml.YAMLError, ConfigError):
            raise
        except Exception as exc:  # any error of a constructor: one line where it is, never a traceback
            raise ConfigError(_unbuildable(self._root or node, node, exc)) from exc

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                event = self.peek_event()  # type: ignore[no-untyped-call]  # types-PyYAML leaves it untyped
                raise _refused(f"nested more than {MAX_NESTING} deep", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[object, object]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: SafeLoader's own error says so
                break
            if duplicate:
                raise _refused(f"the key {key!r} is given twice in one mapping", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = str(self.construct_scalar(node))
        if not _INT.match(text):
            raise _refused("an integer is written in decimal ASCII digits", node.start_mark)
        if len(text.lstrip("+-")) > 20:
            raise _refused("an integer is beyond 64 bits", node.start_mark)
        return int(text, 10)

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        text = str(self.construct_scalar(node))
        if not _FLOAT.match(text):
            raise _refused("a number is written in decimal ASCII digits", node.start_mark)
        return super().construct_yaml_float(node)


_TAG_WORDS = {
    "tag:yaml.org,2002:timestamp": "a date or time",
    "tag:yaml.org,2002:int": "an integer",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:bool": "true or false",
    "tag:yaml.org,2002:binary": "base64 bytes",
    "tag:yaml.org,2002:set": "a set",
}


def _unbuildable(root: yaml.Node, node: yaml.Node, exc: Exception) -> str:
    """Why YAML cannot build `node`, in one line: its route and field, line and column, what YAML
    read it as, and that quoting it makes it text."""
    path = _node_path(root, node)
    mark = node.start_mark
    kind = _TAG_WORDS.get(node.tag, f"a YAML {node.tag.rsplit(':', 1)[-1]}")
    reason = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(node, yaml.ScalarNode):
        text = str(node.value)
        if len(text) > 80:
            shown, advice = f"a value of {len(text)} characters", "quote it if it is text"
        else:
            shown, advice = text, "quote it if it is text: '" + text.replace("'", "''") + "'"
        what = f"{shown} reads as {kind} but is not one ({reason}); {advice}"
    else:
        what = f"this value reads as {kind} but cannot be built ({reason}); write it as plain text, a list or a mapping"
    return f"{_path_words(path)}line {mark.line + 1}, column {mark.column + 1}: {what}"


def _node_path(root: yaml.Node, target: yaml.Node) -> str:
    """The dotted path (`routes.r1.target.labels.day`, `...args[2]`) of `target` in the composed
    document, or "" when it is not found; an alias is followed once."""
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
                if key is target:
                    return path
                stack.append((value, f"{path}.{name}" if path else name))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, f"{path}[{index}]") for index, item in enumerate(node.value))
    return ""


def _path_words(path: str) -> str:
    """`route 'r1': field 'target.labels.day': ` for a path of the routes file ("" for none)."""
    if not path.startswith("routes."):
        if not path:
            return ""
        return f"at {path}: " if path.isprintable() else f"at {path!r}: "  # a key may hold a newline
    route, _, field = path.removeprefix("routes.").partition(".")
    route, bracket, rest = route.partition("[")
    field = f"{bracket}{rest}.{field}".strip(".") if bracket else field
    return f"route {route!r}: " + (f"field {field!r}: " if field else "")


# YAML 1.1's int and float resolvers out (each first character's list is copied, not shared with
# SafeLoader's), the decimal ones in.
_RoutesLoader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp) for tag, regexp in resolvers if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_RoutesLoader.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
_RoutesLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
_RoutesLoader.add_constructor("tag:yaml.org,2002:int", _RoutesLoader.construct_yaml_int)
_RoutesLoader.add_constructor("tag:yaml.org,2002:float", _RoutesLoader.construct_yaml_float)


def _no_set(loader: _RoutesLoader, node: yaml.Node) -> Any:
    """A YAML set (`!!set {a, b}`) has no order: a list built from it would differ between processes."""
    raise ValueError("a set has no order, so its items would go out in a different order in each process")


_RoutesLoader.add_constructor("tag:yaml.org,2002:set", _no_set)


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_size(data: object) -> str | None:
    """Why `data` is too big or too deep to validate (aliases can make a small file hold a huge or
    cyclic structure), or None."""
    stack: list[tuple[object, int]] = [(data, 1)]
    count = 0
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            return f"holds more than {MAX_NODES} values (counting each use of an alias)"
        if depth > MAX_NESTING:
            return f"nested more than {MAX_NESTING} deep (or an alias refers to itself)"
        if isinstance(value, str) and not _is_text(value):
            return "holds a string with half of a UTF-16 pair (an escape such as \\ud800): not text"
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for pair in value.items() for item in pair)
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)
    return None


def _non_text_key(data: Mapping[Any, Any]) -> str | None:
    """Where the file has a key that is not text (YAML reads `2024:`, `true:`, `null:` or
    `2026-01-31:` as a number, a boolean, null or a date; JSON and Google's APIs have text keys
    only), as one line naming the route and field, or None."""
    stack: list[tuple[object, str]] = [(data, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    return _key_line(path, key)
                stack.append((item, f"{path}.{key}" if path else key))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{index}]") for index, item in enumerate(value))
    return None


def _key_line(path: str, key: object) -> str:
    if key is None or isinstance(key, bool):
        kind, text = ("null", "null") if key is None else ("true or false", str(key).lower())
    else:
        kind, text = ("a number" if isinstance(key, (int, float)) else f"a {type(key).__name__}"), str(key)
    advice = f"is {kind}, not text (keys are text in JSON and in Google's APIs); quote it: '{text}'"
    if path == "routes":
        return f"route name {text}: {advice}"
    route, _, field = path.removeprefix("routes.").partition(".")
    if not path.startswith("routes."):
        return f"the key {text} at {path or 'the top'} {advice}"
    return f"route {route!r}: {f'field {field!r}: ' if field else ''}the key {text} {advice}"


ROUTE_PATTERN_WORDS = {
    **PATTERN_WORDS,
    ROUTE_NAME_PATTERN: (
        "a route name: 1 to 63 lower-case letters, digits, '-' and '_', starting with a letter or digit"
    ),
    EMAIL_PATTERN: "an email address (the caller's service account, e.g. scheduler@my-project.iam.gserviceaccount.com)",
}
"""What every pattern of the routes file accepts, in words (a test holds every pattern to a line here)."""


def format_validation_error(origin: str, exc: ValidationError) -> str:
    """`routes file r.yaml: route 'etl': field 'target.url': Input should be a valid URL`; several
    problems are joined with `; ` so the error stays one line."""
    lines = []
    for error in exc.errors():
        loc: list[Any] = list(error["loc"])
        where = ""
        if len(loc) >= 2 and loc[0] == "routes":
            where = f"route {loc[1]!r}: "
            loc = loc[2:]
            if loc and loc[0] == "[key]":  # an invalid route name
                where, loc = f"route name {_quoted(error.get('input'))}: ", []
        if len(loc) >= 2 and loc[0] == "target" and loc[1] in TARGET_TYPES:
            del loc[1]  # the union's tag: "target.http.url" -> "target.url"
        field = ".".join(str(part) for part in loc)
        lines.append(f"{where}{f'field {field!r}: ' if field else ''}{_in_words(error)}")
    return one_line(origin, lines)


def _quoted(value: object) -> str:
    """`value` as an error quotes it: whole when short, else its length (a value of thousands of
    characters would drown the line it is in)."""
    shown = repr(value)
    return shown if len(shown) <= 80 else f"a value of {len(str(value))} characters"


def _fields_hint(loc: list[Any]) -> str:
    """What the block an unknown key (`loc[-1]`) was found in takes, and the field it is closest to."""
    if not loc:
        return ""
    block: Any = RoutesConfig
    for part in loc[:-1]:
        block = _unwrapped(block)
        if isinstance(block, type) and issubclass(block, BaseModel):
            block = block.model_fields[part].annotation if part in block.model_fields else None
        elif typing.get_origin(block) in (dict, list):
            block = typing.get_args(block)[-1]  # a route name, or a list's index
        elif part in TARGET_TYPES:  # the `target:` union, by its `type`
            block = TARGET_TYPES[part].config
        else:
            return ""
    block = _unwrapped(block)
    if not (isinstance(block, type) and issubclass(block, BaseModel)):
        return ""
    fields = list(block.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), fields, n=1)
    return f" ({f'did you mean {close[0]!r}? ' if close else ''}this block takes: {', '.join(fields)})"


def _unwrapped(kind: Any) -> Any:
    """`X` of `Annotated[X, …]` and of `X | None`."""
    while True:
        if typing.get_origin(kind) is Annotated:
            kind = typing.get_args(kind)[0]
            continue
        if typing.get_origin(kind) in (typing.Union, types.UnionType):
            kinds = [arg for arg in typing.get_args(kind) if arg is not type(None)]
            if len(kinds) == 1:
                kind = kinds[0]
                continue
        return kind


def _in_words(error: Any) -> str:
    """pydantic's error as a user of the routes file needs it: what is allowed, never an expression."""
    kind, ctx, given = error["type"], error.get("ctx") or {}, error.get("input")
    if kind == "string_pattern_mismatch":
        return f"{_quoted(given)} {pattern_words(ctx['pattern'], str(given), ROUTE_PATTERN_WORDS)}"
    if kind == "union_tag_invalid":
        tag = str(ctx["discriminator"]).strip("'")
        return f"unknown {tag} {ctx['tag']!r}; use one of: {ctx['expected_tags']}"
    if kind == "union_tag_not_found":
        tag = str(ctx["discriminator"]).strip("'")
        return f"needs a {tag}: one of {', '.join(repr(name) for name in TARGET_TYPES)}"
    if kind == "extra_forbidden":
        return f"{error['msg']}{_fields_hint(list(error['loc']))}"
    if kind in ("int_type", "int_from_float", "int_parsing"):
        unquote = " (without quotes)" if isinstance(given, str) and given.strip().isdigit() else ""
        return f"must be a whole number written in digits{unquote}, got {_quoted(given)}"
    if kind.endswith("_type") and given is None:  # an empty YAML key
        return "is empty (null): give it a value (an empty key in YAML is null) or remove the key"
    if kind == "string_type" and type(given).__name__ in ("date", "datetime"):  # YAML read `2026-01-31` as a date
        return f"must be text, got {YAML_KINDS[type(given).__name__]} ({given}): quote it ('{given}')"
    if kind == "string_type" and isinstance(given, bool):  # YAML read `no` as false
        return f"must be text, got {str(given).lower()} (YAML reads yes, no, on, off, true, false so): quote it"
    if kind == "string_type" and isinstance(given, (int, float)):  # YAML read `5` or `2024.06` as a number
        return f"must be text, got the number {given}: quote it ('{given}')"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false (without quotes), got {_quoted(given)}"
    return str(error["msg"]).removeprefix("Value error, ")
