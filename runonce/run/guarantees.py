"""Scheduled-run guarantees beyond dedup: a run that starts too late is skipped, and a
run whose route's previous execution still runs is skipped or waits.

The Runner calls `check` after the claim (and after reconciling, when an earlier attempt may have
dispatched) and before dispatching. It raises `Skip` or `Wait`, or returns: dispatch.

    lateness   the run's FIRST claim came more than max_lateness_seconds after its schedule time
                 -> Skip("late"); force runs and Cloud Tasks runs (no schedule time) are never late
    overlap    the route's earlier runs that may still run (`previous_state`), asked of the target:
                 still running      skip -> Skip("overlap")     wait -> Wait (409, claim released)
                 done, or none      dispatch
                 cannot tell        skip and wait -> Wait: never skipped on a guess (a skip is
                                    final) nor dispatched on one (it may overlap)

A skip is recorded (`skipped`, terminal: every retry replays it) with `last_error` = `REASON: text`.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from runonce.errors import RunonceError
from runonce.stores import RunRecord, RunStore, StoreUnavailable
from runonce.stores.base import COMPLETED, IN_PROGRESS
from runonce.targets import DispatchRequest, Target, TargetError

logger = logging.getLogger("runonce.guarantees")

OverlapPolicy = Literal["allow", "skip", "wait"]
SkipReason = Literal["late", "overlap"]


class Previous(enum.Enum):
    """What the route's earlier runs are doing, as far as the target can tell."""

    IDLE = "idle"  # none is running (or there is none)
    RUNNING = "running"
    UNKNOWN = "unknown"  # a state could not be read


LATE_SOURCES = ("scheduler", "pubsub", "cloudevents")
"""The sources whose runs can be late: Scheduler's scheduled runs, and events (from publishTime or ce-time)."""

WAIT_RETRY_AFTER_SECONDS = 10.0
"""Retry-After of a run that waits for the previous one (Scheduler keeps its own backoff)."""


@dataclass(frozen=True)
class RouteGuard:
    """A route's `overlap` and `max_lateness_seconds`."""

    overlap: OverlapPolicy = "allow"
    max_lateness: timedelta | None = None

    @property
    def active(self) -> bool:
        return self.overlap != "allow" or self.max_lateness is not None


UNGUARDED = RouteGuard()
"""A route with neither policy: overlap allowed, never late."""


class Skip(RunonceError):
    """Do not dispatch: record the run `skipped` with this reason (retries replay it)."""

    def __init__(self, reason: SkipReason, message: str):
        super().__init__()
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


class Wait(RunonceError):
    """Do not dispatch now: give the claim back and answer 409, so the caller retries."""

    def __init__(self, message: str):
        super().__init__()
        self.message = message

    def __str__(self) -> str:
        return self.message


def late_by(record: RunRecord, max_lateness: timedelta | None) -> timedelta | None:
    """How late the run's first claim (`created_at`, kept by every takeover) came after its
    schedule time (an event's publish or event time), when that is over `max_lateness`; else None.
    A force run comes early by design, a Cloud Tasks run has no schedule time: neither is late."""
    if max_lateness is None or record.source not in LATE_SOURCES or record.schedule_time is None:
        return None
    late = record.created_at - datetime.fromisoformat(record.schedule_time)
    return late if late > max_lateness else None


def overlap_decision(policy: OverlapPolicy, previous: Previous) -> Literal["dispatch", "skip", "wait"]:
    """What a run does, given what the route's earlier runs are doing."""
    if policy == "allow" or previous is Previous.IDLE:
        return "dispatch"
    if policy == "skip" and previous is Previous.RUNNING:
        return "skip"
    return "wait"


def skip_note(reason: SkipReason, message: str) -> str:
    """The record's `last_error` for a skipped run."""
    return f"{reason}: {message}"


def skip_reason(record: RunRecord) -> tuple[str, str]:
    """(reason, message) of a skipped record, as `skip_note` wrote them."""
    reason, _, message = str(record.last_error).partition(": ")
    return reason, message


MAX_RECENT = 20
"""How many of the route's newest completed (and in-progress) runs are looked at: a bound on the
cost, far above the runs a route can have outstanding."""

CLOCK_SKEW = timedelta(seconds=5)
"""How far apart two instances' clocks may be (Cloud Run's agree to well under a second). Records
are stamped by the instance that wrote them, so a run may be stamped completed up to this much
before a first claim that came earlier: every completed run stamped within it of the newest first
claim is asked."""


