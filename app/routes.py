"""Route configuration: which target each `/v1/routes/{route}:run` calls, and who may call it.

Loaded once at start-up from `RUNONCE_ROUTES_FILE` (YAML or JSON) or `RUNONCE_ROUTES` (inline).
Any mistake stops start-up with one `ConfigError` naming the file, the route and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from .delivery import LOCATION_PATTERN, PROJECT_PATTERN
from .settings import ConfigError, Settings
from .targets import TargetConfig

ROUTE_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
"""Lower-case letters, digits, `-` and `_`, at most 63 characters (as in URLs and the run_id)."""

_TARGET_TYPES = {"log", "http", "workflows", "cloud_run_job", "cloud_build_trigger"}

RouteName = Annotated[str, StringConstraints(pattern=ROUTE_NAME_PATTERN)]
Email = Annotated[str, StringConstraints(pattern=r"^[^@\s,]+@[^@\s,]+$")]


class Namespace(BaseModel):
    """The project and location that enter a run's key when the delivery's URL names none."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    project: Annotated[str, StringConstraints(pattern=PROJECT_PATTERN)]
    location: Annotated[str, StringConstraints(pattern=LOCATION_PATTERN)]


class Route(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    target: TargetConfig
    allowed_callers: list[Email] = Field(default_factory=list)
    namespace: Namespace | None = None


class RoutesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    routes: dict[RouteName, Route] = Field(min_length=1)


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
        raise ConfigError(
            "no routes configured: set RUNONCE_ROUTES_FILE (a YAML or JSON file) or RUNONCE_ROUTES"
        )
    return parse_routes(text, origin)


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
        if len(loc) >= 2 and loc[0] == "target" and loc[1] in _TARGET_TYPES:
            del loc[1]  # the union's tag: "target.http.url" -> "target.url"
        field = ".".join(str(part) for part in loc)
        message = error["msg"]
        if error["type"] == "string_pattern_mismatch":
            message = f"{error.get('input')!r} does not match {error['ctx']['pattern']}"
        lines.append(f"{origin}: {where}{f'field {field!r}: ' if field else ''}{message}")
    return "\n".join(lines)

