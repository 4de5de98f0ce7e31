"""Route configuration: which target each `/v1/routes/{route}:run` calls, and who may call it.

Loaded once at start-up from `RUNONCE_ROUTES_FILE` (YAML or JSON) or `RUNONCE_ROUTES` (inline).
Any mistake stops start-up with one `ConfigError` naming the file, the route and the field.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator, model_validator

from runonce import names
from runonce.run.delivery import JOB_PATTERN, LOCATION_PATTERN, PROJECT_PATTERN, SchedulePolicy
from runonce.run.guarantees import RouteGuard
from runonce.schedules import ScheduleError, get_zone, parse_schedule
from runonce.settings import EMAIL_PATTERN, MAX_DURATION_SECONDS, ConfigError, Settings
from runonce.targets import TARGET_TYPES, PayloadNotSendable, TargetConfig, encode_json

ROUTE_NAME_PATTERN = rf"^{names.ROUTE_NAME}$"
"""Lower-case letters, digits, `-` and `_`, at most 63 characters (as in URLs and the run_id)."""

logger = logging.getLogger("runonce.routes")

RouteName = Annotated[str, StringConstraints(pattern=ROUTE_NAME_PATTERN)]
Email = Annotated[str, StringConstraints(pattern=EMAIL_PATTERN)]


class Namespace(BaseModel):
    """The project and location that enter a run's key when the delivery's URL names none."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    project: Annotated[str, StringConstraints(pattern=PROJECT_PATTERN)] = Field(description="A project id.")
    location: Annotated[str, StringConstraints(pattern=LOCATION_PATTERN)] = Field(
        description="A location, such as us-central1."
    )


class Route(BaseModel):
    """One route: where its runs go, who may call it, and the policies of its schedule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: TargetConfig = Field(description="The downstream: `type` picks it, the other fields are that type's.")
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
    max_concurrent_dispatches: int | None = Field(None, ge=1, description="Per process; over it: 429.")
    overlap: Literal["allow", "skip", "wait"] = Field(
        "allow", description="While the route's previous execution runs: dispatch, record skipped, or 409."
    )
    max_lateness_seconds: int | None = Field(
        None, gt=0, strict=True, description="A run first claimed later than this after its schedule time is skipped."
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
        description="How far back a catch-up looks; below RUNONCE_RETENTION_SECONDS, which is the default.",
    )
    body: dict[str, Any] = Field(
        default_factory=dict,
        description="The JSON object the Scheduler job sends: a catch-up or backfill sends the same.",
    )

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
    def _snap_needs_schedule(self) -> Route:
        if self.missing_schedule_time == "snap" and self.schedule is None:
            raise ValueError("missing_schedule_time 'snap' needs the job's 'schedule' (and its 'time_zone')")
        return self

    @model_validator(mode="after")
    def _overlap_needs_state(self) -> Route:
        if self.overlap != "allow" and not TARGET_TYPES[self.target.type].reads_state:
            readers = sorted(name for name, kind in TARGET_TYPES.items() if kind.reads_state)
            raise ValueError(
                f"overlap {self.overlap!r} asks the target whether the previous execution still runs, and a "
                f"{self.target.type!r} target cannot tell; use {', '.join(readers)}, or overlap: allow"
            )
        return self

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


def load_routes(settings: Settings) -> dict[str, Route]:
    """The routes named by the settings, validated. Raises `ConfigError`."""
    if settings.routes_file and settings.routes:
        raise ConfigError("set RUNONCE_ROUTES_FILE or RUNONCE_ROUTES, not both")
    if settings.routes_file:
        origin = f"routes file {settings.routes_file}"
        try:
            text = Path(settings.routes_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{origin}: cannot read: {exc.strerror}") from exc
    elif settings.routes:
        origin, text = "RUNONCE_ROUTES", settings.routes
    else:
        raise ConfigError("no routes configured: set RUNONCE_ROUTES_FILE (a YAML or JSON file) or RUNONCE_ROUTES")
    routes = parse_routes(text, origin)
    for message in route_warnings(routes):
        logger.warning("%s: %s", origin, message)
    return routes


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


def parse_routes(text: str, origin: str) -> dict[str, Route]:
    try:
        data = yaml.safe_load(text)  # YAML 1.1 is a superset of JSON: one parser for both
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin}: not valid YAML or JSON: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ConfigError(f"{origin}: expected a mapping with a top-level 'routes:' key")
    try:
        return dict(RoutesConfig.model_validate(data).routes)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(origin, exc)) from exc


def format_validation_error(origin: str, exc: ValidationError) -> str:
    """`routes file r.yaml: route 'etl': field 'target.url': Input should be a valid URL`, one line
    per problem."""
    lines = []
    for error in exc.errors():
        loc: list[Any] = list(error["loc"])
        where = ""
        if len(loc) >= 2 and loc[0] == "routes":
            where = f"route {loc[1]!r}: "
            loc = loc[2:]
            if loc and loc[0] == "[key]":  # an invalid route name
                where, loc = f"route name {error.get('input')!r}: ", []
        if len(loc) >= 2 and loc[0] == "target" and loc[1] in TARGET_TYPES:
            del loc[1]  # the union's tag: "target.http.url" -> "target.url"
        field = ".".join(str(part) for part in loc)
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "string_pattern_mismatch":
            message = f"{error.get('input')!r} does not match {error['ctx']['pattern']}"
        lines.append(f"{origin}: {where}{f'field {field!r}: ' if field else ''}{message}")
    return "\n".join(lines)
