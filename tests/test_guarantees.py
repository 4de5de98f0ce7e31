"""Overlap and lateness (issue 13): the pure decisions of runonce/run/guarantees.py, then the Runner with
the in-memory store and the scripted target: what each outcome answers, and what it leaves in the
store for the next retry (released, kept, or skipped for good)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from runonce import errors
from runonce.api.answers import render
from runonce.api.main import create_app
from runonce.run.delivery import Delivery
from runonce.run.guarantees import (
    CLOCK_SKEW,
    WAIT_RETRY_AFTER_SECONDS,
    Previous,
    RouteGuard,
    Skip,
    Wait,
    late_by,
    overlap_decision,
    skip_note,
    skip_reason,
)
from runonce.run.runner import Rules, Runner, _new_run
from runonce.settings import Settings
from runonce.stores import Finish, NewRun, RunRecord
from runonce.stores.base import COMPLETED, FAILED, IN_PROGRESS, SKIPPED
from runonce.stores.memory import MemoryStore
from runonce.targets import DispatchRequest, TargetFailed, TargetOutcomeUnknown
from runonce.targets.scripted import ScriptedTarget
from tests.support.clock import Clock
from tests.support.runs import BrokenStore

LEASE = timedelta(seconds=300)
T0 = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)
BODY = "0" * 64
HOUR = timedelta(hours=1)


def delivery(minute: int = 0, source: str = "scheduler", may_be_forced_retry: bool = False) -> Delivery:
    return Delivery(
        source=source,
        project="proj-1",
        location="us-central1",
        route="etl",
        job="nightly",  # type: ignore[arg-type]
        schedule_time=T0 + timedelta(minutes=minute),
        may_be_forced_retry=may_be_forced_retry,
    )


def r_new(d: Delivery) -> NewRun:
    return _new_run(d, BODY)


def record(**changes) -> RunRecord:
    base = RunRecord(
        run_id="a" * 64,
        status=IN_PROGRESS,
        attempt_id="x",
        attempts=1,
        lease_expires=T0,
        expire_at=T0 + HOUR * 24,
        created_at=T0,
        updated_at=T0,
        route="etl",
        source="scheduler",
        project="p",
        location="l",
        job="nightly",
        schedule_time="2026-10-16T12:00:00Z",
        task=None,
        body_sha256=BODY,
    )
    return replace(base, **changes)


# -- the pure decisions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first_claim_after", "limit", "late"),
    [
        (timedelta(seconds=3601), HOUR, timedelta(seconds=3601)),
        (HOUR, HOUR, None),  # at the limit: in time
        (timedelta(seconds=5), HOUR, None),
        (-timedelta(seconds=30), HOUR, None),  # early (a retry inside the forced-run tolerance)
        (HOUR * 9, None, None),  # no limit on the route
    ],
)
def test_lateness_is_measured_at_the_first_claim(first_claim_after, limit, late) -> None:
    run = record(created_at=T0 + first_claim_after, updated_at=T0 + HOUR * 10)  # updated by later attempts
    assert late_by(run, limit) == late


def test_fractional_schedule_times_are_measured_exactly() -> None:
    run = record(
        schedule_time="2026-10-16T12:00:00.500000Z", created_at=T0 + timedelta(seconds=60, microseconds=500001)
    )
    assert late_by(run, timedelta(seconds=60)) == timedelta(seconds=60, microseconds=1)


@pytest.mark.parametrize(
    "run",
    [record(source="scheduler-forced"), record(source="tasks", schedule_time=None, task="t1")],
    ids=["force run", "cloud tasks"],
)
def test_force_runs_and_tasks_are_never_late(run: RunRecord) -> None:
    assert late_by(replace(run, created_at=T0 + HOUR * 5), timedelta(seconds=1)) is None


@pytest.mark.parametrize(
    ("policy", "state", "decision"),
    [
        ("allow", Previous.RUNNING, "dispatch"),
        ("allow", Previous.UNKNOWN, "dispatch"),
        ("skip", Previous.IDLE, "dispatch"),
        ("skip", Previous.RUNNING, "skip"),
        ("skip", Previous.UNKNOWN, "wait"),
        ("wait", Previous.IDLE, "dispatch"),
        ("wait", Previous.RUNNING, "wait"),
        ("wait", Previous.UNKNOWN, "wait"),
    ],
)
def test_overlap_decision(policy, state, decision) -> None:
    assert overlap_decision(policy, state) == decision


def test_a_skip_note_keeps_its_reason_and_text() -> None:
    note = skip_note("overlap", "the route's previous execution x: y is still running")
    assert skip_reason(record(status=SKIPPED, last_error=note)) == (
        "overlap",
        "the route's previous execution x: y is still running",
    )


def test_the_guards_signals_read_as_their_message() -> None:
    """What a traceback or a log line shows of them."""
    assert str(Skip("late", "first claimed 7200s after …")) == "late: first claimed 7200s after …"
    assert str(Wait("the previous execution x still runs")) == "the previous execution x still runs"


def test_a_guard_is_active_only_when_the_route_asks() -> None:
    assert not RouteGuard().active
    assert RouteGuard("skip").active and RouteGuard("wait").active
    assert RouteGuard(max_lateness=HOUR).active


# -- the Runner ------------------------------------------------------------------------------------


def runner(target: ScriptedTarget, clock: Clock, guard: RouteGuard, store=None, dispatch_timeout: float = 30) -> Runner:
    return Runner(
        store or BrokenStore(),
        {"etl": target},
        routes={"etl": Rules(guard)},
        lease=LEASE,
        retention=timedelta(days=1),
        dispatch_timeout=timedelta(seconds=dispatch_timeout),
        clock=clock,
    )


class Executions:
    """What the scripted target says of each execution: running until `done`."""

    def __init__(self) -> None:
        self.finished: set[str] = set()
        self.fail_with: Exception | None = None

    async def is_running(self, resource: str) -> bool:
        if self.fail_with is not None:
            raise self.fail_with
        return resource not in self.finished


async def waits(r: Runner, d: Delivery) -> str:
    """The run must wait (409): the answer's message."""
    with pytest.raises(errors.Waiting) as raised:
        await r.run(d, {}, BODY)
    return raised.value.message


