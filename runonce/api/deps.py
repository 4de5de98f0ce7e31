"""What the endpoints receive through `Depends`: the objects `create_app` (and its lifespan, for
the runner) made once and keeps on `app.state`, never built per request.

Each is an `async def` on purpose: FastAPI runs a plain `def` dependency in a worker thread, which
would cost a thread hop per dependency on every delivery.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request

from runonce.auth.callers import Authenticator
from runonce.metrics import Metrics
from runonce.routes import Route
from runonce.run.runner import Runner
from runonce.settings import Settings
from runonce.stores import RunStore


async def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def _routes(request: Request) -> Mapping[str, Route]:
    routes: Mapping[str, Route] = request.app.state.routes
    return routes


async def _store(request: Request) -> RunStore:
    store: RunStore = request.app.state.store
    return store


async def _authenticator(request: Request) -> Authenticator:
    auth: Authenticator = request.app.state.auth
    return auth


async def _clock(request: Request) -> Callable[[], datetime]:
    clock: Callable[[], datetime] = request.app.state.clock
    return clock


async def _metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


async def _runner(request: Request) -> Runner:
    runner: Runner = request.app.state.runner  # built by the lifespan: it needs the event loop's HTTP client
    return runner


SettingsDep = Annotated[Settings, Depends(_settings)]
RoutesDep = Annotated[Mapping[str, Route], Depends(_routes)]
StoreDep = Annotated[RunStore, Depends(_store)]
AuthDep = Annotated[Authenticator, Depends(_authenticator)]
ClockDep = Annotated[Callable[[], datetime], Depends(_clock)]
MetricsDep = Annotated[Metrics, Depends(_metrics)]
RunnerDep = Annotated[Runner, Depends(_runner)]
