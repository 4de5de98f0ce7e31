"""The web layer: parse the request, call the protocol, render the answer. Nothing else.

`create_app(settings)` validates all configuration before returning, so a bad routes file or
setting stops start-up with one message.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import errors, logs
from .access import AccessLog
from .auth import Authenticator, build_authenticator
from .delivery import ForcedRunRefused, InvalidDelivery, check_run_id, parse_delivery, parse_namespace
from .metrics import Metrics
from .protocol import Runner, RunResult, utcnow
from .routes import Route, load_routes
from .settings import ConfigError, Settings
from .stores import RunStore, StoreUnavailable, open_store
from .targets import PayloadNotSendable, Target, TargetContext, build_target, encode_json

logger = logging.getLogger("runonce")

MAX_BODY_BYTES = 32 * 1024

_RESPONSES: dict[int | str, dict[str, Any]] = {
    cls.http_status: {"description": f"`{cls.status}`: {cls.description}"} for cls in reversed(errors.ALL_ERRORS)
}


def create_app(
    settings: Settings,
    *,
    store: RunStore | None = None,
    targets: Mapping[str, Target] | None = None,
    clock: Callable[[], datetime] = utcnow,
) -> FastAPI:
    """The runonce ASGI app. `store`, `targets` (by route name) and `clock` are for tests; by
    default they come from the settings and the routes."""
    routes = load_routes(settings)
    authenticator = build_authenticator(settings, {name: r.allowed_callers for name, r in routes.items()})
    if store is None:
        store = open_store(
            settings.store,
            timeout_seconds=settings.store_timeout_seconds,
            firestore_project=settings.firestore_project,
            firestore_database=settings.firestore_database,
            firestore_collection=settings.firestore_collection,
        )
    metrics = Metrics()
    certs = getattr(authenticator, "certs", None)
    if certs is not None:
        metrics.count_certs_fetches(lambda: certs.fetches)
    if settings.auth == "none":
        logger.warning(
            "RUNONCE_AUTH=none: ANY caller can trigger every route. For local use only; "
            "never expose this process to a network."
        )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        http = httpx.AsyncClient(
            timeout=httpx.Timeout(settings.dispatch_timeout_seconds),
            headers={"User-Agent": "runonce/0.1"},
        )
        context = TargetContext(http=http, endpoints=settings.endpoint_overrides())
        built = dict(targets) if targets is not None else {
            name: build_target(route.target, context) for name, route in routes.items()
        }
        app.state.runner = Runner(
            store,
            built,
            lease=timedelta(seconds=settings.lease_seconds),
            retention=timedelta(seconds=settings.retention_seconds),
            dispatch_timeout=timedelta(seconds=settings.dispatch_timeout_seconds),
            clock=clock,
            metrics=metrics,
            concurrency_limits={n: r.max_concurrent_dispatches for n, r in routes.items() if r.max_concurrent_dispatches},
        )
        logger.info("runonce ready: %d route(s), store %s", len(routes), settings.store.split("?")[0])
        try:
            yield
        finally:
            for target in built.values():
                await target.aclose()
            await http.aclose()
            await authenticator.aclose()
            await store.close()

    app = FastAPI(
        title="runonce",
        summary="Idempotent proxy: one downstream execution per scheduled run.",
        version="0.1.0",
        lifespan=lifespan,
        redirect_slashes=False,  # a 307 with no JSON body is not an answer Scheduler can act on: 404
    )
    app.state.settings = settings
    app.state.routes = routes
    app.state.store = store
    app.state.auth = authenticator
    app.state.metrics = metrics
    app.add_middleware(AccessLog, metrics=metrics, project=logs.discover_project())

    def drain() -> None:
        """On SIGTERM (called on the event loop by `runonce serve`): see `Runner.drain`."""
        runner = getattr(app.state, "runner", None)
        if runner is not None:
            runner.drain(settings.shutdown_grace_seconds)

    app.state.drain = drain

    @app.exception_handler(errors.RunonceError)
    async def _runonce_error(request: Request, exc: errors.RunonceError) -> JSONResponse:
        if exc.route is None:
            exc.route = request.path_params.get("route")
        return JSONResponse(exc.body(), status_code=exc.http_status, headers=exc.headers())

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        status = {404: "not_found", 405: "invalid"}.get(exc.status_code, "invalid")
        body = {"status": status, "route": None, "error": {"message": str(exc.detail)}}
        return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        error = errors.Invalid(first["msg"], field=".".join(str(p) for p in first["loc"]))
        return await _runonce_error(request, error)

    @app.post(
        "/v1/routes/{route}:run",
        responses={**_RESPONSES, 200: {"description": "`processed` or `duplicate` (replayed)"}},
        summary="Deliver one scheduled run",
    )
    async def deliver(route: str, request: Request) -> JSONResponse:
        # The delivery's one outcome line (access.py) is filled in as we learn things.
        # `route` is filled in once the caller is authenticated and the route is configured: the
        # path is the caller's text until then (never logged, never a metric label).
        outcome: dict[str, Any] = {"outcome": None, "run_id": None, "route": None}
        request.state.outcome = outcome
        try:
            result = await _deliver(route, request, outcome)
        except errors.RunonceError as exc:
            outcome.update(outcome=exc.status, error=exc.message)
            if exc.run_id:
                outcome["run_id"] = exc.run_id
            if exc.target is not None:
                outcome["target"] = exc.target
            raise
        except Exception:
            outcome["outcome"] = "internal_error"
            raise
        outcome.update(
            outcome=result.status, run_id=result.record.run_id, attempt=result.record.attempts,
            target=result.record.target,
        )
        headers = {"Runonce-Replayed": "true"} if result.replayed else {}
        return JSONResponse(result.body(), headers=headers)

    async def _deliver(route: str, request: Request, outcome: dict[str, Any]) -> RunResult:
        auth: Authenticator = request.app.state.auth
        caller = await auth.authenticate(request.headers)
        outcome["caller"] = caller
        config: Route | None = routes.get(route)
        if config is None:
            raise errors.NotFound(  # the name is the caller's text: it is in the answer's `route`, never logged
                f"no route of that name is configured; this instance has {len(routes)} route(s): check the "
                "job's URI (/v1/routes/ROUTE:run) against RUNONCE_ROUTES_FILE",
                route=route,
            )
        request.state.logged_path = f"/v1/routes/{route}:run"
        outcome["route"] = route
        auth.authorize(caller, config.allowed_callers or settings.allowed_callers, f"route {route!r}")
        try:
            namespace = parse_namespace(_query(request), config.namespace)
            delivery = parse_delivery(
                route,
                request.headers,
                namespace,
                received_at=clock(),
                forced_run_tolerance=timedelta(seconds=settings.forced_run_tolerance_seconds),
                policy=config.policy,
            )
        except ForcedRunRefused as exc:
            raise errors.ForcedRunRefused(exc.reason, field=exc.field, route=route) from exc
        except InvalidDelivery as exc:
            raise errors.Invalid(exc.reason, field=exc.field, route=route) from exc
        outcome.update(
            run_id=delivery.run_id, source=delivery.source, job=delivery.job,
            schedule_time=delivery.schedule_time_text, task=delivery.task,
            namespace=f"{delivery.project}/{delivery.location}",
        )
        logs.bind(labels={"run_id": delivery.run_id, "route": route})
        payload, body_sha256 = await _read_payload(request, route, delivery.run_id)
        return await request.app.state.runner.run(delivery, payload, body_sha256)

    @app.get("/v1/runs/{run_id}", summary="The run record", responses=_RESPONSES)
    async def get_run(run_id: str, request: Request) -> JSONResponse:
        auth: Authenticator = request.app.state.auth
        caller = await auth.authenticate(request.headers)
        auth.authorize(caller, settings.admin_callers, "the runs API")
        try:
            check_run_id(run_id)
        except InvalidDelivery as exc:  # never a store key: Firestore refuses some ids with an error
            raise errors.Invalid(exc.reason, field=exc.field) from exc
        request.state.logged_path = f"/v1/runs/{run_id}"
        try:
            record = await store.get(run_id, clock())
        except StoreUnavailable as exc:
            raise errors.Unavailable(str(exc), run_id=run_id) from exc
        if record is None:
            raise errors.NotFound(f"no run {run_id!r} (never seen, or past its retention)", run_id=run_id)
        return JSONResponse(record.to_json())

    @app.get("/healthz", summary="The process is up")
    async def healthz() -> dict[str, Any]:
        body: dict[str, Any] = {"status": "ok"}
        if not authenticator.enabled:
            body["warning"] = "authentication is off (RUNONCE_AUTH=none): any caller can trigger every route"
        return body

    @app.get("/metrics", summary="Prometheus metrics (text format)", response_class=PlainTextResponse)
    async def prometheus_metrics() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/readyz", summary="The claim store answers")
    async def readyz() -> JSONResponse:
        try:
            await store.ping()
        except StoreUnavailable as exc:
            return JSONResponse({"status": "unavailable", "error": {"message": str(exc)}}, status_code=503)
        return JSONResponse({"status": "ok"})

    return app


def app_from_environment() -> FastAPI:
    """Factory for `uvicorn --factory` (each worker process builds its own app)."""
    from .logs import configure_logging
    from .settings import load_settings

    try:
        settings = load_settings()
        configure_logging(settings.log_format)
        return create_app(settings)
    except ConfigError as exc:  # one message, not a traceback, as `runonce serve` does
        raise SystemExit(f"runonce: {exc}") from None


def _query(request: Request) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for key, value in request.query_params.multi_items():
        values.setdefault(key, []).append(value)
    return values


async def _read_payload(request: Request, route: str, run_id: str) -> tuple[dict[str, Any], str]:
    """The JSON object body (empty body = `{}`) and the sha256 of its canonical form, so that
    retries with re-ordered keys or other whitespace count as the same body."""
    context = {"route": route, "run_id": run_id}
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise errors.PayloadTooLarge(f"body is over {MAX_BODY_BYTES} bytes (Content-Length)", field="body", **context)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise errors.PayloadTooLarge(f"body is over {MAX_BODY_BYTES} bytes", field="body", **context)
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        payload: Any = {}
    else:
        try:
            text = raw.decode("utf-8")  # strict: json.loads(bytes) would also guess UTF-16 and UTF-32
        except UnicodeDecodeError as exc:
            raise errors.Invalid("body is not valid UTF-8", field="body", **context) from exc
        try:
            payload = json.loads(
                text, parse_constant=_reject_constant, parse_int=_short_int, object_pairs_hook=_unique_keys
            )
        except json.JSONDecodeError as exc:  # its message holds a position, never the text
            raise errors.Invalid(f"body is not valid JSON: {exc}", field="body", **context) from exc
        except RecursionError as exc:
            raise errors.Invalid("body nests objects and arrays too deeply", field="body", **context) from exc
        except ValueError as exc:  # the rules of the hooks below
            raise errors.Invalid(f"body is not accepted JSON: {exc}", field="body", **context) from exc
        if not isinstance(payload, dict):
            raise errors.Invalid(
                f"body must be a JSON object, got {type(payload).__name__}", field="body", **context
            )
        try:
            encode_json(payload)  # what every target sends: refuse now what none could send later
        except PayloadNotSendable as exc:
            raise errors.Invalid(f"body: {exc.message}", field="body", **context) from exc
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return payload, hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object; a key given twice is refused, as the two could mean different runs' payloads."""
    value = dict(pairs)
    if len(value) != len(pairs):
        raise ValueError("an object has the same key twice")
    return value


def _short_int(digits: str) -> int:
    """An integer of at most 20 characters (int64 has 19 digits; encode_json checks the range), so
    Python's 4300-digit limit, whose error quotes the number, is never reached."""
    if len(digits) > 20:
        raise ValueError("an integer is beyond 64 bits")
    return int(digits)
