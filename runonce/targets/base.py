"""The target interface: one adapter per downstream type, one method to implement.

An adapter either returns the resource it created or raises one of these, which decide what
happens to the claim and what Scheduler is told:

    TargetError
     ├── TargetThrottled       the target said slow down; nothing created     -> 429, claim released
     ├── TargetFailed          the target refused; nothing created            -> 502, claim released
     └── TargetOutcomeUnknown  the request may have created something        -> 504, claim kept

Adapters translate their client's errors into these in one place (like httpx's
`map_httpcore_exceptions`) and chain the original with `from exc`.

The one rule for errors no adapter translated: an error raised *before anything was sent*
(`NOTHING_SENT`: no connection made, or a payload that cannot be encoded) is `TargetFailed`, since
nothing can have been created; any other unexpected error is `TargetOutcomeUnknown`.
"""

from __future__ import annotations

import email.utils
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

import httpx
from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator
from pydantic_core import PydanticCustomError

from runonce.errors import RunonceError

MAX_PAYLOAD_DEPTH = 64
"""Deepest nesting of objects and arrays in a payload: well below the recursion limits of Python's
JSON encoder and of protobuf (100), leaving room for the envelope each target wraps around it."""


class TargetConfigModel(BaseModel):
    """A route's target block, or a part of one: unknown keys refused, immutable once loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    NULL_CHECKED: ClassVar[frozenset[str]] = frozenset()
    """Fields whose own check says more of an empty key than the rule here."""

    @model_validator(mode="before")
    @classmethod
    def _no_empty_keys(cls, data: Any, info: ValidationInfo) -> Any:
        return refuse_empty_keys(cls, data, info, cls.NULL_CHECKED)


def config_error(message: str) -> PydanticCustomError:
    """A route's mistake as pydantic reports it (the routes loader makes it one line). No context:
    pydantic then shows the message as it is, braces included."""
    return PydanticCustomError("target_config", message)  # pragma: no mutate - routes shows the message, not the type


NULL_IS_ABSENT = "null_is_absent"
"""Validation context of a routes document written as JSON (Terraform's `jsonencode` writes an unset
attribute as null): there a null field is one left out."""


def refuse_empty_keys(
    model: type[BaseModel], data: Any, info: ValidationInfo, checked_elsewhere: frozenset[str] = frozenset()
) -> Any:
    """A YAML key with nothing under it (`oidc_token:` whose lines are commented out: null) is refused,
    never taken for the field's default: runonce does not guess what its author left out. In JSON, a
    null is the field left out."""
    if not isinstance(data, dict):
        return data
    fields = model.model_fields.keys() - checked_elsewhere
    nulls = [key for key, value in data.items() if value is None and key in fields]
    if nulls and (info.context or {}).get(NULL_IS_ABSENT):
        return {key: value for key, value in data.items() if key not in nulls}
    if nulls:
        required = model.model_fields[nulls[0]].is_required()
        raise PydanticCustomError(  # pragma: no mutate - routes shows the message, not the type
            "empty_key",
            f"{nulls[0]}: is empty (null); a value is needed here: give it a value (an empty key in YAML is null)"
            + ("" if required else " or remove the key"),
        )
    return data


class TargetError(RunonceError):
    """Base of dispatch and reconciliation outcomes other than success."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class TargetThrottled(TargetError):
    """The target asked us to slow down (HTTP 429 / RESOURCE_EXHAUSTED). Nothing was created."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class TargetFailed(TargetError):
    """The target answered and created nothing. The run may be dispatched again at once."""


class TargetOutcomeUnknown(TargetError):
    """The request may have reached the target (timeout, reset after sending, 504), or a
    reconciliation could not tell. The claim is kept; a later attempt reconciles."""


class PayloadNotSendable(TargetFailed):
    """The payload cannot be encoded as the JSON every target sends: nothing was sent."""


NOTHING_SENT: tuple[type[Exception], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.UnsupportedProtocol,
    PayloadNotSendable,
)
"""Errors raised before a byte of the request left: nothing can have been created downstream."""


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds or HTTP-date), None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # isdigit() alone takes '²', which float() refuses
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def encode_json(value: Any) -> str:
    """`value` as the JSON text targets send, or `PayloadNotSendable` saying which rule it breaks
    (never the value itself: payloads are not logged). The web layer applies the same check at
    intake, so a body accepted there can always be sent."""
    level, depth = [value], 0
    while containers := [v for v in level if isinstance(v, (dict, list))]:
        depth += 1
        if depth > MAX_PAYLOAD_DEPTH:
            raise PayloadNotSendable(f"the payload nests objects and arrays deeper than {MAX_PAYLOAD_DEPTH} levels")
        level = [item for v in containers for item in (v.values() if isinstance(v, dict) else v)]
        if any(isinstance(v, int) and not -(2**63) <= v < 2**63 for v in level):
            raise PayloadNotSendable("the payload holds an integer beyond 64 bits (Google's APIs take int64)")
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PayloadNotSendable("the payload holds a string that is not valid Unicode (a lone surrogate)") from exc
    except ValueError as exc:
        raise PayloadNotSendable("the payload holds a number that is not finite (JSON has no Infinity or NaN)") from exc
    except TypeError as exc:
        raise PayloadNotSendable(f"the payload holds a value JSON cannot represent ({type(exc).__name__})") from exc
    return text


@dataclass(frozen=True)
class DispatchRequest:
    """What every target receives for one run."""

    run_id: str
    route: str
    job: str
    schedule_time: str | None
    source: str
    payload: dict[str, Any] = field(default_factory=dict)
    task: str | None = None
    attempt: int = 1
    created_at: datetime | None = None
    """When the run was first claimed: no execution of it can be older (bounds reconciliation)."""

    def runonce_fields(self) -> dict[str, Any]:
        """The run's identity as handed downstream (`job`, `schedule_time`, `source`)."""
        fields: dict[str, Any] = {"job": self.job, "schedule_time": self.schedule_time, "source": self.source}
        if self.task is not None:
            fields["task"] = self.task
        return fields


class Target(ABC):
    """One configured downstream. Instances live for the process and are shared by requests."""

    type: str

    @abstractmethod
    async def dispatch(self, request: DispatchRequest) -> str:
        """Start the run downstream, passing `request.run_id` as the idempotency token.

        Return the resource created (execution name, build name, URL). Raise `TargetThrottled`,
        `TargetFailed` or `TargetOutcomeUnknown` as documented at the top of this module.
        """

    async def reconcile(self, request: DispatchRequest) -> str | None:
        """Called before dispatching a run whose earlier attempt may have created something (its
        lease ran out, or its outcome was unknown); that attempt recorded no resource, so find it
        downstream by `request.run_id`.

        Return the resource that earlier attempt created, or None when there is none — or when the
        downstream dedupes on the token itself, so dispatching again is safe (the default).
        Raise `TargetOutcomeUnknown` when it cannot tell: the run is then never dispatched blind.
        """
        return None

    async def is_running(self, resource: str) -> bool:
        """Whether the execution `resource` (the string `dispatch` returned and the record keeps
        as target.resource) is still running; an execution that no longer exists is not. Raise
        `TargetOutcomeUnknown` when it cannot read the state (network error, 5xx, permission).
        Targets that cannot tell do not override it (routes with `overlap: skip|wait` refuse them)."""
        raise NotImplementedError

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""
