"""The run protocol (claim → reconcile → dispatch → finish) against the in-memory store and the
scripted target: every outcome, and what each leaves in the store for the next retry."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from runonce import errors
from runonce.api.answers import render
from runonce.run.runner import THROTTLE_BACKOFF_SECONDS, Rules, Runner
from runonce.stores.base import COMPLETED, FAILED, IN_PROGRESS
from runonce.stores.memory import MemoryStore
from runonce.targets import DispatchRequest, TargetFailed, TargetOutcomeUnknown, TargetThrottled
from runonce.targets.scripted import ScriptedTarget
from tests.support.clock import Clock
from tests.support.runs import BODY, DELIVERY, LEASE, BrokenStore, raising


def runner(target: ScriptedTarget, clock: Clock, store=None, dispatch_timeout: float = 30) -> Runner:
    return Runner(
        store or MemoryStore(),
        {"etl": target},
        routes={"etl": Rules()},
        lease=LEASE,
        retention=timedelta(days=1),
        dispatch_timeout=timedelta(seconds=dispatch_timeout),
        clock=clock,
    )


async def record(r: Runner):
    return await r.store.get(DELIVERY.run_id, r.clock())


async def test_processed_dispatches_once_with_the_run_identity(clock: Clock) -> None:
    target = ScriptedTarget()
    r = runner(target, clock)

    result = await r.run(DELIVERY, {"mode": "full"}, BODY)

    assert result.status == "processed" and not result.replayed
    assert result.body() == {
        "run_id": DELIVERY.run_id,
        "status": "processed",
        "route": "etl",
        "target": {"type": "scripted", "resource": f"scripted/{DELIVERY.run_id}"},
    }
    [sent] = target.dispatched
    assert (sent.run_id, sent.job, sent.schedule_time, sent.source, sent.payload, sent.attempt) == (
        DELIVERY.run_id,
        "nightly",
        "2026-10-16T12:00:00Z",
        "scheduler",
        {"mode": "full"},
        1,
    )
    assert (await record(r)).status == COMPLETED


async def test_completed_run_is_replayed_without_calling_the_target(clock: Clock) -> None:
    target = ScriptedTarget()
    r = runner(target, clock)
    first = await r.run(DELIVERY, {}, BODY)
    clock.advance(3600)

    again = await r.run(DELIVERY, {}, BODY)

    assert again.status == "duplicate" and again.replayed
    assert again.body()["target"] == first.body()["target"]
    assert len(target.dispatched) == 1


async def test_live_lease_answers_in_progress_with_the_time_left(clock: Clock) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(request: DispatchRequest) -> str:
        started.set()
        await release.wait()
        return "done"

    target = ScriptedTarget(slow)
    r = runner(target, clock)
    first = asyncio.create_task(r.run(DELIVERY, {}, BODY))
    await started.wait()
    clock.advance(100)

    with pytest.raises(errors.InProgress) as busy:
        await r.run(DELIVERY, {}, BODY)
    assert render(busy.value).headers == {"Retry-After": "200"}
    assert busy.value.message.startswith("attempt 1 of this run holds the lease")
    release.set()
    assert (await first).status == "processed"
    assert len(target.dispatched) == 1


async def test_failed_target_releases_the_claim_and_the_retry_dispatches(clock: Clock) -> None:
    target = ScriptedTarget(raising(TargetFailed("HTTP 500 from downstream")))
    r = runner(target, clock)

    with pytest.raises(errors.Failed) as failed:
        await r.run(DELIVERY, {}, BODY)
    assert "HTTP 500 from downstream" in failed.value.message
    stored = await record(r)
    assert stored.status == FAILED and stored.last_error == "target failed: HTTP 500 from downstream"

    target.on_dispatch = ScriptedTarget().on_dispatch  # the downstream recovers
    result = await r.run(DELIVERY, {}, BODY)  # at once: no lease to wait for
    assert result.status == "processed"
    assert [d.attempt for d in target.dispatched] == [1, 2]
    assert target.reconciled == []  # a failed attempt created nothing: no reconciliation


async def test_throttled_target_passes_on_retry_after_and_releases(clock: Clock) -> None:
    target = ScriptedTarget(raising(TargetThrottled("HTTP 429", retry_after=42)))
    r = runner(target, clock)

    with pytest.raises(errors.Throttled) as throttled:
        await r.run(DELIVERY, {}, BODY)
    assert render(throttled.value).headers == {"Retry-After": "42"}
    assert (await record(r)).status == FAILED


async def test_throttled_without_a_delay_gets_the_default_backoff(clock: Clock) -> None:
    r = runner(ScriptedTarget(raising(TargetThrottled("HTTP 429"))), clock)
    with pytest.raises(errors.Throttled) as throttled:
        await r.run(DELIVERY, {}, BODY)
    assert throttled.value.retry_after == THROTTLE_BACKOFF_SECONDS


async def test_unknown_outcome_keeps_the_claim_then_reconciles_after_the_lease(clock: Clock) -> None:
    target = ScriptedTarget(raising(TargetOutcomeUnknown("connection reset after sending")))
    r = runner(target, clock)

    with pytest.raises(errors.OutcomeUnknown) as unknown:
        await r.run(DELIVERY, {}, BODY)
    assert render(unknown.value).headers == {"Retry-After": "300"}
    assert "reconciled" in unknown.value.message
    stored = await record(r)
    assert stored.status == IN_PROGRESS and stored.last_error == "connection reset after sending"

    clock.advance(299)
    with pytest.raises(errors.InProgress):  # retries during the lease are told to wait
        await r.run(DELIVERY, {}, BODY)

    async def found(request: DispatchRequest) -> str:
        return "executions/created-by-attempt-1"

    target.on_reconcile = found
    clock.advance(2)
    result = await r.run(DELIVERY, {}, BODY)
    assert result.status == "processed"
    assert result.record.target == {"type": "scripted", "resource": "executions/created-by-attempt-1"}
    assert len(target.dispatched) == 1 and len(target.reconciled) == 1  # nothing dispatched again


async def test_takeover_dispatches_when_reconciliation_finds_nothing(clock: Clock) -> None:
    target = ScriptedTarget(raising(TargetOutcomeUnknown("timeout")))
    r = runner(target, clock)
    with pytest.raises(errors.OutcomeUnknown):
        await r.run(DELIVERY, {}, BODY)
    target.on_dispatch = ScriptedTarget().on_dispatch
    clock.advance(301)

    result = await r.run(DELIVERY, {}, BODY)

    assert result.status == "processed"
    assert len(target.reconciled) == 1 and [d.attempt for d in target.dispatched] == [1, 2]


async def test_inconclusive_reconciliation_never_dispatches_blind(clock: Clock) -> None:
    async def cannot_tell(request: DispatchRequest) -> str | None:
        raise TargetOutcomeUnknown("list executions: HTTP 503")

    target = ScriptedTarget(raising(TargetOutcomeUnknown("timeout")), reconcile=cannot_tell)
    r = runner(target, clock)
    with pytest.raises(errors.OutcomeUnknown):
        await r.run(DELIVERY, {}, BODY)
    clock.advance(301)

    with pytest.raises(errors.OutcomeUnknown, match="list executions"):
        await r.run(DELIVERY, {}, BODY)
    assert len(target.dispatched) == 1
    stored = await record(r)
    assert stored.status == IN_PROGRESS and stored.attempts == 2


async def test_dispatch_past_the_timeout_is_unknown_and_keeps_the_claim(clock: Clock) -> None:
    async def hangs(request: DispatchRequest) -> str:
        await asyncio.sleep(10)
        return "late"

    r = runner(ScriptedTarget(hangs), clock, dispatch_timeout=0.05)
    with pytest.raises(errors.OutcomeUnknown, match=r"longer than 0.05s"):
        await r.run(DELIVERY, {}, BODY)
    assert (await record(r)).status == IN_PROGRESS


async def test_adapter_bug_counts_as_unknown(clock: Clock) -> None:
    r = runner(ScriptedTarget(raising(KeyError("oops"))), clock)
    with pytest.raises(errors.OutcomeUnknown, match="KeyError"):
        await r.run(DELIVERY, {}, BODY)
    assert (await record(r)).status == IN_PROGRESS


async def test_different_body_for_the_same_run_is_refused(clock: Clock) -> None:
    target = ScriptedTarget()
    r = runner(target, clock)
    await r.run(DELIVERY, {"a": 1}, BODY)
    with pytest.raises(errors.PayloadMismatch) as mismatch:
        await r.run(DELIVERY, {"a": 2}, "1" * 64)
    assert mismatch.value.field == "body"
    assert len(target.dispatched) == 1


async def test_store_down_at_claim_is_unavailable_and_never_calls_the_target(clock: Clock) -> None:
    store = BrokenStore()
    store.fail_claim = True
    target = ScriptedTarget()
    with pytest.raises(errors.Unavailable, match=r"target was not called \(connection refused\)"):  # the store's words
        await runner(target, clock, store).run(DELIVERY, {}, BODY)
    assert target.dispatched == []


async def test_store_down_at_finish_after_success_answers_unknown_so_a_retry_records_it(clock: Clock) -> None:
    """A 200 here would stop Scheduler and leave the record in_progress for good (found by the
    simulation: invariants I3 and I5)."""
    store = BrokenStore()
    store.fail_finish = True
    created = ScriptedTarget()
    r = runner(created, clock, store)

    with pytest.raises(errors.OutcomeUnknown, match=r"did not record it \(deadline exceeded\)") as raised:
        await r.run(DELIVERY, {}, BODY)
    assert raised.value.target == {"type": "scripted", "resource": f"scripted/{DELIVERY.run_id}"}
    assert (await record(r)).status == IN_PROGRESS  # the claim is kept

    store.fail_finish = False
    clock.advance(LEASE.total_seconds() + 1)
    found = ScriptedTarget(reconcile=lambda request: _found(f"scripted/{request.run_id}"))
    r.targets = {"etl": found}
    result = await r.run(DELIVERY, {}, BODY)
    assert result.status == "processed" and found.dispatched == []  # reconciled, not sent again
    assert (await record(r)).status == COMPLETED


async def _found(resource: str) -> str:
    return resource


async def test_store_down_at_finish_after_failure_keeps_the_claim(clock: Clock) -> None:
    store = BrokenStore()
    store.fail_finish = True
    r = runner(ScriptedTarget(raising(TargetFailed("HTTP 400"))), clock, store)
    with pytest.raises(errors.Failed, match="retries wait for the lease"):
        await r.run(DELIVERY, {}, BODY)
    assert (await record(r)).status == IN_PROGRESS


async def test_an_attempt_fenced_off_during_dispatch_answers_in_progress(clock: Clock) -> None:
    r: Runner

    async def slow_then_overtaken(request: DispatchRequest) -> str:
        # While this attempt dispatches, its lease ends and another attempt takes over.
        clock.advance(301)
        await r.store.claim(
            __import__("runonce.stores", fromlist=["NewRun"]).NewRun(
                run_id=DELIVERY.run_id,
                route="etl",
                source="scheduler",
                project="proj-1",
                location="us-central1",
                job="nightly",
                schedule_time="2026-10-16T12:00:00Z",
                task=None,
                body_sha256=BODY,
            ),
            clock(),
            LEASE,
            timedelta(days=1),
        )
        return "created"

    r = runner(ScriptedTarget(slow_then_overtaken), clock)
    with pytest.raises(errors.InProgress, match="lost the run"):
        await r.run(DELIVERY, {}, BODY)
    stored = await record(r)
    assert stored.status == IN_PROGRESS and stored.attempts == 2


def test_dispatch_timeout_must_be_below_the_lease() -> None:
    with pytest.raises(ValueError, match="below the lease"):
        Runner(MemoryStore(), {}, routes={}, lease=LEASE, retention=timedelta(days=1), dispatch_timeout=LEASE)


# -- shutdown -------------------------------------------------------------------------------------


class DrainsDuringClaim(MemoryStore):
    """SIGTERM arrives while the claim is in flight."""

    runner: Runner

    async def claim(self, *args, **kwargs):
        result = await super().claim(*args, **kwargs)
        self.runner.shutdown.drain(5)
        return result


async def test_draining_refuses_new_runs_before_claiming(clock: Clock) -> None:
    target = ScriptedTarget()
    r = runner(target, clock)
    r.shutdown.drain(5)
    with pytest.raises(errors.Unavailable, match="shutting down"):
        await r.run(DELIVERY, {}, BODY)
    assert target.dispatched == [] and await record(r) is None


async def test_claim_won_during_shutdown_is_released_as_failed(clock: Clock) -> None:
    store = DrainsDuringClaim()
    target = ScriptedTarget()
    r = store.runner = runner(target, clock, store)

    with pytest.raises(errors.Unavailable, match="released before dispatching"):
        await r.run(DELIVERY, {}, BODY)

    stored = await record(r)
    assert target.dispatched == []
    assert stored.status == FAILED and stored.last_error == "runonce shut down before dispatching"


async def test_takeover_won_during_shutdown_stays_reconcilable(clock: Clock) -> None:
    store = DrainsDuringClaim()
    target = ScriptedTarget(raising(TargetOutcomeUnknown("timeout")))
    first = runner(target, clock, MemoryStore())
    store._records = first.store._records  # same records, a new process
    with pytest.raises(errors.OutcomeUnknown):
        await first.run(DELIVERY, {}, BODY)  # attempt 1 may have created an execution
    clock.advance(301)

    r = store.runner = runner(target, clock, store)
    with pytest.raises(errors.Unavailable):
        await r.run(DELIVERY, {}, BODY)

    stored = await record(r)
    assert stored.status == IN_PROGRESS and stored.lease_expires <= clock()  # not failed: must reconcile
    target.on_dispatch = ScriptedTarget().on_dispatch
    after = runner(target, clock, store)
    assert (await after.run(DELIVERY, {}, BODY)).status == "processed"
    assert len(target.reconciled) == 1  # the next attempt asked the target first


async def test_drain_shortens_a_dispatch_in_flight_to_the_grace(clock: Clock) -> None:
    async def slow(request: DispatchRequest) -> str:
        await asyncio.sleep(10)
        return "late"

    r = runner(ScriptedTarget(slow), clock, dispatch_timeout=30)
    task = asyncio.create_task(r.run(DELIVERY, {}, BODY))
    await asyncio.sleep(0.05)
    r.shutdown.drain(0.05)
    with pytest.raises(errors.OutcomeUnknown, match="shutdown grace"):
        await task
    assert (await record(r)).status == IN_PROGRESS
