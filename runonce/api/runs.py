"""GET /v1/runs/{run_id}: the run record, for admins (`RUNONCE_ADMIN_CALLERS`)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from runonce import errors
from runonce.api.answers import RESPONSES
from runonce.api.deps import AuthDep, ClockDep, SettingsDep, StoreDep
from runonce.run.delivery import check_run_id
from runonce.stores import StoreUnavailable

router = APIRouter()


@router.get("/v1/runs/{run_id}", summary="The run record", responses=RESPONSES)
async def get_run(
    run_id: str, request: Request, settings: SettingsDep, auth: AuthDep, store: StoreDep, clock: ClockDep
) -> JSONResponse:
    caller = await auth.authenticate(request.headers)
    auth.authorize(caller, settings.admin_callers, "the runs API")
    check_run_id(run_id)  # never a store key: Firestore refuses some ids with an error
    request.state.logged_path = f"/v1/runs/{run_id}"
    try:
        record = await store.get(run_id, clock())
    except StoreUnavailable as exc:
        raise errors.Unavailable(str(exc), run_id=run_id) from exc
    if record is None:
        raise errors.NotFound(f"no run {run_id!r} (never seen, or past its retention)", run_id=run_id)
    return JSONResponse(record.to_json())
