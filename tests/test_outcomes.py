"""Every answer of the runner, whole: HTTP status, body (`run_id`, `status`, `route`, `target`,
`error.field`), headers (`Retry-After` an integer >= 1, `Runonce-Replayed`), and what the store
keeps for the next retry. In-memory store, scripted target, hand-moved clock: milliseconds each.

The web layer renders exactly these (`runonce.api.answers.render`, `RunResult.body()`);
tests/test_api.py covers that rendering."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import httpx
import pytest

from runonce import errors
from runonce.api.answers import render
from runonce.run.delivery import Delivery
from runonce.run.runner import ROUTE_BUSY_RETRY_AFTER_SECONDS, THROTTLE_BACKOFF_SECONDS, Rules, Runner
from runonce.stores import Fenced, NewRun
from runonce.stores.base import COMPLETED, FAILED, IN_PROGRESS
from runonce.stores.memory import MemoryStore
from runonce.targets import DispatchRequest, TargetFailed, TargetOutcomeUnknown, TargetThrottled
from runonce.targets.scripted import ScriptedTarget
from tests.support.clock import Clock
from tests.support.runs import BODY, DELIVERY, LEASE, BrokenStore, raising

RUN = DELIVERY.run_id
OTHER = replace(DELIVERY, job="hourly")  # another run of the same route
NOT_CREATED = {"type": "scripted", "resource": None}
CREATED = {"type": "scripted", "resource": f"scripted/{RUN}"}


@dataclass(frozen=True)
class Answer:
    http: int
    body: dict[str, Any]
    headers: dict[str, str]
    message: str = ""


async def answer(r: Runner, delivery=DELIVERY, payload: dict | None = None, body_sha256: str = BODY) -> Answer:
    """What the web layer would send: the result's body, or the error's body and headers."""
    try:
        result = await r.run(delivery, payload if payload is not None else {}, body_sha256)
    except errors.DeliveryError as exc:
        rendered = render(exc)
        message = rendered.body["error"].pop("message")
        return Answer(rendered.http_status, rendered.body, rendered.headers, message)
    return Answer(200, result.body(), {"Runonce-Replayed": "true"} if result.replayed else {})


def make_runner(
    clock: Clock,
    target: ScriptedTarget | None = None,
    store: MemoryStore | None = None,
    limit: int | None = None,
    dispatch_timeout: float = 30,
) -> Runner:
    return Runner(
        store or MemoryStore(),
        {"etl": target or ScriptedTarget()},
        routes={"etl": Rules(max_concurrent_dispatches=limit)},
        lease=LEASE,
        retention=timedelta(days=1),
        dispatch_timeout=timedelta(seconds=dispatch_timeout),
        clock=clock,
    )


def error(status: str, field: str | None = None, target: dict | None = None, run_id: str = RUN) -> dict[str, Any]:
    body: dict[str, Any] = {"run_id": run_id, "status": status, "route": "etl"}
    if target is not None:
        body["target"] = target
    body["error"] = {"field": field} if field else {}
    return body


async def stored(r: Runner, run_id: str = RUN):
    return await r.store.get(run_id, r.clock())


def new_run(delivery=DELIVERY) -> NewRun:
    return NewRun(
        run_id=delivery.run_id,
        route="etl",
        source=delivery.source,
        project=delivery.project,
        location=delivery.location,
        job=delivery.job,
        schedule_time=delivery.schedule_time_text,
        task=None,
        body_sha256=BODY,
    )


# -- 200 -------------------------------------------------------------------------------------------


async def test_processed(clock: Clock) -> None:
    target = ScriptedTarget()
    r = make_runner(clock, target)
    assert await answer(r, payload={"mode": "full"}) == Answer(
        200, {"run_id": RUN, "status": "processed", "route": "etl", "target": CREATED}, {}
    )
    assert target.dispatched == [
        DispatchRequest(
            run_id=RUN,
            route="etl",
            job="nightly",
            schedule_time="2026-10-16T12:00:00Z",
            source="scheduler",
            payload={"mode": "full"},
            task=None,
            attempt=1,
            created_at=clock(),
        )
    ]
    record = await stored(r)
    assert (record.status, record.target, record.attempts, record.last_error) == (COMPLETED, CREATED, 1, None)
    assert record.updated_at == clock()  # the finish is stamped with the runner's clock


async def test_processed_cloud_tasks_run_hands_the_task_downstream_and_records_it(clock: Clock) -> None:
    tasks = Delivery(source="tasks", project="proj-1", location="us-central1", route="etl", job="exports", task="t-1")
    target = ScriptedTarget()
    r = make_runner(clock, target)
    got = await answer(r, tasks, payload={"n": 1})
    assert got == Answer(
        200,
        {
            "run_id": tasks.run_id,
            "status": "processed",
            "route": "etl",
            "target": {"type": "scripted", "resource": f"scripted/{tasks.run_id}"},
        },
        {},
    )
    assert target.dispatched == [
        DispatchRequest(
            run_id=tasks.run_id,
            route="etl",
            job="exports",
            schedule_time=None,
            source="tasks",
            payload={"n": 1},
            task="t-1",
            attempt=1,
            created_at=clock(),
        )
    ]
    record = await stored(r, tasks.run_id)
    assert (record.job, record.task, record.schedule_time, record.source) == ("exports", "t-1", None, "tasks")


async def test_each_store_call_and_dispatch_is_timed_under_its_label(clock: Clock) -> None:
    r = make_runner(clock)
    await answer(r)
    sample = r.metrics.registry.get_sample_value
    assert sample("runonce_store_seconds_count", {"operation": "claim"}) == 1
    assert sample("runonce_store_seconds_count", {"operation": "finish"}) == 1
    assert sample("runonce_dispatch_seconds_count", {"target_type": "scripted"}) == 1
    assert sample("runonce_dispatches_in_flight", {}) == 0


async def test_duplicate_replays_the_stored_target_without_a_call(clock: Clock) -> None:
    target = ScriptedTarget()
    r = make_runner(clock, target)
    await answer(r)
    clock.advance(3600)
    assert await answer(r) == Answer(
        200, {"run_id": RUN, "status": "duplicate", "route": "etl", "target": CREATED}, {"Runonce-Replayed": "true"}
    )
    assert len(target.dispatched) == 1


async def test_processed_by_reconciliation_names_what_the_earlier_attempt_created(clock: Clock) -> None:
    target = ScriptedTarget(raising(TargetOutcomeUnknown("reset after sending")))
    r = make_runner(clock, target)
    await answer(r)
    clock.advance(LEASE.total_seconds())

    async def found(request: DispatchRequest) -> str:
        return "executions/e-1"

    target.on_reconcile = found
    assert await answer(r) == Answer(
        200,
        {
            "run_id": RUN,
            "status": "processed",
            "route": "etl",
            "target": {"type": "scripted", "resource": "executions/e-1"},
        },
        {},
    )
    assert len(target.dispatched) == 1 and target.reconciled[0].attempt == 2


async def test_store_down_after_the_dispatch_answers_unknown_with_the_target_and_keeps_the_claim(clock: Clock) -> None:
    """The execution exists but is not recorded: a 200 would end Scheduler's retries and leave the
    record in_progress for good, so the answer is 504 with the resource, and the retry after the
    lease reconciles and records it."""
    store = BrokenStore()
    store.fail_finish = True
    target = ScriptedTarget()
    r = make_runner(clock, target, store)
    got = await answer(r)
    assert got == Answer(504, error("unknown", target=CREATED), {"Retry-After": "300"}, got.message)
    assert f"dispatched as scripted/{RUN}" in got.message
    record = await stored(r)
    assert record.status == IN_PROGRESS and record.target is None  # the next attempt reconciles
    store.fail_finish = False
    clock.advance(301)
    again = await answer(r)
    assert again == Answer(200, {"run_id": RUN, "status": "processed", "route": "etl", "target": CREATED}, {})
    # The retry asked the target first (this scripted one keeps no executions, so it found none and
    # re-sent the same token, which a real downstream dedupes); the run is now recorded.
    assert [request.attempt for request in target.reconciled] == [2]
    assert {request.run_id for request in target.dispatched} == {RUN}
    assert (await stored(r)).status == COMPLETED


# -- 409 -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("elapsed", "retry_after"), [(0, "300"), (100.4, "200"), (299.7, "1"), (299.999, "1")])
async def test_busy_names_the_time_left_on_the_lease(clock: Clock, elapsed: float, retry_after: str) -> None:
    target = ScriptedTarget()
    r = make_runner(clock, target)
    await r.store.claim(new_run(), clock(), LEASE, timedelta(days=1))  # another instance holds it
    clock.advance(elapsed)
    got = await answer(r)
    assert got == Answer(409, error("in_progress"), {"Retry-After": retry_after}, got.message)
    assert "holds the lease until 2026-10-16T12:05:00Z" in got.message
    assert target.dispatched == []


class TakenOverDuringDispatch(MemoryStore):
    """While this attempt dispatches, its lease ends and another instance takes the run over."""

    clock: Clock
    gone = False

    async def finish(self, claim, finish, now):
        if self.gone:
            self._records.pop(claim.record.run_id)
        else:
            self.clock.advance(LEASE.total_seconds() + 10)
            await self.claim(new_run(), self.clock(), LEASE, timedelta(days=1))
            self.clock.advance(20)
        return await super().finish(claim, finish, now)


@pytest.mark.parametrize(
    "dispatch",
    [ScriptedTarget().on_dispatch, raising(TargetFailed("HTTP 400")), raising(TargetOutcomeUnknown("reset"))],
    ids=["after-success", "after-failure", "after-unknown"],
)
async def test_fenced_off_answers_in_progress_with_the_new_holders_lease(clock: Clock, dispatch) -> None:
    store = TakenOverDuringDispatch()
    store.clock = clock
    r = make_runner(clock, ScriptedTarget(dispatch), store)
    got = await answer(r)
    assert got == Answer(409, error("in_progress"), {"Retry-After": "280"}, got.message)  # 300 s lease, 20 s in
    assert "lost the run to another attempt" in got.message
    assert (await stored(r)).attempts == 2


async def test_fenced_off_with_the_record_gone_retries_after_one_second(clock: Clock) -> None:
    store = TakenOverDuringDispatch()
    store.clock, store.gone = clock, True
    got = await answer(make_runner(clock, ScriptedTarget(), store))
    assert got == Answer(409, error("in_progress"), {"Retry-After": "1"}, got.message)


# -- 422 -------------------------------------------------------------------------------------------


async def test_another_body_is_a_payload_mismatch_naming_the_body(clock: Clock) -> None:
    target = ScriptedTarget()
    r = make_runner(clock, target)
    await answer(r)
    got = await answer(r, body_sha256="1" * 64)
    assert got == Answer(422, error("payload_mismatch", field="body"), {}, got.message)
    assert BODY in got.message and "1" * 64 in got.message
    assert len(target.dispatched) == 1


# -- 429 -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "retry_after"), [(42, "42"), (None, str(int(THROTTLE_BACKOFF_SECONDS))), (0.2, "1"), (0, "1"), (1.5, "2")]
)
async def test_throttled_releases_the_claim_and_passes_on_the_delay(clock: Clock, given, retry_after: str) -> None:
    target = ScriptedTarget(raising(TargetThrottled("HTTP 429 from downstream", retry_after=given)))
    r = make_runner(clock, target)
    got = await answer(r)
    assert got == Answer(429, error("throttled", target=NOT_CREATED), {"Retry-After": retry_after}, got.message)
    assert "the claim was released" in got.message
    record = await stored(r)
    assert (record.status, record.last_error) == (FAILED, "HTTP 429 from downstream")


def hold(started: asyncio.Event, release: asyncio.Event):
    async def handler(request: DispatchRequest) -> str:
        started.set()
        await release.wait()
        return f"scripted/{request.run_id}"

    return handler


async def test_route_busy_gives_the_claim_back_without_calling_the_target(clock: Clock) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    target = ScriptedTarget(hold(started, release))
    r = make_runner(clock, target, limit=1)
    first = asyncio.create_task(answer(r, OTHER))
    await started.wait()

    got = await answer(r)
    assert got == Answer(
        429,
        error("throttled", target=NOT_CREATED),
        {"Retry-After": str(int(ROUTE_BUSY_RETRY_AFTER_SECONDS))},
        got.message,
    )
    assert "already has 1 dispatch(es) in flight" in got.message and "released before dispatching" in got.message
    record = await stored(r)
    assert record.status == FAILED  # claimable at once by the retry
    release.set()
    assert (await first).http == 200
    assert [d.run_id for d in target.dispatched] == [OTHER.run_id]
    assert (await answer(r)).http == 200  # the route is free again: the retry dispatches


async def test_route_busy_on_a_takeover_keeps_it_reconcilable(clock: Clock) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    target = ScriptedTarget(raising(TargetOutcomeUnknown("reset")))
    r = make_runner(clock, target, limit=1)
    await answer(r)  # attempt 1: unknown, claim kept
    clock.advance(LEASE.total_seconds())
    target.on_dispatch = hold(started, release)
    first = asyncio.create_task(answer(r, OTHER))
    await started.wait()

    got = await answer(r)
    assert got.http == 429 and got.body == error("throttled", target=NOT_CREATED)
    record = await stored(r)
    assert record.status == IN_PROGRESS and record.lease_expires == clock() and record.attempts == 2
    release.set()
    await first


# -- 502 / 504 -------------------------------------------------------------------------------------


async def test_failed_releases_the_claim_and_the_retry_dispatches_at_once(clock: Clock) -> None:
    target = ScriptedTarget(raising(TargetFailed("HTTP 400 bad request")))
    r = make_runner(clock, target)
    got = await answer(r)
    assert got == Answer(502, error("failed", target=NOT_CREATED), {}, got.message)
    assert got.message.startswith("HTTP 400 bad request; nothing was created and the claim was released")
    record = await stored(r)
    assert (record.status, record.last_error) == (FAILED, "target failed: HTTP 400 bad request")
    target.on_dispatch = ScriptedTarget().on_dispatch
    assert (await answer(r)).http == 200


async def test_failed_with_the_store_down_keeps_the_claim_and_says_so(clock: Clock) -> None:
    store = BrokenStore()
    r = make_runner(clock, ScriptedTarget(raising(TargetFailed("HTTP 400"))), store)
    store.fail_finish = True
    got = await answer(r)
    assert got == Answer(502, error("failed", target=NOT_CREATED), {}, got.message)
    assert "the claim is kept" in got.message and "retries wait for the lease" in got.message
    assert (await stored(r)).status == IN_PROGRESS


@pytest.mark.parametrize("store_down", [False, True], ids=["recorded", "store-down"])
async def test_unknown_keeps_the_claim_until_the_lease_ends(clock: Clock, store_down: bool) -> None:
    async def slow_then_reset(request: DispatchRequest) -> str:
        clock.advance(100.5)
        raise TargetOutcomeUnknown("reset after sending")

    store = BrokenStore()
    store.fail_finish = store_down
    r = make_runner(clock, ScriptedTarget(slow_then_reset), store)
    got = await answer(r)
    assert got == Answer(504, error("unknown", target=NOT_CREATED), {"Retry-After": "200"}, got.message)
    assert "reconciled with the target after the lease, at 2026-10-16T12:05:00Z" in got.message
    record = await stored(r)
    assert record.status == IN_PROGRESS and record.lease_expires == clock() - timedelta(seconds=100.5) + LEASE
    assert record.last_error == (None if store_down else "reset after sending")


@pytest.mark.parametrize(
    ("dispatch", "says"),
    [(raising(KeyError("oops")), "scripted target raised KeyError"), (raising(ValueError("bad")), "ValueError: bad")],
)
async def test_an_adapter_bug_is_unknown(clock: Clock, dispatch, says: str) -> None:
    r = make_runner(clock, ScriptedTarget(dispatch))
    got = await answer(r)
    assert got == Answer(504, error("unknown", target=NOT_CREATED), {"Retry-After": "300"}, got.message)
    assert says in got.message


async def test_a_dispatch_past_the_deadline_is_unknown(clock: Clock) -> None:
    async def hangs(request: DispatchRequest) -> str:
        await asyncio.sleep(10)
        return "late"

    r = make_runner(clock, ScriptedTarget(hangs), dispatch_timeout=0.02)
    got = await answer(r)
    assert got == Answer(504, error("unknown", target=NOT_CREATED), {"Retry-After": "300"}, got.message)
    assert got.message.startswith("dispatch took longer than 0.02s")


# -- 503 -------------------------------------------------------------------------------------------


async def test_store_down_before_the_dispatch_is_unavailable_and_calls_nothing(clock: Clock) -> None:
    store = BrokenStore()
    store.fail_claim = True
    target = ScriptedTarget()
    got = await answer(make_runner(clock, target, store))
    assert got == Answer(503, error("unavailable"), {}, got.message)
    assert "the target was not called" in got.message
    assert target.dispatched == []


async def test_draining_before_the_claim_refuses_and_stores_nothing(clock: Clock) -> None:
    r = make_runner(clock)
    r.shutdown.draining = True
    got = await answer(r)
    assert got == Answer(503, error("unavailable"), {}, got.message)
    assert await stored(r) is None


async def test_draining_after_the_claim_gives_the_run_back(clock: Clock) -> None:
    class DrainsDuringClaim(MemoryStore):
        async def claim(self, *args, **kwargs):
            claim = await super().claim(*args, **kwargs)
            r.shutdown.draining = True
            return claim

    target = ScriptedTarget()
    r = make_runner(clock, target, DrainsDuringClaim())
    got = await answer(r)
    assert got == Answer(503, error("unavailable"), {}, got.message)
    assert got.message == "runonce is shutting down; the claim was released before dispatching, retry"
    assert (await stored(r)).status == FAILED and target.dispatched == []


async def test_giving_a_run_back_after_losing_it_answers_in_progress(clock: Clock) -> None:
    class DrainsThenLoses(TakenOverDuringDispatch):
        async def claim(self, new, now, lease, retention):
            claim = await super().claim(new, now, lease, retention)
            r.shutdown.draining = True
            return claim

    store = DrainsThenLoses()
    store.clock = clock
    r = make_runner(clock, ScriptedTarget(), store)
    got = await answer(r)
    assert got == Answer(409, error("in_progress"), {"Retry-After": "280"}, got.message)
    assert "lost the run to another attempt" in got.message


async def test_draining_with_the_store_down_says_the_retry_waits_for_the_lease(clock: Clock) -> None:
    class DrainsThenFails(BrokenStore):
        async def claim(self, *args, **kwargs):
            claim = await super().claim(*args, **kwargs)
            r.shutdown.draining, self.fail_finish = True, True
            return claim

    r = make_runner(clock, ScriptedTarget(), DrainsThenFails())
    got = await answer(r)
    assert got == Answer(503, error("unavailable"), {}, got.message)
    assert "could not be released" in got.message and "retries wait for the lease" in got.message
    assert (await stored(r)).status == IN_PROGRESS


# -- the words of each answer: the facts an operator reads -------------------------------------------


async def test_a_throttled_answer_starts_with_the_targets_own_words(clock: Clock) -> None:
    r = make_runner(clock, ScriptedTarget(raising(TargetThrottled("HTTP 429 from downstream"))))
    assert (await answer(r)).message.startswith("HTTP 429 from downstream; the claim was released")


async def test_a_fenced_answer_names_the_attempt_that_holds_the_run_now(clock: Clock) -> None:
    store = TakenOverDuringDispatch()
    store.clock = clock
    got = await answer(make_runner(clock, ScriptedTarget(), store))
    assert "(run is now held by attempt " in got.message


async def test_draining_before_the_claim_says_another_instance_will_take_it(clock: Clock) -> None:
    r = make_runner(clock)
    r.shutdown.draining = True
    assert (await answer(r)).message == "runonce is shutting down; retry (another instance will take it)"


async def test_route_busy_records_why_and_says_when_the_claim_could_not_be_released(clock: Clock) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    store = BrokenStore()
    r = make_runner(clock, ScriptedTarget(hold(started, release)), store, limit=1)
    first = asyncio.create_task(answer(r, OTHER))
    await started.wait()
    await answer(r)
    assert (
        await stored(r)
    ).last_error == "route 'etl' already has 1 dispatch(es) in flight (max_concurrent_dispatches)"
    store.fail_finish = True
    got = await answer(r, replace(DELIVERY, job="weekly"))
    assert got.http == 429 and "the claim could not be released (deadline exceeded)" in got.message
    release.set()
    await first


# -- per-route in-flight accounting ------------------------------------------------------------


OUTCOMES = {
    "processed": ScriptedTarget().on_dispatch,
    "failed": raising(TargetFailed("HTTP 400")),
    "throttled": raising(TargetThrottled("HTTP 429")),
    "unknown": raising(TargetOutcomeUnknown("reset")),
    "adapter-bug": raising(RuntimeError("bug")),
}


@pytest.mark.parametrize("outcome", list(OUTCOMES))
async def test_a_limit_of_one_admits_a_run_and_frees_the_route_after_every_outcome(clock: Clock, outcome: str) -> None:
    target = ScriptedTarget(OUTCOMES[outcome])
    r = make_runner(clock, target, limit=1)
    first = await answer(r, payload={"mode": "full"})
    assert first.http != 429 or outcome == "throttled"
    [sent] = target.dispatched  # the first delivery on an idle route is never refused
    assert sent.payload == {"mode": "full"}
    assert r.limits.in_flight == {"etl": 0}
    target.on_dispatch = ScriptedTarget().on_dispatch
    assert (await answer(r, OTHER)).http == 200  # and the route is not left busy


async def test_the_route_is_freed_when_the_dispatch_is_fenced_or_the_store_fails(clock: Clock) -> None:
    store = TakenOverDuringDispatch()
    store.clock = clock
    r = make_runner(clock, ScriptedTarget(), store, limit=1)
    assert (await answer(r)).http == 409
    assert r.limits.in_flight == {"etl": 0}

    broken = BrokenStore()
    broken.fail_finish = True
    r = make_runner(clock, ScriptedTarget(), broken, limit=1)
    assert (await answer(r)).http == 504
    assert r.limits.in_flight == {"etl": 0}


async def test_the_route_is_freed_when_the_request_is_cancelled(clock: Clock) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    r = make_runner(clock, ScriptedTarget(hold(started, release)), limit=1)
    task = asyncio.create_task(answer(r))
    await started.wait()
    assert r.limits.in_flight == {"etl": 1}
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert r.limits.in_flight == {"etl": 0}


@pytest.mark.parametrize("limit", [1, 2, 3])
async def test_exactly_limit_runs_dispatch_at_once(clock: Clock, limit: int) -> None:
    started = [asyncio.Event() for _ in range(limit)]
    release = asyncio.Event()
    calls = iter(started)

    async def held(request: DispatchRequest) -> str:
        next(calls).set()
        await release.wait()
        return "ok"

    target = ScriptedTarget(held)
    r = make_runner(clock, target, limit=limit)
    running = [asyncio.create_task(answer(r, replace(DELIVERY, job=f"job-{i}"))) for i in range(limit)]
    for event in started:
        await event.wait()
    assert (await answer(r, replace(DELIVERY, job="one-too-many"))).http == 429
    release.set()
    assert [a.http for a in await asyncio.gather(*running)] == [200] * limit
    assert r.limits.in_flight == {"etl": 0}


# -- Retry-After ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "header"), [(-30, "1"), (0, "1"), (0.001, "1"), (1, "1"), (1.001, "2"), (299.5, "300")]
)
def test_retry_after_is_a_whole_number_of_seconds_never_below_one(seconds: float, header: str) -> None:
    assert render(errors.InProgress("busy", retry_after=seconds)).headers == {"Retry-After": header}


def test_fenced_names_the_record_that_won() -> None:
    assert "no record" in str(Fenced(None))


# -- shutdown ---------------------------------------------------------------------------------------


def hangs_for(seconds: float):
    async def handler(request: DispatchRequest) -> str:
        await asyncio.sleep(seconds)
        return "late"

    return handler


async def test_drain_cuts_a_dispatch_to_the_grace_and_answers_unknown(clock: Clock) -> None:
    r = make_runner(clock, ScriptedTarget(hangs_for(10)), dispatch_timeout=30)
    task = asyncio.create_task(answer(r))
    await asyncio.sleep(0.02)
    r.shutdown.drain(0.02)
    got = await asyncio.wait_for(task, 5)  # not the 30 s deadline
    assert got == Answer(504, error("unknown", target=NOT_CREATED), {"Retry-After": "300"}, got.message)
    assert got.message.startswith("dispatch took longer than the shutdown grace")
    assert r.shutdown.deadlines == set()


async def test_drain_never_lengthens_a_deadline_that_ends_sooner(clock: Clock) -> None:
    r = make_runner(clock, ScriptedTarget(hangs_for(10)), dispatch_timeout=0.05)
    task = asyncio.create_task(answer(r))
    await asyncio.sleep(0.01)
    r.shutdown.drain(60)
    got = await asyncio.wait_for(task, 5)  # the 0.05 s deadline stands, not the 60 s grace
    assert got.http == 504 and (await stored(r)).status == IN_PROGRESS


# -- what each error is chained to (the traceback an operator reads) --------------------------------


@pytest.mark.parametrize(
    ("raised", "answered"),
    [
        (TargetFailed("HTTP 400"), errors.Failed),
        (TargetThrottled("HTTP 429"), errors.Throttled),
        (TargetOutcomeUnknown("reset"), errors.OutcomeUnknown),
        (KeyError("adapter bug"), errors.OutcomeUnknown),
        (httpx.ConnectError("refused"), errors.Failed),  # nothing was sent
    ],
)
async def test_an_error_answer_is_chained_to_what_the_target_raised(clock: Clock, raised: Exception, answered) -> None:
    r = make_runner(clock, ScriptedTarget(raising(raised)))
    with pytest.raises(answered) as caught:
        await r.run(DELIVERY, {}, BODY)
    assert caught.value.__cause__ is raised


async def test_a_timeout_is_chained_to_the_timeout(clock: Clock) -> None:
    r = make_runner(clock, ScriptedTarget(hangs_for(10)), dispatch_timeout=0.02)
    with pytest.raises(errors.OutcomeUnknown) as caught:
        await r.run(DELIVERY, {}, BODY)
    assert isinstance(caught.value.__cause__, TimeoutError)


async def test_drain_lets_a_dispatch_that_ends_within_the_grace_finish(clock: Clock) -> None:
    r = make_runner(clock, ScriptedTarget(hangs_for(0.05)), dispatch_timeout=30)
    task = asyncio.create_task(answer(r))
    await asyncio.sleep(0.01)
    r.shutdown.drain(5)
    got = await asyncio.wait_for(task, 5)
    assert got.http == 200 and got.body["status"] == "processed"
