"""Scheduled-run guarantees beyond dedup (issue 13): a run that starts too late is skipped, and a
run whose route's previous execution still runs is skipped or waits.

The Runner calls `check` after the claim (and after reconciling, when an earlier attempt may have
dispatched) and before dispatching. It raises `Skip` or `Wait`, or returns: dispatch.

    lateness   the run's FIRST claim came more than max_lateness_seconds after its schedule time
                 -> Skip("late"); force runs and Cloud Tasks runs (no schedule time) are never late
    overlap    the route's latest completed run, asked of its target (`Target.is_running`):
                 still running      skip -> Skip("overlap")     wait -> Wait (409, claim released)
                 done, or none      dispatch
                 cannot tell        skip and wait -> Wait: never skipped on a guess (a skip is
                                    final) nor dispatched on one (it may overlap)

A skip is recorded (`skipped`, terminal: every retry replays it) with `last_error` = `REASON: text`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from .stores import RunRecord, RunStore, StoreUnavailable
from .stores.base import COMPLETED
from .targets import Target, TargetError

logger = logging.getLogger("runonce.guarantees")

OverlapPolicy = Literal["allow", "skip", "wait"]
SkipReason = Literal["late", "overlap"]
PreviousState = Literal["none", "done", "running", "unknown"]

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


class Skip(Exception):
    """Do not dispatch: record the run `skipped` with this reason (retries replay it)."""

    def __init__(self, reason: SkipReason, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


class Wait(Exception):
    """Do not dispatch now: give the claim back and answer 409, so the caller retries."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def late_by(record: RunRecord, max_lateness: timedelta | None) -> timedelta | None:
    """How late the run's first claim (`created_at`, kept by every takeover) came after its
    schedule time, when that is over `max_lateness`; else None. Only scheduled runs can be late:
    a force run comes early by design, a Cloud Tasks run has no schedule time."""
    if max_lateness is None or record.source != "scheduler" or record.schedule_time is None:
        return None
    late = record.created_at - datetime.fromisoformat(record.schedule_time)
    return late if late > max_lateness else None


def overlap_decision(policy: OverlapPolicy, state: PreviousState) -> Literal["dispatch", "skip", "wait"]:
    """What a run does, given the state of the route's previous execution."""
    if policy == "allow" or state in ("none", "done"):
        return "dispatch"
    if policy == "skip" and state == "running":
        return "skip"
    return "wait"


def skip_note(reason: SkipReason, message: str) -> str:
    """The record's `last_error` for a skipped run."""
    return f"{reason}: {message}"


def skip_reason(record: RunRecord) -> tuple[str, str]:
    """(reason, message) of a skipped record, as `skip_note` wrote them."""
    reason, _, message = (record.last_error or "").partition(": ")
    return reason, message


async def previous_state(
    store: RunStore, target: Target, route: str, now: datetime
) -> tuple[PreviousState, str | None]:
    """The state of the execution of the route's latest completed run, and its resource.

    Completed runs are the ones that name an execution. A run of another target type (the route
    was re-pointed since) is not this target's to ask: `none`. A read that fails is `unknown`.
    """
    try:
        latest = await store.list(now, route=route, status=COMPLETED, limit=1)
    except StoreUnavailable as exc:
        return "unknown", f"the claim store could not list the route's runs ({exc})"
    ran = latest[0].target if latest else None
    if not ran or not ran.get("resource") or ran.get("type") != target.type:
        return "none", None
    resource = ran["resource"]
    try:
        running = await target.is_running(resource)
    except TargetError as exc:
        return "unknown", f"cannot tell whether {resource} still runs: {exc.message}"
    except Exception as exc:  # an adapter bug: as unknown as a failed read
        logger.exception("%s target: is_running(%s) raised unexpectedly", target.type, resource)
        return "unknown", f"cannot tell whether {resource} still runs: {type(exc).__name__}: {exc}"
    return ("running" if running else "done"), resource


async def check(guard: RouteGuard, held: RunRecord, target: Target, store: RunStore, now: datetime) -> None:
    """Raise `Skip` or `Wait` when the held run must not be dispatched now."""
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
    state, detail = await previous_state(store, target, held.route, now)
    decision = overlap_decision(guard.overlap, state)
    if decision == "skip":
        raise Skip("overlap", f"the route's previous execution {detail} is still running (overlap: skip); not dispatched")
    if decision == "wait":
        if state == "running":
            raise Wait(f"the route's previous execution {detail} is still running (overlap: wait)")
        raise Wait(f"{detail}; overlap: {guard.overlap} never decides on a guess")
