"""uvicorn's server, taught one thing: tell the app when SIGTERM arrives.

By itself uvicorn only stops accepting connections and waits for open ones. runonce also refuses
new runs (503, which Scheduler retries elsewhere), releases claims it has not dispatched yet, and
bounds the dispatches in flight by `RUNONCE_SHUTDOWN_GRACE_SECONDS` (`admission.Shutdown`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import uvicorn


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]):
        super().__init__(config)
        self._on_exit = on_exit
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: Any) -> None:
        if not self.should_exit and self._loop is not None:
            # Signal handlers run between bytecodes: hand the work to the loop, never touch it here.
            self._loop.call_soon_threadsafe(self._on_exit)
        super().handle_exit(sig, frame)
