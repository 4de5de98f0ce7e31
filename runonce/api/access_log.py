"""One access line per request, and the delivery's outcome on that same line.

A pure ASGI middleware: it binds the request's trace to the log context before the app runs, and
after the response writes one line with Cloud Logging's `httpRequest`. For a delivery the endpoint
leaves its outcome in `scope["state"]["outcome"]`, so there is exactly one line per delivery that
holds both — the line an operator filters on (`jsonPayload.outcome`).

Nothing the caller sends is logged unless it was validated: the path only once it names a
configured route or a well-formed run_id (else the endpoint's template, e.g. `/v1/routes/{route}:run`),
the user agent only when it is Cloud Scheduler's or Cloud Tasks', never the query string (a token
pasted into a URL must not reach the logs), other headers or bodies.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runonce import logs
from runonce.metrics import Metrics

logger = logging.getLogger("runonce.access")

KNOWN_USER_AGENTS = ("Google-Cloud-Scheduler", "Google-Cloud-Tasks")
UNKNOWN_ROUTE = "_unknown"
"""The `route` label of deliveries refused before their route was known to be configured (and the
caller authenticated): one series however many route names callers make up."""


class AccessLog:
    def __init__(self, app: ASGIApp, metrics: Metrics, project: str | None):
        self.app = app
        self.metrics = metrics
        self.project = project

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        logs.new_context()
        logs.bind(**logs.trace_fields(headers, self.project))
        scope.setdefault("state", {})
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self._log(scope, headers, status, time.perf_counter() - started)

    def _log(self, scope: Scope, headers: dict[str, str], status: int, seconds: float) -> None:
        client = scope.get("client") or ("", 0)
        path = _logged_path(scope)
        user_agent = headers.get("user-agent", "")
        http_request = {
            "requestMethod": scope["method"] if scope["method"] in _METHODS else "OTHER",
            "requestUrl": path,  # no query string: see the module docstring
            "status": status,
            "latency": f"{seconds:.6f}s",
            "userAgent": user_agent if user_agent in KNOWN_USER_AGENTS else "",
            "remoteIp": client[0],
            "protocol": f"HTTP/{scope.get('http_version', '1.1')}",
        }
        outcome: dict[str, Any] | None = scope["state"].get("outcome")
        if outcome is None:
            if path in _PROBES and status < 400:
                return  # probes and scrapes every few seconds would drown the deliveries
            logger.info(
                "%s %s %d", http_request["requestMethod"], path, status, extra={"fields": {"httpRequest": http_request}}
            )
            return
        self.metrics.deliveries.labels(outcome.get("route") or UNKNOWN_ROUTE, outcome["outcome"]).inc()
        fields = {**outcome, "http_status": status, "latency_ms": round(seconds * 1000, 3), "httpRequest": http_request}
        level = logging.WARNING if status >= 500 else logging.INFO
        logger.log(
            level,
            "delivery %s: %s (%d)",
            outcome.get("run_id") or "-",
            outcome["outcome"],
            status,
            extra={"fields": fields},
        )


_PROBES = ("/healthz", "/readyz", "/metrics")
_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")


def _logged_path(scope: Scope) -> str:
    """The request path as it may be logged (see the module docstring)."""
    logged: str | None = scope["state"].get("logged_path")
    if logged:
        return logged
    route = scope.get("route")  # the endpoint the router matched (FastAPI leaves it in the scope)
    template: str | None = getattr(route, "path", None)
    if template is not None and "{" not in template:
        return template
    return template or "(no such path)"
