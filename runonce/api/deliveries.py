"""POST /v1/routes/{route}:run: authenticate, identify the run (delivery.py), read the body, and
hand both to the `Runner`. Everything a run *is* (its run_id, its body's hash) is decided in
delivery.py; this module only carries the request there and the answer back."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from runonce import errors, logs
from runonce.api.answers import INTERNAL_ERROR, RESPONSES, SUCCESSES, answer_for
from runonce.api.deps import AuthDep, ClockDep, RoutesDep, RunnerDep, SettingsDep
from runonce.api.intake import query_params, read_body, read_raw
from runonce.auth.callers import Authenticator
from runonce.routes import Route
from runonce.run.delivery import ROUTE_PATH, Delivery, parse_delivery, parse_namespace
from runonce.run.guarantees import LATE_SOURCES
from runonce.run.sources import parse_event, refuse_envelope, refuse_event_headers
from runonce.settings import Settings

router = APIRouter()


@router.post(
    ROUTE_PATH,
    responses={
        **RESPONSES,
        200: {"description": "; ".join(f"`{a.status}`: {a.description}" for a in SUCCESSES)},
    },
    summary="Deliver one run: a Scheduler or Tasks delivery, a Pub/Sub push or a CloudEvent, by the route's source",
)
async def deliver(
    route: str,
    request: Request,
    settings: SettingsDep,
    routes: RoutesDep,
    auth: AuthDep,
    runner: RunnerDep,
    clock: ClockDep,
) -> JSONResponse:
    # The delivery's one outcome line (api/access_log.py) is filled in as we learn things.
    # `route` is filled in once the caller is authenticated and the route is configured: the
    # path is the caller's text until then (never logged, never a metric label).
    outcome: dict[str, Any] = {"outcome": None, "run_id": None, "route": None}
    request.state.outcome = outcome
    try:
        delivery, event_body = await _identify(route, request, settings, routes, auth, clock, outcome)
        logs.bind(labels={"run_id": delivery.run_id, "route": route})
        if event_body is not None:
            payload, body_sha256 = event_body
        else:
            payload, body_sha256 = await read_body(request, route, delivery.run_id)
            try:
                refuse_envelope(payload)
            except errors.InvalidDelivery as exc:
                exc.run_id = delivery.run_id
                raise
        result = await runner.run(delivery, payload, body_sha256)
    except errors.DeliveryError as exc:
        outcome.update(outcome=answer_for(exc).status, error=exc.message)
        if exc.run_id:
            outcome["run_id"] = exc.run_id
        if exc.target is not None:
            outcome["target"] = exc.target
        raise
    except Exception:
        outcome["outcome"] = INTERNAL_ERROR
        raise
    body = result.body()
    outcome.update(
        outcome=result.status,
        run_id=result.record.run_id,
        attempt=result.record.attempts,
        target=result.record.target,
    )
    if result.recovered_failure:  # a retry made an earlier `failed` answer good (Terraform's target_failures)
        outcome["recovered_failure"] = True
    if "reason" in body:  # skipped: late or overlap
        outcome.update(reason=body["reason"], message=body["message"])
    headers = {"Runonce-Replayed": "true"} if result.replayed else {}
    return JSONResponse(body, headers=headers)


async def _identify(
    route: str,
    request: Request,
    settings: Settings,
    routes: Mapping[str, Route],
    auth: Authenticator,
    clock: Callable[[], datetime],
    outcome: dict[str, Any],
) -> tuple[Delivery, tuple[dict[str, Any], str] | None]:
    """Who calls, on which configured route, for which run: 401/403/404/400/409 before any claim.
    An event route's run is in its body: its payload and body hash come back with it (else None)."""
    caller = await auth.authenticate(request.headers)
    outcome["caller"] = caller
    config = routes.get(route)
    if config is None:
        raise errors.NotFound(  # the name is the caller's text: it is in the answer's `route`, never logged
            f"no route of that name is configured; this instance has {len(routes)} route(s): check the "
            "job's URI (/v1/routes/ROUTE:run) against RUNONCE_ROUTES_FILE",
            route=route,
        )
    request.state.logged_path = ROUTE_PATH.format(route=route)
    outcome["route"] = route
    auth.authorize(caller, config.allowed_callers or settings.allowed_callers, f"route {route!r}")
    namespace = parse_namespace(query_params(request), config.namespace)
    received_at = clock()
    event_body: tuple[dict[str, Any], str] | None = None
    if config.events is not None:
        raw = await read_raw(request, route)
        delivery, payload, body_sha256 = parse_event(config.events, route, request.headers, raw, namespace)
        event_body = (payload, body_sha256)
    else:
        refuse_event_headers(request.headers)
        delivery = parse_delivery(
            route,
            request.headers,
            namespace,
            received_at=received_at,
            forced_run_tolerance=timedelta(seconds=settings.forced_run_tolerance_seconds),
            policy=config.policy,
        )
    outcome.update(
        run_id=delivery.run_id,
        source=delivery.source,
        job=delivery.job,
        schedule_time=delivery.schedule_time_text,
        task=delivery.task,
        namespace=f"{delivery.project}/{delivery.location}",
        target_type=config.target.type,
    )
    if delivery.source in LATE_SOURCES and delivery.schedule_time is not None:  # not a force run: never late
        outcome["lateness_seconds"] = round((received_at - delivery.schedule_time).total_seconds(), 3)
    return delivery, event_body
