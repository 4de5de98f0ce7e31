"""Backfill and catch-up: fire times run through the protocol as the delivery Scheduler would have
sent for each (`audit.scheduled_delivery`: same run_id, same body), through the same `Runner` and
route guards as Scheduler's deliveries.

So a run that already happened, or a second backfill of the same range, replays (`duplicate`)
instead of executing again, and a Scheduler delivery of a backfilled time is a duplicate too — as
long as the records last (RUNONCE_RETENTION_SECONDS): before that the store cannot tell, and
`runs_to_backfill` says so. A fire time that is not due yet (after now) is never run.

Backfill runs are started oldest first, at most `concurrency` at once (and never more than the
route's max_concurrent_dispatches). On a route with an `overlap` policy they run one after another,
in order, as Scheduler's deliveries would: `skip` records a fire time `skipped` when the one before
it still runs; a run answered `waiting` (`wait`, or a state that cannot be read) is tried again
every POLL_SECONDS until the backfill's timeout, then it and the rest are left. `stop` (Ctrl-C)
starts no more; the runs in flight finish through the protocol, so no claim is left held. A
catch-up (after an audit run) dispatches what each route's `catch_up` policy picks, a route's runs
one after another.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runonce import errors
from runonce.missed.audit import (
    RangeRefused,
    ScheduledRun,
    auditable,
    body_sha256,
    catch_up_runs,
    scheduled_runs,
)
from runonce.routes import Route
from runonce.run.delivery import format_schedule_time
from runonce.run.runner import Runner, RunResult
from runonce.settings import Settings
from runonce.stores import RunStore, StoreUnavailable
from runonce.targets import Target, TargetContext, build_target
from runonce.targets.transport import target_client

MAX_RUNS = 1000
"""`runonce backfill` refuses more fire times than this without --yes."""
MAX_SERVER_RUNS = 100
"""`POST /v1/routes/{route}:backfill` refuses more than this in one request (it answers when all are done)."""
SERVER_CONCURRENCY = 4
MAX_CONCURRENCY = 64
NOT_STARTED = "not_started"
"""The outcome of a run left alone: the backfill was stopped (Ctrl-C) or timed out first."""
POLL_SECONDS = 1.0
"""How often a backfill run answered `waiting` (the route's previous execution still runs) is tried again."""
SERVER_TIMEOUT = timedelta(seconds=60)
"""How long `POST /v1/routes/{route}:backfill` waits, by default, for runs answered `waiting`."""
MAX_SERVER_TIMEOUT = timedelta(minutes=55)
"""The longest `timeout` the endpoint takes: below Cloud Run's longest request (60 minutes)."""


class NotDue(RangeRefused):
    """A fire time after now: Scheduler's to deliver when it comes, never a backfill's or a catch-up's."""


@dataclass(frozen=True)
class Outcome:
    """What one run's delivery came to: the protocol's result (`processed`, `duplicate`, ...), the
    error it ended with, or neither (`not_started`: the backfill was stopped first)."""

    run: ScheduledRun
    result: RunResult | None = None
    error: errors.DeliveryError | None = None

    @property
    def outcome(self) -> str:
        """The status word a delivery of this run would have been answered with."""
        if self.result is not None:
            return self.result.status
        if self.error is None:
            return NOT_STARTED
        return self.error.status

    @property
    def ok(self) -> bool:
        return self.result is not None

    @property
    def waiting(self) -> bool:
        """Not dispatched now, and worth trying again: the route's previous execution still runs (or
        its state cannot be read), or the route is at its max_concurrent_dispatches."""
        return isinstance(self.error, (errors.Waiting, errors.RouteBusy))

    @property
    def unknown(self) -> bool:
        """The target may have acted: the claim was kept."""
        return isinstance(self.error, errors.OutcomeUnknown)

    def to_json(self) -> dict[str, Any]:
        body = {**self.run.to_json(), "outcome": self.outcome}
        resource = (self.result.record.target or {}).get("resource") if self.result is not None else None
        if resource is not None:
            body["resource"] = resource
        if self.result is not None and "reason" in (answered := self.result.body()):  # skipped: late or overlap
            body["reason"], body["message"] = answered["reason"], answered["message"]
        if self.error is not None:
            body["error"] = self.error.message
        return body


logger = logging.getLogger("runonce.catch_up")


def runs_to_backfill(
    name: str,
    route: Route,
    start: datetime,
    end: datetime,
    now: datetime,
) -> list[ScheduledRun]:
    """The fire times in [start, end), oldest first. Refuses a future end (those runs are
    Scheduler's to deliver) and an empty range."""
    if end > now:
        raise RangeRefused(
            "to", f"{format_schedule_time(end)} is in the future; runs after now are Scheduler's to deliver"
        )
    if start >= end:
        raise RangeRefused("from", "must be before --to")
    runs = scheduled_runs({name: route}, start, end)
    if not runs:
        raise RangeRefused(
            "from", f"route {name!r} has no fire time from {format_schedule_time(start)} to {format_schedule_time(end)}"
        )
    return runs


def older_than_retention(runs: list[ScheduledRun], now: datetime, retention: timedelta) -> list[ScheduledRun]:
    """Runs whose record, had they run, may be gone: backfilling them may execute them a second time."""
    return [run for run in runs if run.time <= now - retention]


async def run_one(runner: Runner, run: ScheduledRun, route: Route) -> Outcome:
    """`run` through the protocol with the body its Scheduler job sends. An explicit run of a past
    time (backfill, catch-up): the route's max_lateness_seconds does not stop it, its overlap and
    max_concurrent_dispatches do. A fire time after now is refused (`NotDue`), nothing claimed."""
    now = runner.clock()
    if run.time > now:
        refused = NotDue(
            "schedule_time",
            f"{format_schedule_time(run.time)} is not due yet (now {format_schedule_time(now)}); "
            "Scheduler delivers it when it comes",
            route=run.route,
            run_id=run.run_id,
        )
        return Outcome(run, error=refused)
    try:
        return Outcome(
            run, result=await runner.run(run.delivery, dict(route.body), body_sha256(route.body), late_ok=True)
        )
    except errors.DeliveryError as exc:
        return Outcome(run, error=exc)


def backfill_concurrency(route: Route, asked: int) -> int:
    """How many of a route's backfill runs go at once: one on an overlap route (each after the one
    before it, as Scheduler would: concurrent runs would see each other's claims and all wait),
    never over its max_concurrent_dispatches."""
    if route.overlap != "allow":
        return 1
    if route.max_concurrent_dispatches is not None:
        return max(1, min(asked, route.max_concurrent_dispatches))
    return max(1, asked)


async def run_all(
    runner: Runner,
    runs: list[ScheduledRun],
    route: Route,
    *,
    concurrency: int,
    stop: asyncio.Event | None = None,
    done: Callable[[Outcome], None] | None = None,
    timeout: timedelta | None = None,
    waiting: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Every run through the protocol, started oldest first, at most `backfill_concurrency` at
    once; once `stop` is set no more start (they are `not_started`). A run answered `waiting` is
    tried again every POLL_SECONDS until `timeout` (None: no retry) has passed since the backfill
    began; then it stays `waiting`, and the runs after it are `not_started`. `done` is told each
    run's outcome, `waiting` each run that first answers `waiting`. In the order of `runs`."""
    stop = stop or asyncio.Event()
    gave_up = asyncio.Event()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (timeout.total_seconds() if timeout is not None else 0.0)
    outcomes: dict[int, Outcome] = {}
    pending = iter(enumerate(runs))

    async def one(run: ScheduledRun) -> Outcome:
        told = False
        while True:
            outcome = await run_one(runner, run, route)
            if not outcome.waiting or stop.is_set():
                return outcome
            left = deadline - loop.time()
            if left <= 0:
                gave_up.set()
                return outcome
            if waiting is not None and not told:
                waiting(outcome)
                told = True
            await asyncio.sleep(min(POLL_SECONDS, left))

    async def worker() -> None:
        for index, run in pending:  # one shared iterator: each run is taken once
            if stop.is_set() or gave_up.is_set():
                outcomes[index] = Outcome(run)
                continue
            outcomes[index] = await one(run)
            if done is not None:
                done(outcomes[index])

    workers = backfill_concurrency(route, min(concurrency, len(runs)))
    await asyncio.gather(*(worker() for _ in range(workers)))
    return [outcomes[index] for index in range(len(runs))]


async def catch_up(
    runner: Runner,
    store: RunStore,
    routes: dict[str, Route],
    at: datetime,
    now: datetime,
    *,
    lease: timedelta,
    retention: timedelta,
) -> list[Outcome]:
    """Apply every route's `catch_up` policy as of the audit's schedule time `at` (see
    `audit.catch_up_runs`): routes at once, a route's runs one after another, oldest first. One log
    line per run dispatched, with its outcome and `catch_up: true`. A route whose candidates cannot
    be read (store down) is skipped: the next audit finds the same runs still missed."""

    async def one_route(name: str, route: Route) -> list[Outcome]:
        try:
            runs = await catch_up_runs(store, name, route, at, now, lease=lease, retention=retention)
        except StoreUnavailable as exc:
            logger.warning("catch-up of route %s skipped: the claim store did not answer (%s)", name, exc)
            return []
        except RangeRefused as exc:  # start-up refuses such a window (check_catch_up_windows); never silent
            logger.error("catch-up of route %s skipped, nothing dispatched: %s", name, exc.reason)
            return []
        outcomes = []
        for run in runs:
            outcome = await run_one(runner, run, route)
            logger.log(
                logging.INFO if outcome.ok else logging.WARNING,
                "catch-up of missed run %s: %s",
                run.run_id,
                outcome.outcome,
                extra={"fields": {**outcome.to_json(), "catch_up": True}},
            )
            outcomes.append(outcome)
        return outcomes

    chosen = sorted((name, route) for name, route in auditable(routes).items() if route.catch_up != "none")
    found = await asyncio.gather(*(one_route(name, route) for name, route in chosen))
    return [outcome for outcomes in found for outcome in outcomes]


async def release_unknown(store: RunStore, outcomes: list[Outcome], now: datetime) -> list[str]:
    """End the lease of runs this process left `unknown` (a dispatch cut short by a second Ctrl-C):
    the next delivery then takes over at once and reconciles, instead of waiting out the lease."""
    released = []
    for outcome in outcomes:
        if outcome.unknown:
            try:
                if await store.release(outcome.run.run_id, now) is not None:
                    released.append(outcome.run.run_id)
            except StoreUnavailable:
                pass  # the lease runs out on its own
    return released


@asynccontextmanager
async def local_runner(
    settings: Settings,
    routes: dict[str, Route],
    store: RunStore,
    *,
    targets: Mapping[str, Target] | None = None,
) -> AsyncIterator[Runner]:
    """A `Runner` in this process with the settings `serve` uses (store, lease, timeouts, endpoint
    overrides, ADC for the targets) and the same route guards, for `routes` only. `targets` (by
    route name) is for tests; by default they are built from the routes."""
    http = target_client(settings.dispatch_timeout_seconds)
    context = TargetContext(http=http, endpoints=settings.endpoint_overrides())
    built = (
        dict(targets) if targets is not None else {name: build_target(r.target, context) for name, r in routes.items()}
    )
    try:
        yield Runner(
            store,
            built,
            routes=routes,
            lease=timedelta(seconds=settings.lease_seconds),
            retention=timedelta(seconds=settings.retention_seconds),
            dispatch_timeout=timedelta(seconds=settings.dispatch_timeout_seconds),
        )
    finally:
        for target in built.values():
            await target.aclose()
        await http.aclose()
