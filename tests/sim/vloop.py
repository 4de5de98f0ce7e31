"""An asyncio event loop on virtual time: when nothing is ready it jumps to the next timer instead of
sleeping, so a lease of minutes costs no wall time and a seed always gives the same history.

Everything in a history must then finish inside the loop: the SQLite store runs its calls inline
(`InlineExecutor`); a real network call (the Firestore emulator) marks itself with `io_busy`, and
while one is in flight the loop waits for it in real time with virtual time standing still."""

from __future__ import annotations

import asyncio
import concurrent.futures
import selectors
from typing import Any


class SimulationStuck(RuntimeError):
    """Nothing can run and no timer is due: every party waits forever (a harness bug)."""


class _VirtualSelector(selectors.BaseSelector):
    def __init__(self) -> None:
        self._real = selectors.DefaultSelector()
        self.now = 0.0
        self.io_busy = 0

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.get_key(fileobj)

    def get_map(self) -> Any:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._real.select(0)
        if ready or timeout == 0:
            return ready
        if self.io_busy:  # a real network call is in flight: wait for it, virtual time stands still
            return self._real.select(0.01)
        if timeout is None:
            raise SimulationStuck("nothing can run and no timer is due")
        self.now += timeout
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._virtual = _VirtualSelector()
        super().__init__(self._virtual)
        # Crashed attempts are dropped pending, some with a sibling's exception unread: by design.
        self.set_exception_handler(lambda loop, context: None)

    def time(self) -> float:
        return self._virtual.now

    @property
    def io_busy(self) -> int:
        return self._virtual.io_busy

    @io_busy.setter
    def io_busy(self, value: int) -> None:
        self._virtual.io_busy = value


class InlineExecutor(concurrent.futures.Executor):
    """Runs each call at once on the loop's thread: SQLite's work happens at a fixed point of the
    history instead of whenever a thread gets scheduled."""

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def, override]
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            future.set_exception(exc)
        return future
