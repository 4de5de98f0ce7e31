"""Whether this process takes on a dispatch now: the per-route concurrency limit and the SIGTERM
drain. Both are state of the process, not of a run, which is why they live apart from the
`Runner`'s claim → dispatch → finish steps; the runner asks them, and `create_app` wires the drain
to `runonce serve`'s signal handler.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

logger = logging.getLogger("runonce.protocol")


class RouteLimits:
    """A route's `max_concurrent_dispatches`: at most that many of its dispatches in flight in this
    process. A count, not a semaphore: a delivery over the limit is answered at once (429, its
    claim given back) rather than queued, as Scheduler's attempt deadline would run out while it
    waited. Single-threaded asyncio: nothing awaits between the check and the count."""

    def __init__(self, limits: Mapping[str, int] | None = None):
        self.max_in_flight = dict(limits or {})
        self.in_flight: dict[str, int] = {}

    def admit(self, route: str) -> bool:
        """Count one more dispatch of `route`, unless it is at its limit (then False, nothing counted)."""
        limit = self.max_in_flight.get(route)
        if limit is None:
            return True
        if self.in_flight.get(route, 0) >= limit:
            return False
        self.in_flight[route] = self.in_flight.get(route, 0) + 1
        return True

    def done(self, route: str) -> None:
        """A dispatch that `admit` counted has ended."""
        if route in self.max_in_flight:
            self.in_flight[route] -= 1


class Shutdown:
    """SIGTERM: refuse new runs, and cut the deadline of every dispatch in flight to a grace period,
    so the process ends within Cloud Run's notice while each run still gets a recorded outcome
    (a cut dispatch is `unknown`: its claim is kept and reconciled later)."""

    def __init__(self) -> None:
        self.draining = False  # pragma: no mutate - the mutant (None) is as falsy as False: equivalent
        self.deadlines: set[asyncio.Timeout] = set()

    def drain(self, grace_seconds: float) -> None:
        """Shutting down: take no new runs, and give dispatches in flight at most `grace_seconds`
        more. Must run on the event loop's thread."""
        self.draining = True
        cutoff = asyncio.get_running_loop().time() + grace_seconds
        for deadline in self.deadlines:
            deadline.reschedule(min(deadline.when() or cutoff, cutoff))  # sooner, never later
        logger.warning(
            "shutting down: refusing new deliveries (503), %d dispatch(es) in flight get %gs to finish",
            len(self.deadlines),
            grace_seconds,
        )

    @asynccontextmanager
    async def deadline(self, seconds: float) -> AsyncIterator[None]:
        """`asyncio.timeout(seconds)`, which `drain` may shorten (never lengthen)."""
        async with asyncio.timeout(seconds) as deadline:
            self.deadlines.add(deadline)
            try:
                yield
            finally:
                self.deadlines.discard(deadline)
