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
    return request.app.state.settings


async def _routes(request: Request) -> Mapping[str, Route]:
    return request.app.state.routes


async def _store(request: Request) -> RunStore:
    return request.app.state.store


async def _authenticator(request: Request) -> Authenticator:
    return request.app.state.auth


async def _clock(request: Request) -> Callable[[], datetime]:
    return request.app.state.clock


async def _metrics(request: Request) -> Metrics:
    return request.app.state.metrics


async def _runner(request: Request) -> Runner:
    return request.app.state.runner  # built by the lifespan: it needs the event loop's HTTP client


SettingsDep = Annotated[Settings, Depends(_settings)]
RoutesDep = Annotated[Mapping[str, Route], Depends(_routes)]
StoreDep = Annotated[RunStore, Depends(_store)]
AuthDep = Annotated[Authenticator, Depends(_authenticator)]
ClockDep = Annotated[Callable[[], datetime], Depends(_clock)]
MetricsDep = Annotated[Metrics, Depends(_metrics)]
RunnerDep = Annotated[Runner, Depends(_runner)]
