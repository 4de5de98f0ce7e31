"""GET /v1/status: the view of `runonce status` (runonce/missed/status.py) as JSON, for admin callers
(`RUNONCE_ADMIN_CALLERS`). `?route=` narrows it to one route, `?since=` sets the window."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from runonce import errors
from runonce.api.answers import RESPONSES
from runonce.api.deps import AuthDep, ClockDep, RoutesDep, SettingsDep, StoreDep
from runonce.missed.audit import parse_duration
from runonce.missed.status import default_window, status
from runonce.stores import StoreUnavailable

router = APIRouter()

STATUS_PATH = "/v1/status"


@router.get(STATUS_PATH, summary="How each route's runs are doing", responses=RESPONSES)
async def get_status(
    request: Request,
    settings: SettingsDep,
    routes: RoutesDep,
    auth: AuthDep,
    store: StoreDep,
    clock: ClockDep,
    route: str | None = None,
    since: str | None = None,
) -> JSONResponse:
    caller = await auth.authenticate(request.headers)
    auth.authorize(caller, settings.admin_callers, "the status API")
    chosen = dict(routes)
    if route is not None:
        if route not in routes:
            raise errors.NotFound(f"no route of that name is configured ({len(routes)} route(s))", route=route)
        chosen = {route: routes[route]}
    retention = timedelta(seconds=settings.retention_seconds)
    window = parse_duration(since, "since") if since is not None else default_window(retention)
    try:
        report = await status(
            store,
            chosen,
            clock(),
            since=window,
            lease=timedelta(seconds=settings.lease_seconds),
            retention=retention,
        )
    except StoreUnavailable as exc:
        raise errors.Unavailable(str(exc)) from exc
    return JSONResponse(report.to_json())
