"""POST /v1/audit:run and POST /v1/routes/{route}:backfill: missed runs, for admin callers
(`RUNONCE_ADMIN_CALLERS`). What a missed run is and how a run is caught up live in audit.py and
backfill.py; this module carries the request there and the answer back.

The audit is itself a scheduled run: its Scheduler job's headers key it (route `_audit`), the
`Runner` claims it, and `AuditTarget` reports the missed runs as its dispatch. Only the delivery that
processed it then applies the routes' `catch_up`; a duplicate replays the first answer. Whatever
can refuse the audit is checked before its run is claimed, so an error answer never sits beside a
`completed` record; a schedule time in the future (a force run of the audit job) audits up to now.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from runonce import errors, logs
from runonce.api.answers import RESPONSES, answer_for
from runonce.api.deps import AuthDep, ClockDep, RoutesDep, RunnerDep, SettingsDep, StoreDep
from runonce.api.intake import query_params, read_body
from runonce.missed.audit import AUDIT_ROUTE, AuditTarget, RangeRefused, audit_since, check_audit, parse_duration
from runonce.missed.backfill import (
    MAX_SERVER_RUNS,
    MAX_SERVER_TIMEOUT,
    SERVER_CONCURRENCY,
    SERVER_TIMEOUT,
    catch_up,
    older_than_retention,
    run_all,
    runs_to_backfill,
)
from runonce.run.delivery import parse_delivery, parse_namespace, parse_rfc3339

router = APIRouter()

AUDIT_PATH = "/v1/audit:run"
BACKFILL_PATH = "/v1/routes/{route}:backfill"


EVENTS_NOT_BACKFILLED = "backfill applies only to Scheduler routes (an event has no fire times to miss)"


@router.post(AUDIT_PATH, responses=RESPONSES, summary="The audit job's delivery: report missed runs, catch up")
async def run_audit(
    request: Request,
    settings: SettingsDep,
    routes: RoutesDep,
    auth: AuthDep,
    runner: RunnerDep,
    store: StoreDep,
    clock: ClockDep,
) -> JSONResponse:
    outcome: dict[str, Any] = {"outcome": None, "run_id": None, "route": AUDIT_ROUTE}
    request.state.outcome = outcome  # one access line, as for a delivery
    try:
        caller = await auth.authenticate(request.headers)
        outcome["caller"] = caller
        auth.authorize(caller, settings.admin_callers, "the audit")
        delivery = parse_delivery(
            AUDIT_ROUTE,
            request.headers,
            parse_namespace(query_params(request), None),
            received_at=clock(),
            forced_run_tolerance=timedelta(seconds=settings.forced_run_tolerance_seconds),
        )
        outcome.update(
            run_id=delivery.run_id, source=delivery.source, job=delivery.job, schedule_time=delivery.schedule_time_text
        )
        logs.bind(labels={"run_id": delivery.run_id, "route": AUDIT_ROUTE})
        payload, body_sha256 = await read_body(request, AUDIT_ROUTE, delivery.run_id)
        if delivery.schedule_time is None:  # a Cloud Tasks delivery: the audit's range is its schedule time's
            raise errors.InvalidDelivery(
                "X-CloudScheduler-ScheduleTime",
                "missing: the audit is the delivery of a Scheduler job, keyed and ranged by its schedule time",
                route=AUDIT_ROUTE,
                run_id=delivery.run_id,
            )
        # a bad body, or a range no audit can compute: 400, nothing claimed
        check_audit(
            routes,
            delivery.schedule_time,
            clock(),
            audit_since(payload),
            lease=runner.lease,
            retention=runner.retention,
        )
        result = await runner.run(delivery, payload, body_sha256)
    except errors.DeliveryError as exc:
        outcome.update(outcome=answer_for(exc).status, error=exc.message)
        raise
    body = result.body()
    outcome.update(outcome=result.status, attempt=result.record.attempts, target=result.record.target)
    audit = runner.targets[AUDIT_ROUTE]
    assert isinstance(audit, AuditTarget)  # create_app builds the audit route's target so
    report = audit.reports.pop(result.record.run_id, None)
    if result.status == "processed" and delivery.schedule_time is not None:
        if report is not None:
            body["missed"] = [run.to_json() for run in report.missed]
        now = clock()
        caught = await catch_up(
            runner,
            store,
            dict(routes),
            min(delivery.schedule_time, now),
            now,
            lease=runner.lease,
            retention=runner.retention,
        )
        body["caught_up"] = [found.to_json() for found in caught]
    headers = {"Runonce-Replayed": "true"} if result.replayed else {}
    return JSONResponse(body, headers=headers)


@router.post(
    BACKFILL_PATH, responses=RESPONSES, summary="Run a route's fire times in [from, to) as Scheduler would have"
)
async def backfill(
    route: str,
    request: Request,
    settings: SettingsDep,
    routes: RoutesDep,
    auth: AuthDep,
    runner: RunnerDep,
    clock: ClockDep,
) -> JSONResponse:
    """Body: `{"from": T1, "to": T2, "dry_run": false, "timeout": "60s"}` (RFC 3339). At most
    MAX_SERVER_RUNS fire times, none older than the retention; answers when every run has its
    outcome. `timeout`: how long runs answered `waiting` (an overlap route's previous execution
    still runs) are tried again, at most MAX_SERVER_TIMEOUT."""
    caller = await auth.authenticate(request.headers)
    auth.authorize(caller, settings.admin_callers, "backfill")
    config = routes.get(route)
    if config is not None and config.source != "scheduler":
        raise errors.InvalidDelivery("route", f"takes {config.source} events: {EVENTS_NOT_BACKFILLED}", route=route)
    if config is None or config.job is None:
        raise errors.NotFound(
            f"no route of that name names its Scheduler 'job' (routes with job: "
            f"{', '.join(sorted(n for n, r in routes.items() if r.job)) or 'none'})",
            route=route,
        )
    request.state.logged_path = BACKFILL_PATH.format(route=route)
    payload, _ = await read_body(request, route, None)
    unknown = sorted(set(payload) - {"from", "to", "dry_run", "timeout"})
    if unknown:
        raise errors.InvalidDelivery(
            f"body.{unknown[0]}", "unknown field; the body takes from, to, dry_run and timeout", route=route
        )
    for name in ("from", "to"):
        if not isinstance(payload.get(name), str):
            raise errors.InvalidDelivery(f"body.{name}", "required: an RFC 3339 timestamp", route=route)
    dry_run = payload.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise errors.InvalidDelivery("body.dry_run", "must be true or false", route=route)
    timeout = SERVER_TIMEOUT
    if "timeout" in payload:
        if not isinstance(payload["timeout"], str):
            raise errors.InvalidDelivery("body.timeout", 'must be a duration string such as "5m"', route=route)
        try:
            timeout = parse_duration(payload["timeout"], "body.timeout")
        except RangeRefused as exc:
            raise RangeRefused("body.timeout", exc.reason, route=route) from exc
        if timeout > MAX_SERVER_TIMEOUT:
            raise errors.InvalidDelivery(
                "body.timeout",
                f"at most {MAX_SERVER_TIMEOUT.total_seconds() / 60:g}m (use runonce backfill)",
                route=route,
            )
    start, end = parse_rfc3339(payload["from"], "body.from"), parse_rfc3339(payload["to"], "body.to")
    now = clock()
    try:
        runs = runs_to_backfill(route, config, start, end, now)
        if len(runs) > MAX_SERVER_RUNS:
            raise RangeRefused(
                "to",
                f"{len(runs)} fire times; one request backfills at most {MAX_SERVER_RUNS} "
                "(split the range, or use runonce backfill)",
            )
        if older_than_retention(runs, now, runner.retention):
            raise RangeRefused(
                "from",
                "fire times older than RUNONCE_RETENTION_SECONDS have no record left, so a "
                "run that did happen would run again; use runonce backfill --yes to run them",
            )
    except RangeRefused as exc:
        raise RangeRefused(f"body.{exc.field}", exc.reason, route=route) from exc
    body: dict[str, Any] = {"route": route, "dry_run": dry_run}
    if dry_run:
        body["runs"] = [run.to_json() for run in runs]
    else:
        outcomes = await run_all(runner, runs, config, concurrency=SERVER_CONCURRENCY, timeout=timeout)
        body["runs"] = [found.to_json() for found in outcomes]
    return JSONResponse(body)
