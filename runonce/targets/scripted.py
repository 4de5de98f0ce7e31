"""A test double that ships with the package (like httpx's MockTransport): a target whose
behaviour is a function you pass in, and which records every call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from runonce.targets.base import DispatchRequest, Target

Handler = Callable[[DispatchRequest], Awaitable[str]]
Reconciler = Callable[[DispatchRequest], Awaitable[str | None]]
StateReader = Callable[[str], Awaitable[bool]]


async def _created(request: DispatchRequest) -> str:
    return f"scripted/{request.run_id}"


async def _nothing_found(request: DispatchRequest) -> str | None:
    return None


class ScriptedTarget(Target):
    type = "scripted"

    def __init__(
        self, dispatch: Handler = _created, reconcile: Reconciler = _nothing_found, running: StateReader | None = None
    ):
        self.on_dispatch = dispatch
        self.on_reconcile = reconcile
        self.on_is_running = running  # None: cannot tell, like the http and log targets
        self.dispatched: list[DispatchRequest] = []
        self.reconciled: list[DispatchRequest] = []
        self.state_reads: list[str] = []

    async def dispatch(self, request: DispatchRequest) -> str:
        self.dispatched.append(request)
        return await self.on_dispatch(request)

    async def reconcile(self, request: DispatchRequest) -> str | None:
        self.reconciled.append(request)
        return await self.on_reconcile(request)

    async def is_running(self, resource: str) -> bool:
        if self.on_is_running is None:
            return await super().is_running(resource)
        self.state_reads.append(resource)
        return await self.on_is_running(resource)
