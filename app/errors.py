"""Every non-success answer of the delivery endpoint, one class each (docs/contract.md, the status table).

    RunonceError
     ├── Invalid            400 invalid           bad headers, query or body
     │    └── PayloadTooLarge 413 invalid         body over 32 KiB
     ├── Unauthenticated    401 unauthenticated   no or bad bearer token
     ├── Forbidden          403 forbidden         caller not allowed on this route
     ├── NotFound           404 not_found         unknown route or run
     ├── InProgress         409 in_progress       another attempt holds a live lease  (Retry-After)
     ├── ForcedRunRefused   409 forced_run_refused a force run on a route with forced_runs: reject
     ├── PayloadMismatch    422 payload_mismatch  same run_id, different body
     ├── Throttled          429 throttled         target or route limit; claim released (Retry-After)
     ├── Failed             502 failed            target failed, nothing created; claim released
     ├── Unavailable        503 unavailable       claim store unreachable; target never called
     └── OutcomeUnknown     504 unknown           target may have acted; claim kept (Retry-After)

One exception handler (`main.py`) renders them; the OpenAPI `responses=` come from the same classes.
"""

from __future__ import annotations

from typing import Any, ClassVar


class RunonceError(Exception):
    http_status: ClassVar[int] = 500
    status: ClassVar[str] = "error"
    description: ClassVar[str] = ""

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        run_id: str | None = None,
        route: str | None = None,
        target: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.field = field
        self.run_id = run_id
        self.route = route
        self.target = target
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.run_id is not None:
            body["run_id"] = self.run_id
        body["status"] = self.status
        body["route"] = self.route
        if self.target is not None:
            body["target"] = self.target
        error: dict[str, Any] = {"message": self.message}
        if self.field is not None:
            error["field"] = self.field
        body["error"] = error
        return body

    def headers(self) -> dict[str, str]:
        if self.retry_after is None:
            return {}
        return {"Retry-After": str(max(1, int(-(-self.retry_after // 1))))}  # ceil, at least 1


class Invalid(RunonceError):
    http_status, status = 400, "invalid"
    description = "Missing or invalid identity headers, query or body."


class PayloadTooLarge(Invalid):
    http_status = 413
    description = "Request body over 32 KiB."


class Unauthenticated(RunonceError):
    http_status, status = 401, "unauthenticated"
    description = "No or invalid bearer token."
    token_sent = True
    """False when the request carried no credentials: RFC 6750 then names no error."""

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer error="invalid_token"' if self.token_sent else "Bearer"}


class Forbidden(RunonceError):
    http_status, status = 403, "forbidden"
    description = "The caller is not allowed on this route."


class NotFound(RunonceError):
    http_status, status = 404, "not_found"
    description = "Unknown route (or run)."


class InProgress(RunonceError):
    http_status, status = 409, "in_progress"
    description = "Another attempt holds a live lease on this run; retry after Retry-After seconds."


class ForcedRunRefused(RunonceError):
    """Not in ALL_ERRORS: it shares 409 with InProgress in the OpenAPI table."""

    http_status, status = 409, "forced_run_refused"
    description = "A Scheduler force run on a route with forced_runs: reject; nothing was claimed."


class PayloadMismatch(RunonceError):
    http_status, status = 422, "payload_mismatch"
    description = "This run_id was delivered before with a different body."


class Throttled(RunonceError):
    http_status, status = 429, "throttled"
    description = "The target or the route's concurrency limit says slow down; the claim was released."


class Failed(RunonceError):
    http_status, status = 502, "failed"
    description = "The target failed and created nothing; the claim was released, a retry dispatches again."


class Unavailable(RunonceError):
    http_status, status = 503, "unavailable"
    description = "The claim store is unreachable; the target was not called."


class OutcomeUnknown(RunonceError):
    http_status, status = 504, "unknown"
    description = (
        "The target may have acted (timeout, lost response); the claim is kept and the run is "
        "reconciled after the lease."
    )


ALL_ERRORS: tuple[type[RunonceError], ...] = (
    Invalid, PayloadTooLarge, Unauthenticated, Forbidden, NotFound, InProgress, PayloadMismatch,
    Throttled, Failed, Unavailable, OutcomeUnknown,
)