async def previous_state(
    store: RunStore, target: Target, held: RunRecord, now: datetime
) -> tuple[Previous, str | None]:
    """Whether an earlier run of the route still runs, and which (or why it cannot tell; None
    when idle).

    Each run was dispatched only once the one dispatched before it was done, so only the latest
    dispatched execution can still run. Every execution was created after its run's first claim
    (`created_at`), and that one after every other: so the run dispatched last completed after the
    newest first claim among the completed runs, and each run that completed since then is asked
    (less `CLOCK_SKEW`: instances' clocks differ). Completion order alone would miss it: a run
    that waited long was claimed first and dispatched last, and a run whose dispatch went
    unrecorded completes when a retry reconciles it, dispatched long before. A run still
    `in_progress` whose latest attempt came after that (its outcome unknown, perhaps given up by
    Scheduler) may have started one without naming it: while its lease is live it is being
    dispatched (`unknown`); after, its execution is looked up by its run_id as a reconciliation
    would. A run of another target type (the route was re-pointed since) is not this target's to
    ask. `failed` and `skipped` runs started nothing.
    """
    try:
        # In this order, one after the other: the two reads are not one snapshot, and a run that
        # completes between them would be in neither list if completed runs were read first.
        unresolved = await store.list(
            now, route=held.route, status=IN_PROGRESS, limit=MAX_RECENT
        )  # pragma: no mutate - the limit bounds the cost only (MAX_RECENT)
        completed = await store.list(
            now, route=held.route, status=COMPLETED, limit=MAX_RECENT
        )  # pragma: no mutate - the limit bounds the cost only (MAX_RECENT)
    except StoreUnavailable as exc:
        return Previous.UNKNOWN, f"the claim store could not list the route's runs ({exc})"
    newest_claim = max((run.created_at for run in completed), default=None)
    since = newest_claim - CLOCK_SKEW if newest_claim is not None else None
    completed_ids = {run.run_id for run in completed}
    earlier: list[tuple[RunRecord, str | None]] = [
        (run, None)
        for run in unresolved
        if run.run_id != held.run_id
        and run.run_id not in completed_ids  # completed between the reads: its execution is named below
        and (since is None or run.updated_at >= since)
    ]
    for run in sorted(completed, key=lambda run: run.updated_at, reverse=True):
        ran = run.target
        if (
            since is not None
            and run.updated_at >= since
            and ran
            and ran.get("resource")
            and ran.get("type") == target.type
        ):
            earlier.append((run, ran["resource"]))
    for run, resource in earlier:
        if resource is None and run.lease_expires > now:
            return (
                Previous.UNKNOWN,
                f"run {run.run_id} of the route is being dispatched now (its lease runs to "
                f"{run.lease_expires:%Y-%m-%dT%H:%M:%SZ})",
            )
        try:
            if resource is None:
                resource = await target.reconcile(_request_of(run))
                if resource is None:
                    continue  # that attempt started nothing
            if await target.is_running(resource):
                return Previous.RUNNING, resource
        except Exception as exc:
            if not isinstance(exc, TargetError):
                logger.exception("%s target: reading the state of run %s raised unexpectedly", target.type, run.run_id)
            what = resource or f"run {run.run_id} of the route (looked up by its run_id)"
            why = exc.message if isinstance(exc, TargetError) else f"{type(exc).__name__}: {exc}"
            return Previous.UNKNOWN, f"cannot tell whether {what} still runs: {why}"
    return Previous.IDLE, None


def _request_of(run: RunRecord) -> DispatchRequest:
    """What a reconciliation of `run` searches by (its run_id, bounded by its first claim)."""
    return DispatchRequest(
        run_id=run.run_id,
        route=run.route,
        job=run.job,
        schedule_time=run.schedule_time,
        source=run.source,
        created_at=run.created_at,
    )


async def check(
    guard: RouteGuard, held: RunRecord, target: Target, store: RunStore, clock: Callable[[], datetime]
) -> None:
    """Raise `Skip` or `Wait` when the held run must not be dispatched now (`clock`: the runner's)."""
    late = late_by(held, guard.max_lateness)
    if late is not None:
        assert guard.max_lateness is not None
        raise Skip(
            "late",
            f"first claimed {late.total_seconds():g}s after its schedule time {held.schedule_time}, over the "
            f"route's max_lateness_seconds ({guard.max_lateness.total_seconds():g}); not dispatched",
        )
    if guard.overlap == "allow":
        return
    previous, detail = await previous_state(store, target, held, clock())
    decision = overlap_decision(guard.overlap, previous)
    if decision == "skip":
        raise Skip(
            "overlap", f"the route's previous execution {detail} is still running (overlap: skip); not dispatched"
        )
    if decision == "wait":
        if previous is Previous.RUNNING:
            raise Wait(f"the route's previous execution {detail} is still running (overlap: wait)")
        raise Wait(f"{detail}; overlap: {guard.overlap} never decides on a guess")
