"""Every error answer, rendered in one place: the exception handlers `create_app` installs, and
the OpenAPI `responses=` the endpoints declare, both from the same classes."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import errors

RESPONSES: dict[int | str, dict[str, Any]] = {
    cls.http_status: {"description": f"`{cls.status}`: {cls.description}"} for cls in reversed(errors.ALL_ERRORS)
}
"""The error answers, for an endpoint's OpenAPI `responses=`."""


async def runonce_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.RunonceError)
    if exc.route is None:
        exc.route = request.path_params.get("route")
    return JSONResponse(exc.body(), status_code=exc.http_status, headers=exc.headers())


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own answers (no such path 404, wrong method 405) in runonce's body shape."""
    assert isinstance(exc, StarletteHTTPException)
    status = {404: "not_found", 405: "invalid"}.get(exc.status_code, "invalid")
    body = {"status": status, "route": None, "error": {"message": str(exc.detail)}}
    return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    error = errors.Invalid(first["msg"], field=".".join(str(p) for p in first["loc"]))
    return await runonce_error(request, error)


HANDLERS = {
    errors.RunonceError: runonce_error,
    StarletteHTTPException: http_error,
    RequestValidationError: validation_error,
}
"""For `FastAPI(exception_handlers=...)`."""
