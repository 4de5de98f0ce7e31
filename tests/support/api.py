"""The delivery endpoint in-process: the ASGI app over an in-memory store, a scripted target and a
hand-moved clock (conftest's `api` fixture), and the run_id a canonical string hashes to."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from runonce.api.main import create_app
from runonce.settings import Settings
from runonce.stores.memory import MemoryStore
from runonce.targets.scripted import ScriptedTarget
from tests.support.clock import Clock

ROUTES = """
routes:
  etl:
    target: {type: log}
    namespace: {project: route-project, location: europe-west1}
  bare:
    target: {type: log}
"""
JOB = {"X-CloudScheduler-JobName": "nightly", "X-CloudScheduler-ScheduleTime": "2026-10-16T12:00:00Z"}


def run_id_of(canonical: str) -> str:
    return hashlib.sha256(canonical.encode()).hexdigest()


class Harness:
    def __init__(self, client: httpx.AsyncClient, store: MemoryStore, target: ScriptedTarget, clock: Clock):
        self.client, self.store, self.target, self.clock = client, store, target, clock

    async def deliver(self, route: str = "etl", headers: dict | None = None, **kwargs):
        return await self.client.post(f"/v1/routes/{route}:run", headers=JOB if headers is None else headers, **kwargs)


@asynccontextmanager
async def open_api(clock: Clock) -> AsyncIterator[Harness]:
    """The app serving ROUTES (`etl` with a namespace, `bare` without), both to one scripted target."""
    store, target = MemoryStore(), ScriptedTarget()
    settings = Settings(routes=ROUTES, auth="none", store="sqlite:///unused.db")
    app = create_app(settings, store=store, targets={"etl": target, "bare": target}, clock=clock)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://runonce") as client,
    ):
        yield Harness(client, store, target, clock)
