"""The app factory: wiring only. Endpoints live in `runonce/api/` (one router each), error answers in
`runonce/api/answers.py`, what a run is in `delivery.py`, how it runs in `run/runner.py`.

`create_app(settings)` validates all configuration before returning, so a bad routes file or
setting stops start-up with one message.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from functools import partial

from fastapi import FastAPI

from runonce import __version__, logs
from runonce.api import answers, api_docs, deliveries, health, missed, runs, status
from runonce.api.access_log import AccessLog
from runonce.auth.callers import build_authenticator
from runonce.metrics import Metrics
from runonce.missed.audit import AUDIT_ROUTE, AuditTarget, check_catch_up_windows
from runonce.routes import Route, load_routes, one_line, routes_origin
from runonce.run.admission import Shutdown
from runonce.run.runner import Runner, utcnow
from runonce.settings import ConfigError, Settings, load_settings
from runonce.stores import RunStore, open_store, redact_store_url
from runonce.targets import Target, TargetContext, build_target
from runonce.targets.transport import target_client

logger = logging.getLogger("runonce")


def create_app(
    settings: Settings,
    *,
    store: RunStore | None = None,
    targets: Mapping[str, Target] | None = None,
    clock: Callable[[], datetime] = utcnow,
) -> FastAPI:
    """The runonce ASGI app. `store`, `targets` (by route name) and `clock` are for tests; by
    default they come from the settings and the routes."""
    routes = checked_routes(settings)
    authenticator = build_authenticator(settings, {name: r.allowed_callers for name, r in routes.items()})
    if store is None:
        store = _open_store(settings)
    metrics = Metrics()
    certs = getattr(authenticator, "certs", None)
    if certs is not None:
        metrics.count_certs_fetches(lambda: certs.fetches)
    if settings.auth == "none":
        logger.warning(
            "RUNONCE_AUTH=none: ANY caller can trigger every route. For local use only; "
            "never expose this process to a network."
        )
    app = FastAPI(
        title="runonce",
        summary="Idempotent proxy: one downstream execution per scheduled run.",
        version=__version__,
        lifespan=lifespan,
        redirect_slashes=False,  # a 307 with no JSON body is not an answer Scheduler can act on: 404
        docs_url=None,  # /docs and /redoc come from api_docs.serve, their assets from the package
        redoc_url=None,
        openapi_url="/openapi.json" if settings.api_docs else None,
        exception_handlers=answers.HANDLERS,
    )
    state = app.state  # what deps.py hands the endpoints, and the lifespan builds on
    state.settings, state.routes, state.store, state.auth = settings, routes, store, authenticator
    state.metrics, state.clock, state.given_targets = metrics, clock, targets
    state.shutdown = Shutdown()
    state.drain = partial(state.shutdown.drain, settings.shutdown_grace_seconds)  # runonce serve, on SIGTERM
    app.add_middleware(AccessLog, metrics=metrics, project=logs.discover_project())
    for module in (deliveries, runs, missed, status, health):
        app.include_router(module.router)
    if settings.api_docs:
        api_docs.serve(app)
    return app


def checked_routes(settings: Settings) -> dict[str, Route]:
    """The routes as start-up takes them: loaded, validated, and their catch-up windows checked
    against the retention. Raises `ConfigError`, one line however many routes are refused
    (`runonce lint` applies the same checks)."""
    routes = load_routes(settings)
    problems = check_catch_up_windows(routes, settings.retention_seconds)
    if problems:
        raise ConfigError(one_line(routes_origin(settings), problems))
    return routes


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """What needs the event loop: the HTTP client, the targets and the `Runner`; all closed at exit."""
    state = app.state
    settings: Settings = state.settings
    http = target_client(settings.dispatch_timeout_seconds)
    context = TargetContext(http=http, endpoints=settings.endpoint_overrides())
    routes = state.routes
    built = (
        dict(state.given_targets)
        if state.given_targets is not None
        else {name: build_target(route.target, context) for name, route in routes.items()}
    )
    built[AUDIT_ROUTE] = AuditTarget(  # the audit job's runs (runonce/api/missed.py)
        state.store,
        routes,
        lease=timedelta(seconds=settings.lease_seconds),
        retention=timedelta(seconds=settings.retention_seconds),
        clock=state.clock,
        metrics=state.metrics,
    )
    state.runner = Runner(
        state.store,
        built,
        routes=routes,
        lease=timedelta(seconds=settings.lease_seconds),
        retention=timedelta(seconds=settings.retention_seconds),
        dispatch_timeout=timedelta(seconds=settings.dispatch_timeout_seconds),
        clock=state.clock,
        metrics=state.metrics,
        shutdown=state.shutdown,
    )
    logger.info("runonce ready: %d route(s), store %s", len(routes), redact_store_url(settings.store))
    try:
        yield
    finally:
        for target in built.values():
            await target.aclose()
        await http.aclose()
        await state.auth.aclose()
        await state.store.close()


def _open_store(settings: Settings) -> RunStore:
    return open_store(
        settings.store,
        timeout_seconds=settings.store_timeout_seconds,
        firestore_project=settings.firestore_project,
        firestore_database=settings.firestore_database,
        firestore_collection=settings.firestore_collection,
    )


def app_from_environment() -> FastAPI:
    """Factory for `uvicorn --factory` (each worker process builds its own app)."""
    try:
        settings = load_settings()
        logs.configure_logging(settings.log_format)
        return create_app(settings)
    except ConfigError as exc:  # one message, not a traceback, as `runonce serve` does
        raise SystemExit(f"runonce: {exc}") from None
