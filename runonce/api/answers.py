"""Every error answer, in one place: which HTTP status, `status` word and headers each
`errors.DeliveryError` family gets (`ANSWERS`; with `SUCCESSES`, the statuses reference page), how its
body looks (`render`), the exception handlers `create_app` installs, and the OpenAPI
`responses=` the endpoints declare.

The domain (errors.py) knows nothing of HTTP; this table is the only place that does. The `status`
word is each family's own (`errors.DeliveryError.status`), which the CLI's backfill output shares.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from runonce import errors


@dataclass(frozen=True)
class Answer:
    http_status: int
    status: str
    description: str
    pubsub: str
    """What Pub/Sub push (and Eventarc, which delivers through it) does with this answer: it acks
    102, 200, 201, 202 and 204 and redelivers anything else, without reading Retry-After."""


ACK = "ack: the run is done (or will never be), so the message must not come back"
NACK_PERMANENT = (
    "nack: it will never succeed, but acking would drop the message unseen; the dead-letter topic keeps it "
    "after max_delivery_attempts"
)
NACK_RETRY = "nack: a redelivery can succeed (the subscription's backoff spaces them; Retry-After is not read)"


ANSWERS: dict[type[errors.DeliveryError], Answer] = {
    errors.InvalidDelivery: Answer(
        400,
        errors.InvalidDelivery.status,
        "Missing or invalid identity headers, query or body (or a delivery of another shape than the route's source).",
        NACK_PERMANENT,
    ),
    errors.PayloadTooLarge: Answer(413, errors.PayloadTooLarge.status, "Request body over 32 KiB.", NACK_PERMANENT),
    errors.Unauthenticated: Answer(
        401, errors.Unauthenticated.status, "No or invalid bearer token.", NACK_PERMANENT + " (fix the push auth)"
    ),
    errors.Forbidden: Answer(
        403, errors.Forbidden.status, "The caller is not allowed on this route.", NACK_PERMANENT + " (fix the callers)"
    ),
    errors.NotFound: Answer(404, errors.NotFound.status, "Unknown route (or run).", NACK_PERMANENT),
    errors.InProgress: Answer(
        409,
        errors.InProgress.status,
        "Another attempt holds a live lease on this run; retry after Retry-After seconds.",
        NACK_RETRY + ": after the lease the run is done or taken over",
    ),
    errors.ForcedRunRefused: Answer(
        409,
        errors.ForcedRunRefused.status,
        "A Scheduler force run on a route with forced_runs: reject; nothing was claimed.",
        "not answered on event routes (no force runs)",
    ),
    errors.Waiting: Answer(
        409,
        errors.Waiting.status,
        "overlap: wait (or skip, when the state cannot be read): the route's previous execution is still "
        "running; the claim was released, retry after Retry-After seconds.",
        NACK_RETRY + ": the previous execution may have ended by then",
    ),
    errors.PayloadMismatch: Answer(
        422,
        errors.PayloadMismatch.status,
        "This run_id was delivered before with a different body.",
        "not answered on event routes: an event's identity is its whole key, its body is not compared",
    ),
    errors.Throttled: Answer(
        429,
        errors.Throttled.status,
        "The target or the route's concurrency limit says slow down; the claim was released.",
        NACK_RETRY,
    ),
    errors.Failed: Answer(
        502,
        errors.Failed.status,
        "The target failed and created nothing; the claim was released, a retry dispatches again.",
        NACK_RETRY + ": nothing was created; a redelivery dispatches again",
    ),
    errors.Unavailable: Answer(
        503,
        errors.Unavailable.status,
        "The claim store is unreachable; the target was not called.",
        NACK_RETRY,
    ),
    errors.OutcomeUnknown: Answer(
        504,
        errors.OutcomeUnknown.status,
        "The target may have acted (timeout, lost response); the claim is kept and the run is "
        "reconciled after the lease.",
        NACK_RETRY + ": the redelivery after the lease reconciles, never dispatches blind",
    ),
}
"""Each family's answer; a subclass (errors.py's leaves) gets its nearest family's."""

INTERNAL_ERROR = "internal_error"
"""The outcome the delivery line carries for a 500 (a bug: no answer of the table is one)."""

SUCCESSES: tuple[Answer, ...] = (
    Answer(
        200,
        "processed",
        "This attempt claimed the run and the target accepted it (or reconciliation found its execution).",
        ACK,
    ),
    Answer(
        200,
        "duplicate",
        "The run already completed: its stored answer is replayed (Runonce-Replayed: true); the target is not called.",
        ACK,
    ),
    Answer(
        200,
        "skipped",
        "Not dispatched: first claimed later than max_lateness_seconds, or the route's previous execution still "
        "running (overlap: skip); `reason` says which, and every retry replays it.",
        ACK + " (skipped for good: every redelivery would replay the skip)",
    ),
)
"""The 200 answers (the runner's `RunResult`), for the OpenAPI description and the statuses page."""

RESPONSES: dict[int | str, dict[str, Any]] = {
    a.http_status: {"description": f"`{a.status}`: {a.description}"} for a in reversed(ANSWERS.values())
}
"""For an endpoint's OpenAPI `responses=`: one entry per status code, the first family listed
with that code describing it (409: `in_progress`)."""


def answer_for(exc: errors.DeliveryError) -> Answer:
    for cls in type(exc).__mro__:
        if cls in ANSWERS:
            return ANSWERS[cls]
    raise TypeError(f"{type(exc).__name__} has no answer: add its family to ANSWERS")


@dataclass(frozen=True)
class Rendered:
    http_status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


def render(exc: errors.DeliveryError) -> Rendered:
    """The answer to `exc`: its status, the body (`run_id`, `status`, `route`, `target`, `error`)
    and headers (`Retry-After`, whole seconds, at least 1; `WWW-Authenticate` for a 401)."""
    answer = answer_for(exc)
    body: dict[str, Any] = {}
    if exc.run_id is not None:
        body["run_id"] = exc.run_id
    body["status"] = answer.status
    body["route"] = exc.route
    if exc.target is not None:
        body["target"] = exc.target
    error: dict[str, Any] = {"message": exc.message}
    if exc.field is not None:
        error["field"] = exc.field
    body["error"] = error
    return Rendered(answer.http_status, body, _headers(exc))


def _headers(exc: errors.DeliveryError) -> dict[str, str]:
    if isinstance(exc, errors.Unauthenticated):
        return {"WWW-Authenticate": 'Bearer error="invalid_token"' if exc.token_sent else "Bearer"}
    if exc.retry_after is None:
        return {}
    return {"Retry-After": str(max(1, int(-(-exc.retry_after // 1))))}  # ceil, at least 1


async def delivery_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.DeliveryError)
    if exc.route is None:
        exc.route = request.path_params.get("route")
    answer = render(exc)
    return JSONResponse(answer.body, status_code=answer.http_status, headers=answer.headers)


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own answers (no such path 404, wrong method 405) in runonce's body shape."""
    assert isinstance(exc, StarletteHTTPException)
    status = "not_found" if exc.status_code == 404 else "invalid"  # 405: a method the endpoint does not take
    body = {"status": status, "route": None, "error": {"message": str(exc.detail)}}
    return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    field_name = ".".join(str(p) for p in first["loc"])
    return await delivery_error(request, errors.InvalidDelivery(field_name, str(first["msg"])))


HANDLERS: dict[int | type[Exception], Callable[[Request, Any], Coroutine[Any, Any, Response]]] = {
    errors.DeliveryError: delivery_error,
    StarletteHTTPException: http_error,
    RequestValidationError: validation_error,
}
"""For `FastAPI(exception_handlers=...)`."""