async def stored(r: Runner, run_id: str) -> RunRecord:
    found = await r.store.get(run_id, r.clock())
    assert found is not None
    return found


async def test_a_late_first_claim_is_skipped_and_every_retry_replays_it(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    target = ScriptedTarget()
    r = runner(target, clock, RouteGuard(max_lateness=HOUR))
    clock.advance(3600 + 1)

    first = await r.run(delivery(), {}, BODY)

    assert (first.status, first.replayed) == (SKIPPED, False)
    body = first.body()
    assert (body["status"], body["reason"]) == ("skipped", "late")
    assert "first claimed 3601s after its schedule time 2026-10-16T12:00:00Z" in body["message"]
    assert "max_lateness_seconds (3600)" in body["message"]
    assert "target" not in body and target.dispatched == []
    assert (await stored(r, first.record.run_id)).status == SKIPPED
    assert r.metrics.runs_skipped.labels("etl", "late")._value.get() == 1
    assert f"run {first.record.run_id} skipped (late): {body['message']}" in [r.getMessage() for r in caplog.records]

    clock.advance(86000)
    again = await r.run(delivery(), {}, BODY)
    assert (again.status, again.replayed, again.body()) == (SKIPPED, True, body)
    assert target.dispatched == []
    assert r.metrics.runs_skipped.labels("etl", "late")._value.get() == 1  # a replay skips nothing new


async def test_a_run_first_claimed_in_time_is_dispatched_by_a_late_retry(clock: Clock) -> None:
    """Lateness is the first claim's: a run refused by the target in time is retried to the end."""
    calls = 0

    async def refuse_once(request):
        nonlocal calls
        calls += 1
        if calls == 1:
            raise TargetFailed("HTTP 500")
        return "scripted/x"

    target = ScriptedTarget(refuse_once)
    r = runner(target, clock, RouteGuard(max_lateness=HOUR))
    clock.advance(60)
    with pytest.raises(errors.Failed):
        await r.run(delivery(), {}, BODY)
    clock.advance(3 * 3600)

    result = await r.run(delivery(), {}, BODY)
    assert result.status == "processed" and len(target.dispatched) == 2


async def test_late_ok_dispatches_a_past_run_that_the_limit_would_skip(clock: Clock) -> None:
    target = ScriptedTarget()
    r = runner(target, clock, RouteGuard(max_lateness=HOUR))
    clock.advance(86400)
    result = await r.run(delivery(), {}, BODY, late_ok=True)
    assert result.status == "processed" and len(target.dispatched) == 1


async def test_late_ok_still_applies_the_overlap_policy(clock: Clock) -> None:
    executions = Executions()
    target = ScriptedTarget(running=executions.is_running)
    r = runner(target, clock, RouteGuard("skip", max_lateness=HOUR))
    first = await r.run(delivery(0), {}, BODY)
    clock.advance(7200)
    result = await r.run(delivery(1), {}, BODY, late_ok=True)  # a catch-up of a past time
    assert (result.status, result.body()["reason"]) == (SKIPPED, "overlap")
    executions.finished.add(first.record.target["resource"])
    assert (await r.run(delivery(2), {}, BODY, late_ok=True)).status == "processed"


async def test_a_late_force_run_retry_is_still_a_force_run(clock: Clock) -> None:
    target = ScriptedTarget()
    r = runner(target, clock, RouteGuard(max_lateness=timedelta(seconds=1)))
    clock.advance(7200)
    result = await r.run(delivery(source="scheduler-forced"), {}, BODY)
    assert result.status == "processed"


async def test_an_unrecorded_skip_keeps_the_claim_and_the_retry_after_the_lease_skips_again(clock: Clock) -> None:
    store = BrokenStore()
    target = ScriptedTarget()
    r = runner(target, clock, RouteGuard(max_lateness=HOUR), store)
    clock.advance(7200)
    store.fail_finish = True
    with pytest.raises(errors.Unavailable) as raised:
        await r.run(delivery(), {}, BODY)
    assert raised.value.message.startswith("first claimed 7200s after its schedule time 2026-10-16T12:00:00Z")
    assert "but the claim store could not record the skip (deadline exceeded)" in raised.value.message
    assert (raised.value.run_id, raised.value.route) == (delivery().run_id, "etl")
    assert raised.value.retry_after == LEASE.total_seconds()
    run_id = delivery().run_id
    assert (await stored(r, run_id)).status == IN_PROGRESS  # kept: a retry in the lease gets 409

    store.fail_finish = False
    with pytest.raises(errors.InProgress):
        await r.run(delivery(), {}, BODY)
    clock.advance(LEASE.total_seconds())
    again = await r.run(delivery(), {}, BODY)
    assert (again.status, again.body()["reason"]) == (SKIPPED, "late")
    assert target.reconciled and target.dispatched == []  # it reconciled (nothing found) before deciding


async def test_a_late_takeover_whose_earlier_attempt_dispatched_completes_with_that_execution(clock: Clock) -> None:
    """Reconciliation comes first: what an earlier attempt created is the run's, late or not."""

    async def found(request):
        return "scripted/earlier"

    store = BrokenStore()
    r = runner(ScriptedTarget(reconcile=found), clock, RouteGuard(max_lateness=HOUR), store)
    await store.claim(r_new(delivery()), T0 + 2 * HOUR, LEASE, timedelta(days=1))  # an attempt that died
    clock.advance(2 * 3600 + LEASE.total_seconds())
    result = await r.run(delivery(), {}, BODY)
    assert result.status == "processed" and result.record.target == {"type": "scripted", "resource": "scripted/earlier"}


async def test_overlap_skip_while_the_previous_execution_runs(clock: Clock) -> None:
    executions = Executions()
    target = ScriptedTarget(running=executions.is_running)
    r = runner(target, clock, RouteGuard("skip"))
    first = await r.run(delivery(0), {}, BODY)
    assert first.status == "processed" and target.state_reads == []  # no earlier run: nothing to ask
    previous = first.record.target["resource"]

    clock.advance(60)
    second = await r.run(delivery(1), {}, BODY)
    assert (second.status, second.body()["reason"]) == (SKIPPED, "overlap")
    assert previous in second.body()["message"] and "still running" in second.body()["message"]
    assert target.state_reads == [previous] and len(target.dispatched) == 1
    assert r.metrics.runs_skipped.labels("etl", "overlap")._value.get() == 1

    executions.finished.add(previous)  # the retry replays the skip, even now
    replay = await r.run(delivery(1), {}, BODY)
    assert (replay.status, replay.replayed, replay.body()) == (SKIPPED, True, second.body())

    clock.advance(60)
    third = await r.run(delivery(2), {}, BODY)  # the skipped run named no execution: the first is asked
    assert third.status == "processed" and target.state_reads == [previous, previous]


async def test_overlap_wait_releases_the_claim_until_the_previous_execution_is_done(clock: Clock) -> None:
    executions = Executions()
    target = ScriptedTarget(running=executions.is_running)
    r = runner(target, clock, RouteGuard("wait"))
    previous = (await r.run(delivery(0), {}, BODY)).record.target["resource"]
    clock.advance(60)

    with pytest.raises(errors.Waiting) as raised:
        await r.run(delivery(1), {}, BODY)
    error = raised.value
    answer = render(error)
    assert (answer.http_status, answer.body["status"], answer.headers) == (409, "waiting", {"Retry-After": "10"})
    assert error.retry_after == WAIT_RETRY_AFTER_SECONDS
    assert previous in error.message and "the claim was released" in error.message
    assert (error.run_id, error.route) == (delivery(1).run_id, "etl")
    released = await stored(r, delivery(1).run_id)
    assert released.status == FAILED  # claimable at once
    assert released.last_error == f"the route's previous execution {previous} is still running (overlap: wait)"
    assert len(target.dispatched) == 1

    executions.finished.add(previous)
    clock.advance(10)
    result = await r.run(delivery(1), {}, BODY)
    assert result.status == "processed" and len(target.dispatched) == 2


@pytest.mark.parametrize("policy", ["skip", "wait"])
@pytest.mark.parametrize(
    "failure",
    [TargetOutcomeUnknown("get x: HTTP 503 UNAVAILABLE"), RuntimeError("adapter bug")],
    ids=["unknown", "bug"],
)
async def test_a_failed_state_read_waits_and_never_skips_or_dispatches(
    clock: Clock, policy: str, failure: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    executions = Executions()
    target = ScriptedTarget(running=executions.is_running)
    r = runner(target, clock, RouteGuard(policy))  # type: ignore[arg-type]
    first = await r.run(delivery(0), {}, BODY)
    executions.fail_with = failure
    message = await waits(r, delivery(1))
    why = "get x: HTTP 503 UNAVAILABLE" if isinstance(failure, TargetOutcomeUnknown) else "RuntimeError: adapter bug"
    resource = first.record.target["resource"]
    assert message.startswith(
        f"cannot tell whether {resource} still runs: {why}; overlap: {policy} never decides on a guess;"
    )
    bug_logged = f"scripted target: reading the state of run {first.record.run_id} raised unexpectedly"
    assert (bug_logged in [r.getMessage() for r in caplog.records]) == isinstance(failure, RuntimeError)
    assert (await stored(r, delivery(1).run_id)).status == FAILED
    assert len(target.dispatched) == 1

    executions.fail_with = None  # readable again, and still running: now the policy decides
    if policy == "skip":
        assert (await r.run(delivery(1), {}, BODY)).status == SKIPPED
    else:
        assert "is still running" in await waits(r, delivery(1))


async def test_a_store_that_cannot_list_the_route_waits(clock: Clock) -> None:
    store = BrokenStore()
    target = ScriptedTarget(running=Executions().is_running)
    r = runner(target, clock, RouteGuard("skip"), store)
    store.fail_list = True
    assert "the claim store could not list the route's runs" in await waits(r, delivery(0))
    assert target.dispatched == [] and (await stored(r, delivery(0).run_id)).status == FAILED


async def test_a_state_read_that_hangs_waits_and_releases_the_claim(clock: Clock) -> None:
    async def hang(resource: str) -> bool:
        await asyncio.sleep(60)
        return False

    executions = Executions()
    target = ScriptedTarget(running=executions.is_running)
    r = runner(target, clock, RouteGuard("wait"), dispatch_timeout=0.2)
    await r.run(delivery(0), {}, BODY)
    target.on_is_running = hang
    assert "took longer than the dispatch timeout" in await waits(r, delivery(1))
    released = await stored(r, delivery(1).run_id)
    assert (released.status, released.last_error) == (FAILED, "the overlap check took longer than the dispatch timeout")


async def test_a_dispatch_that_hangs_after_the_guard_passed_is_unknown_and_keeps_the_claim(clock: Clock) -> None:
    """Only the guard's own overrun is a wait: once the guard passed, the target may have acted."""

    async def hang(request: DispatchRequest) -> str:
        await asyncio.sleep(60)
        return "late"

    executions = Executions()
    target = ScriptedTarget(running=executions.is_running)
    r = runner(target, clock, RouteGuard("wait"), dispatch_timeout=0.2)
    executions.finished.add((await r.run(delivery(0), {}, BODY)).record.target["resource"])
    target.on_dispatch = hang

    with pytest.raises(errors.OutcomeUnknown, match="dispatch took longer"):
        await r.run(delivery(1), {}, BODY)
    assert (await stored(r, delivery(1).run_id)).status == IN_PROGRESS


async def test_a_wait_whose_release_fails_says_the_retry_waits_for_the_lease(clock: Clock) -> None:
    store = BrokenStore()
    target = ScriptedTarget(running=Executions().is_running)
    r = runner(target, clock, RouteGuard("wait"), store)
    await r.run(delivery(0), {}, BODY)
    store.fail_finish = True
    assert "could not be released" in await waits(r, delivery(1))
    assert (await stored(r, delivery(1).run_id)).status == IN_PROGRESS


async def test_the_previous_run_of_another_target_type_is_not_asked(clock: Clock) -> None:
    store = BrokenStore()
    target = ScriptedTarget(running=Executions().is_running)
    r = runner(target, clock, RouteGuard("skip"), store)
    earlier = await store.claim(r_new(delivery(0)), T0, LEASE, timedelta(days=1))
    await store.finish(earlier, Finish(COMPLETED, target={"type": "workflows", "resource": "projects/p/x"}), T0)
    clock.advance(60)
    assert (await r.run(delivery(1), {}, BODY)).status == "processed"
    assert target.state_reads == []


async def test_a_skipped_run_in_flight_is_fenced_when_another_attempt_took_over(clock: Clock) -> None:
    """An attempt that lost its claim while deciding answers 409 and writes nothing."""
    store = BrokenStore()
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(resource: str) -> bool:
        started.set()
        await release.wait()
        return True

    target = ScriptedTarget(running=slow)
    r = runner(target, clock, RouteGuard("skip"), store)
    earlier = await store.claim(r_new(delivery(0)), T0, LEASE, timedelta(days=1))
    await store.finish(earlier, Finish(COMPLETED, target={"type": "scripted", "resource": "scripted/0"}), T0)
    attempt = asyncio.ensure_future(r.run(delivery(1), {}, BODY))
    await started.wait()
    clock.advance(LEASE.total_seconds() + 1)
    await store.claim(r_new(delivery(1)), clock(), LEASE, timedelta(days=1))  # another instance took it over
    release.set()
    with pytest.raises(errors.InProgress):
        await attempt
    assert (await stored(r, delivery(1).run_id)).status == IN_PROGRESS


# -- a newer run whose outcome is unknown (Scheduler may have given up on it) ------------------------


async def unresolved_run(store: BrokenStore, minute: int, at: datetime) -> None:
    """A run whose attempt dispatched (or not) and never recorded how: in_progress."""
    await store.claim(r_new(delivery(minute)), at, LEASE, timedelta(days=1))


async def test_a_newer_run_being_dispatched_now_makes_the_next_one_wait(clock: Clock) -> None:
    store = BrokenStore()
    target = ScriptedTarget(running=Executions().is_running)
    r = runner(target, clock, RouteGuard("skip"), store)
    await unresolved_run(store, 0, clock())
    clock.advance(60)
    message = await waits(r, delivery(1))
    assert f"run {delivery(0).run_id} of the route is being dispatched now" in message
    assert target.dispatched == [] and target.state_reads == []


@pytest.mark.parametrize(
    ("found", "finished", "answer"),
    [
        ("scripted/lost", False, "skipped"),  # its execution exists and runs: it is the one to wait for
        ("scripted/lost", True, "processed"),
        (None, False, "skipped"),  # it started nothing: the completed run before it decides (still running)
    ],
)
async def test_a_newer_run_left_in_progress_is_looked_up_by_its_run_id(clock: Clock, found, finished, answer) -> None:
    store = BrokenStore()
    executions = Executions()

    async def lookup(request):
        return found if request.run_id == delivery(1).run_id else None

    target = ScriptedTarget(reconcile=lookup, running=executions.is_running)
    r = runner(target, clock, RouteGuard("skip"), store)
    first = await r.run(delivery(0), {}, BODY)
    clock.advance(60)
    await unresolved_run(store, 1, clock())
    if finished:
        executions.finished |= {found, first.record.target["resource"]}
    clock.advance(LEASE.total_seconds() + 60)

    result = await r.run(delivery(2), {}, BODY)
    assert result.status == answer
    assert [req.run_id for req in target.reconciled] == [delivery(1).run_id]
    if answer == "skipped":
        assert (found or first.record.target["resource"]) in result.body()["message"]


async def test_an_unresolved_run_older_than_the_latest_completed_one_is_not_asked(clock: Clock) -> None:
    store = BrokenStore()
    executions = Executions()
    target = ScriptedTarget(running=executions.is_running)
    r = runner(target, clock, RouteGuard("wait"), store)
    await unresolved_run(store, 0, clock())
    clock.advance(LEASE.total_seconds() + 1)
    first = await r.run(delivery(1), {}, BODY)  # the one before it started nothing (reconciled: none)
    executions.finished.add(first.record.target["resource"])
    target.reconciled.clear()
    clock.advance(60)
    assert (await r.run(delivery(2), {}, BODY)).status == "processed"
    assert target.reconciled == []


async def test_a_newer_run_whose_lookup_fails_makes_the_next_one_wait(clock: Clock) -> None:
    store = BrokenStore()

    async def cannot_tell(request):
        raise TargetOutcomeUnknown("list executions: HTTP 503")

    target = ScriptedTarget(reconcile=cannot_tell, running=Executions().is_running)
    r = runner(target, clock, RouteGuard("skip"), store)
    await unresolved_run(store, 0, clock())
    clock.advance(LEASE.total_seconds() + 1)
    message = await waits(r, delivery(1))
    assert f"cannot tell whether run {delivery(0).run_id} of the route (looked up by its run_id) still runs" in message
    assert "list executions: HTTP 503" in message and target.dispatched == []


async def test_the_run_dispatched_last_is_asked_even_when_it_was_claimed_first(clock: Clock) -> None:
    """A run that waited long (claimed first, dispatched last) is the one that may still run, not
    the newest claim (found by the simulation, seed 20261257: a force run that waited, then its
    scheduled run dispatched over it)."""
    store = BrokenStore()
    executions = Executions()
    target = ScriptedTarget(running=executions.is_running)
    r = runner(target, clock, RouteGuard("wait"), store)
    waited = await store.claim(r_new(delivery(0)), clock(), LEASE, timedelta(days=1))
    await store.finish(waited, Finish(FAILED, last_error="waiting"), clock())
    clock.advance(10)
    quick = await r.run(delivery(1), {}, BODY)  # claimed after it, done before it dispatches
    executions.finished.add(quick.record.target["resource"])
    clock.advance(10)
    slow = await r.run(delivery(0), {}, BODY)
    clock.advance(10)
    message = await waits(r, delivery(2))
    assert f"previous execution {slow.record.target['resource']} is still running" in message


@pytest.mark.parametrize("behind", [0.5, 4.9])
async def test_the_run_dispatched_last_is_asked_even_when_its_instance_clock_is_behind(
    clock: Clock, behind: float
) -> None:
    """Two instances' clocks differ: the run that completed last may be stamped before the one
    it waited for, and must still be asked (found by the simulation, seed 41337446 on SQLite: the
    next run dispatched while it still ran)."""
    store = BrokenStore()
    executions = Executions()
    target = ScriptedTarget(running=executions.is_running)
    fast = runner(target, clock, RouteGuard("wait"), store)
    behind_clock = Clock(clock() - timedelta(seconds=behind))
    slow = runner(target, behind_clock, RouteGuard("wait"), store)
    first = await fast.run(delivery(0), {}, BODY)
    executions.finished.add(first.record.target["resource"])
    behind_clock.advance(0.2)
    second = await slow.run(delivery(1), {}, BODY)  # dispatched after the first ended, stamped before it
    assert second.status == "processed" and second.record.updated_at < first.record.updated_at
    clock.advance(1)
    message = await waits(fast, delivery(2))
    assert f"previous execution {second.record.target['resource']} is still running" in message
    executions.finished.add(second.record.target["resource"])
    assert (await fast.run(delivery(2), {}, BODY)).status == "processed"


async def test_the_run_dispatched_last_is_asked_when_an_older_run_completes_later_by_reconciliation(
    clock: Clock,
) -> None:
    """A run whose attempt dispatched without recording it completes when a later retry reconciles
    it: completed last, dispatched long before. The run dispatched after its execution ended is the
    one that may still run (found by the simulation, seed 55003565 on memory: a catch-up's run
    reconciled while a force run's execution ran, and the next force run dispatched over it)."""
    store = BrokenStore()
    executions = Executions()

    async def lookup(request):
        return "scripted/lost" if request.run_id == delivery(0).run_id else None

    target = ScriptedTarget(reconcile=lookup, running=executions.is_running)
    r = runner(target, clock, RouteGuard("wait"), store)
    await unresolved_run(store, 0, clock())  # dispatched scripted/lost, did not record it
    executions.finished.add("scripted/lost")
    clock.advance(LEASE.total_seconds() + 1)
    running = await r.run(delivery(1), {}, BODY)  # looked scripted/lost up: done, so dispatched
    clock.advance(60)
    late = await r.run(delivery(0), {}, BODY)  # the retry of the first run reconciles it
    assert (late.status, late.record.target["resource"]) == ("processed", "scripted/lost")
    assert late.record.updated_at - running.record.updated_at > timedelta(seconds=5)

    clock.advance(1)
    message = await waits(r, delivery(2))
    assert f"previous execution {running.record.target['resource']} is still running" in message
    executions.finished.add(running.record.target["resource"])
    assert (await r.run(delivery(2), {}, BODY)).status == "processed"


async def completed_run(store: BrokenStore, minute: int, claimed: datetime, done: datetime) -> str:
    """A run claimed and completed at these times; its resource."""
    claim = await store.claim(r_new(delivery(minute)), claimed, LEASE, timedelta(days=1))
    resource = f"scripted/{minute}"
    await store.finish(claim, Finish(COMPLETED, target={"type": "scripted", "resource": resource}), done)
    return resource


class CompletesBetweenReads(BrokenStore):
    """Another instance's run completes right after the guard's first read of the route's runs."""

    def __init__(self) -> None:
        super().__init__()
        self.between: Callable[[], Awaitable[object]] | None = None

    async def list(self, *args, **kwargs):
        found = await super().list(*args, **kwargs)
        if self.between is not None:
            between, self.between = self.between, None
            await between()
        return found


async def test_a_run_that_completes_between_the_guards_two_reads_is_still_asked(clock: Clock) -> None:
    """The route's in-progress and completed runs are two reads, not one snapshot: a run that was
    being dispatched at the first and completed by the second is still the one to wait for (found
    by the simulation: a force run dispatched beside a takeover that completed in between)."""
    store = CompletesBetweenReads()
    executions = Executions()
    target = ScriptedTarget(running=executions.is_running)
    r = runner(target, clock, RouteGuard("wait"), store)
    other = await store.claim(r_new(delivery(0)), clock(), LEASE, timedelta(days=1))
    clock.advance(1)
    resource = "scripted/0"

    async def other_completes() -> None:
        await MemoryStore.finish(
            store, other, Finish(COMPLETED, target={"type": "scripted", "resource": resource}), clock()
        )

    store.between = other_completes
    message = await waits(r, delivery(1))
    assert f"previous execution {resource} is still running" in message
    assert target.dispatched == [] and target.state_reads == [resource]


async def test_a_completed_run_stamped_exactly_the_clock_skew_before_the_newest_first_claim_is_asked(
    clock: Clock,
) -> None:
    """The window includes its bound; the newest completion is asked first."""
    store = BrokenStore()
    executions = Executions()
    target = ScriptedTarget(running=executions.is_running)
    r = runner(target, clock, RouteGuard("wait"), store)
    t = clock()
    oldest = await completed_run(store, 0, t, t)
    newest = await completed_run(store, 1, t + CLOCK_SKEW, t + CLOCK_SKEW + timedelta(seconds=1))
    executions.finished.add(newest)
    clock.advance(10)
    assert f"previous execution {oldest} is still running" in await waits(r, delivery(2))
    assert target.state_reads == [newest, oldest]


async def test_an_unresolved_run_stamped_exactly_the_clock_skew_before_the_newest_first_claim_is_looked_into(
    clock: Clock,
) -> None:
    store = BrokenStore()
    executions = Executions()
    target = ScriptedTarget(running=executions.is_running)
    r = runner(target, clock, RouteGuard("wait"), store)
    await unresolved_run(store, 0, clock())  # its lease live throughout
    executions.finished.add(await completed_run(store, 1, clock() + CLOCK_SKEW, clock() + CLOCK_SKEW))
    clock.advance(10)
    assert f"run {delivery(0).run_id} of the route is being dispatched now" in await waits(r, delivery(2))


async def test_a_completed_run_stamped_well_before_the_latest_is_not_asked(clock: Clock) -> None:
    """Only the runs that may have completed last are asked: one stamped more than the clock skew
    before the latest completion ended before it was dispatched."""
    executions = Executions()
    target = ScriptedTarget(running=executions.is_running)
    r = runner(target, clock, RouteGuard("wait"))
    old = await r.run(delivery(0), {}, BODY)
    executions.finished.add(old.record.target["resource"])
    clock.advance(5.1)
    new = await r.run(delivery(1), {}, BODY)
    executions.finished.add(new.record.target["resource"])
    executions.finished.discard(old.record.target["resource"])  # would say "running" if asked
    target.state_reads.clear()
    clock.advance(1)
    assert (await r.run(delivery(2), {}, BODY)).status == "processed"
    assert target.state_reads == [new.record.target["resource"]]


async def test_a_skipped_force_run_leaves_the_scheduled_run_its_own(clock: Clock) -> None:
    """Like a completed force run, a skipped one is resolved: the scheduled delivery for the same
    time is not its retry (found by the simulation, seed 20261590 on SQLite: taken for the force
    run's retry, the scheduled run's own claim was left in_progress for good)."""
    executions = Executions()
    target = ScriptedTarget(running=executions.is_running)
    r = runner(target, clock, RouteGuard("skip"))
    previous = (await r.run(delivery(0), {}, BODY)).record.target["resource"]
    forced = await r.run(delivery(10, source="scheduler-forced"), {}, BODY)
    assert forced.status == SKIPPED

    clock.advance(600)
    scheduled = delivery(10, may_be_forced_retry=True)
    executions.finished.add(previous)
    result = await r.run(scheduled, {}, BODY)
    assert (result.status, result.record.run_id, result.record.source) == ("processed", scheduled.run_id, "scheduler")


def test_skip_reason_reads_the_note_as_written() -> None:
    assert skip_reason(record(status=SKIPPED, last_error="late: 2h")) == ("late", "2h")
    assert skip_reason(record(status=SKIPPED, last_error="no separator")) == ("no separator", "")


async def test_other_routes_runs_are_not_asked(clock: Clock) -> None:
    store = BrokenStore()
    target = ScriptedTarget(running=Executions().is_running)
    r = runner(target, clock, RouteGuard("wait"), store)
    other = await store.claim(r_new(replace(delivery(0), route="other")), clock(), LEASE, timedelta(days=1))
    await store.finish(other, Finish(COMPLETED, target={"type": "scripted", "resource": "scripted/other"}), clock())
    await store.claim(r_new(replace(delivery(1), route="other")), clock(), LEASE, timedelta(days=1))  # live lease
    clock.advance(1)
    assert (await r.run(delivery(2), {}, BODY)).status == "processed"
    assert target.state_reads == [] and target.reconciled == []


async def test_a_run_claimed_the_instant_the_last_one_completed_is_looked_into(clock: Clock) -> None:
    store = BrokenStore()
    executions = Executions()
    target = ScriptedTarget(running=executions.is_running)
    r = runner(target, clock, RouteGuard("wait"), store)
    done = await r.run(delivery(0), {}, BODY)
    executions.finished.add(done.record.target["resource"])
    await unresolved_run(store, 1, clock())  # same instant as that completion, its lease live
    clock.advance(1)
    assert f"run {delivery(1).run_id} of the route is being dispatched now" in await waits(r, delivery(2))


async def test_a_lease_that_ends_now_is_over_and_the_run_is_looked_up(clock: Clock) -> None:
    store = BrokenStore()
    target = ScriptedTarget(running=Executions().is_running)
    r = runner(target, clock, RouteGuard("skip"), store)
    await unresolved_run(store, 0, clock())
    clock.advance(LEASE.total_seconds())  # lease_expires == now: ended, as the claim rules count it
    assert (await r.run(delivery(1), {}, BODY)).status == "processed"
    [looked_up] = target.reconciled
    stuck = await stored(r, delivery(0).run_id)
    assert looked_up == DispatchRequest(
        run_id=stuck.run_id,
        route="etl",
        job="nightly",
        schedule_time="2026-10-16T12:00:00Z",
        source="scheduler",
        created_at=stuck.created_at,
    )


async def test_a_lateness_only_route_never_reads_a_state(clock: Clock) -> None:
    executions = Executions()
    target = ScriptedTarget(running=executions.is_running)
    r = runner(target, clock, RouteGuard(max_lateness=HOUR))
    await r.run(delivery(0), {}, BODY)  # still running
    clock.advance(60)
    assert (await r.run(delivery(1), {}, BODY)).status == "processed"
    assert target.state_reads == []


# -- through the ASGI app: how the answers render ------------------------------------------------

GUARDED_ROUTES = """
routes:
  late: {target: {type: log}, max_lateness_seconds: 60}
  waits:
    target: {type: workflows, workflow: projects/proj-12345/locations/us-central1/workflows/w}
    overlap: wait
"""


def scheduled(minute: int) -> dict[str, str]:
    return {"X-CloudScheduler-JobName": "nightly", "X-CloudScheduler-ScheduleTime": f"2026-10-16T12:{minute:02d}:00Z"}


async def test_skipped_and_waiting_as_the_app_answers_them(clock: Clock) -> None:
    executions = Executions()
    targets = {"late": ScriptedTarget(), "waits": ScriptedTarget(running=executions.is_running)}
    settings = Settings(routes=GUARDED_ROUTES, auth="none", store="sqlite:///unused.db")
    app = create_app(settings, store=BrokenStore(), targets=targets, clock=clock)
    clock.advance(3600)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runonce") as client,
    ):
        late = await client.post("/v1/routes/late:run", headers=scheduled(0))
        assert late.status_code == 200 and "Runonce-Replayed" not in late.headers
        body = late.json()
        assert set(body) == {"run_id", "status", "route", "reason", "message"}
        assert (body["status"], body["route"], body["reason"]) == ("skipped", "late", "late")
        again = await client.post("/v1/routes/late:run", headers=scheduled(0))
        assert (again.status_code, again.headers["Runonce-Replayed"], again.json()) == (200, "true", body)

        first = await client.post("/v1/routes/waits:run", headers=scheduled(1))
        assert first.json()["status"] == "processed"
        waiting = await client.post("/v1/routes/waits:run", headers=scheduled(2))
        assert (waiting.status_code, waiting.headers["Retry-After"]) == (409, "10")
        assert waiting.json()["status"] == "waiting" and waiting.json()["route"] == "waits"
        assert waiting.json()["target"] == {"type": "scripted", "resource": None}
        assert (
            f"previous execution {first.json()['target']['resource']} is still running"
            in waiting.json()["error"]["message"]
        )
        spec = (await client.get("/openapi.json")).json()["paths"]["/v1/routes/{route}:run"]["post"]["responses"]
        assert "`skipped`" in spec["200"]["description"] and spec["409"]["description"].startswith("`in_progress`")
