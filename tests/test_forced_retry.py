"""A force run's retries stay the force run (issue 10, defect 1), in every order Scheduler can
produce them, through the real app: lease 3 s, dispatch timeout 1 s, an injected clock.

Scheduler never has two executions of a job outstanding, so until a force run for (job, S)
completes, a delivery carrying the same headers is that force run's retry, even when it arrives
inside the forced-run tolerance where it looks like the scheduled run at S."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from runonce import errors
from runonce.api.main import create_app
from runonce.run.delivery import Delivery
from runonce.run.runner import Rules, Runner
from runonce.settings import Settings
from runonce.stores import NewRun, StoreUnavailable
from runonce.stores.memory import MemoryStore
from runonce.targets import DispatchRequest, TargetFailed
from runonce.targets.scripted import ScriptedTarget
from tests.support.clock import Clock

S = datetime(2026, 3, 8, 8, 0, 0, tzinfo=UTC)  # the schedule time the force run carries
HEADERS = {"X-CloudScheduler-JobName": "hourly", "X-CloudScheduler-ScheduleTime": "2026-03-08T08:00:00Z"}
ROUTES = """
routes:
  separate: {target: {type: log}}
  dedupe: {target: {type: log}, forced_runs: dedupe}
  refuse: {target: {type: log}, forced_runs: reject}
"""


class Downstream:
    """A scripted target whose next answers are queued: `hang`, `fail` or `ok` (the default)."""

    def __init__(self) -> None:
        self.plan: list[str] = []
        self.target = ScriptedTarget(dispatch=self._dispatch)

    async def _dispatch(self, request: DispatchRequest) -> str:
        step = self.plan.pop(0) if self.plan else "ok"
        if step == "hang":
            await asyncio.Event().wait()
        if step == "fail":
            raise TargetFailed("refused")
        return f"exec/{request.run_id[:8]}"

    @property
    def keys(self) -> list[tuple[str, str]]:
        return [(r.source, r.run_id) for r in self.target.dispatched]


class Api:
    def __init__(self, client: httpx.AsyncClient, store: MemoryStore, downstream: Downstream, clock: Clock):
        self.client, self.store, self.downstream, self.clock = client, store, downstream, clock

    async def at(self, seconds_from_s: float, route: str = "separate") -> dict:
        self.clock.now = S + timedelta(seconds=seconds_from_s)
        answer = await self.client.post(f"/v1/routes/{route}:run", headers=HEADERS)
        return {"code": answer.status_code, **answer.json()}


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    clock, store, downstream = Clock(), MemoryStore(), Downstream()
    settings = Settings(
        routes=ROUTES,
        auth="none",
        store="sqlite:///unused.db",
        lease_seconds=3,
        dispatch_timeout_seconds=1,
        store_timeout_seconds=0.5,
        forced_run_tolerance_seconds=5,
    )
    targets = dict.fromkeys(("separate", "dedupe", "refuse"), downstream.target)
    app = create_app(settings, store=store, targets=targets, clock=clock)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runonce") as client,
    ):
        yield Api(client, store, downstream, clock)


async def test_issue_scenario_a_hung_force_runs_retry_inside_the_tolerance_stays_the_force_run(api: Api) -> None:
    api.downstream.plan = ["hang"]
    forced = await api.at(-9)
    assert (forced["code"], forced["status"]) == (504, "unknown")
    retry = await api.at(-4)  # inside the tolerance, after the force run's lease (S-6)
    assert (retry["code"], retry["status"], retry["run_id"]) == (200, "processed", forced["run_id"])
    scheduled = await api.at(0)
    assert (scheduled["code"], scheduled["status"]) == (200, "processed")
    assert scheduled["run_id"] != forced["run_id"]
    # One key per run downstream: the force run (hung once, then re-sent with the same key after
    # reconciliation found nothing) and the scheduled run on its own.
    assert api.downstream.keys == [
        ("scheduler-forced", forced["run_id"]),
        ("scheduler-forced", forced["run_id"]),
        ("scheduler", scheduled["run_id"]),
    ]
    assert (await api.store.get(forced["run_id"], api.clock())).status == "completed"


async def test_retry_while_the_force_run_holds_its_lease_is_busy_not_a_new_run(api: Api) -> None:
    api.downstream.plan = ["hang"]
    forced = await api.at(-7)
    retry = await api.at(-4.5)  # lease until S-4
    assert (retry["code"], retry["status"], retry["run_id"]) == (409, "in_progress", forced["run_id"])
    assert len(api.downstream.keys) == 1
    # The scheduled run's claim, made beside the read of the force run, was given back untouched.
    runs = {r.run_id == forced["run_id"]: r for r in await api.store.list(api.clock())}
    assert (runs[True].status, runs[False].status) == ("in_progress", "failed")
    assert runs[False].last_error == f"this delivery was a retry of force run {forced['run_id']}"


async def test_failed_force_run_is_retried_under_its_own_key(api: Api) -> None:
    api.downstream.plan = ["fail"]
    forced = await api.at(-9)
    assert (forced["code"], forced["status"]) == (502, "failed")
    retry = await api.at(-2)
    assert (retry["code"], retry["status"], retry["run_id"]) == (200, "processed", forced["run_id"])
    scheduled = await api.at(1)
    assert scheduled["status"] == "processed" and scheduled["run_id"] != forced["run_id"]
    assert [source for source, _ in api.downstream.keys] == ["scheduler-forced", "scheduler-forced", "scheduler"]


async def test_completed_force_run_leaves_the_scheduled_run_its_own(api: Api) -> None:
    forced = await api.at(-60)
    assert forced["status"] == "processed"
    scheduled = await api.at(-3)  # Scheduler's clock a little early: still the scheduled run
    assert scheduled["status"] == "processed" and scheduled["run_id"] != forced["run_id"]
    assert (await api.at(2))["run_id"] == scheduled["run_id"]  # a retry of it replays
    assert [source for source, _ in api.downstream.keys] == ["scheduler-forced", "scheduler"]


async def test_force_run_whose_retries_all_failed_is_completed_by_the_scheduled_delivery(api: Api) -> None:
    api.downstream.plan = ["fail", "fail"]
    forced = await api.at(-30)
    assert (await api.at(-20))["status"] == "failed"  # Scheduler gives up on the force run
    scheduled = await api.at(0)
    # The force run created nothing; the scheduled delivery takes its key (one execution for S).
    assert (scheduled["status"], scheduled["run_id"]) == ("processed", forced["run_id"])
    assert len([k for k in api.downstream.keys if k[1] == forced["run_id"]]) == 3
    assert len({k for _, k in api.downstream.keys}) == 1


async def test_scheduled_delivery_before_any_force_run_is_unaffected(api: Api) -> None:
    scheduled = await api.at(0)
    assert scheduled["status"] == "processed"
    assert api.downstream.keys == [("scheduler", scheduled["run_id"])]
    assert [r.run_id for r in await api.store.list(api.clock())] == [scheduled["run_id"]]


async def test_an_expired_force_run_no_longer_claims_the_headers(api: Api) -> None:
    """Past retention a record counts as absent (README: retention >= Scheduler's retry window)."""
    api.downstream.plan = ["hang"]
    forced = await api.at(-9)
    late = await api.at(86400)  # the force run's record expired at S-9 + 1 day
    assert late["status"] == "processed" and late["run_id"] != forced["run_id"]
    assert await api.store.get(forced["run_id"], api.clock()) is None


@pytest.mark.parametrize("route", ["dedupe", "refuse"])
async def test_other_policies_key_the_retry_as_the_scheduled_run(api: Api, route: str) -> None:
    """dedupe: force run and scheduled run share one key anyway; reject: a refused force run leaves
    no record, so its retry inside the tolerance is the scheduled run (and runs once)."""
    api.downstream.plan = ["hang"] if route == "dedupe" else []
    first = await api.at(-9, route)
    retry = await api.at(-4, route)
    scheduled = await api.at(0, route)
    if route == "dedupe":
        assert first["status"] == "unknown" and retry["run_id"] == first["run_id"] == scheduled["run_id"]
    else:
        assert first["status"] == "forced_run_refused" and retry["status"] == "processed"
        assert scheduled["status"] == "duplicate" and scheduled["run_id"] == retry["run_id"]
    assert len({k for _, k in api.downstream.keys}) == 1


SCHEDULED = Delivery(
    source="scheduler",
    project="",
    location="",
    route="separate",
    job="hourly",
    schedule_time=S,
    may_be_forced_retry=True,
)
"""A scheduled delivery of `separate` at S, keyed as the scheduled run: maybe a force run's retry."""


def separate_runner(store: MemoryStore, target: ScriptedTarget) -> Runner:
    """A Runner of the one route `separate`, its clock stopped at S."""
    return Runner(
        store,
        {"separate": target},
        routes={"separate": Rules()},
        lease=timedelta(seconds=3),
        retention=timedelta(days=1),
        dispatch_timeout=timedelta(seconds=1),
        clock=lambda: S,
    )


class GetFails(MemoryStore):
    async def get(self, run_id, now):  # type: ignore[no-untyped-def]
        raise StoreUnavailable("deadline exceeded")


async def test_store_down_for_the_force_run_read_gives_the_claim_back_and_answers_503() -> None:
    """Which run a delivery is cannot be told: nothing is dispatched and the claim made beside the
    read is released at once, so Scheduler's retry is not held up by a lease."""
    store, target = GetFails(), ScriptedTarget()
    runner, delivery = separate_runner(store, target), SCHEDULED
    with pytest.raises(errors.Unavailable, match=r"target was not called \(deadline exceeded\)"):
        await runner.run(delivery, {}, "0" * 64)
    assert target.dispatched == []
    [released] = await store.list(S)
    assert released.status == "failed"  # claimable by the retry at once
    assert released.last_error == "could not tell whether this delivery retries a force run"


class ForcedClaimFails(MemoryStore):
    """Claims of force runs fail once `down` is set; the scheduled run's claim still succeeds."""

    down = False

    async def claim(self, new, now, lease, retention):  # type: ignore[no-untyped-def]
        if self.down and new.source == "scheduler-forced":
            raise StoreUnavailable("deadline exceeded")
        return await super().claim(new, now, lease, retention)


async def test_store_down_for_the_force_runs_claim_answers_503_for_the_force_run() -> None:
    store, target = ForcedClaimFails(), ScriptedTarget(dispatch=_refused)
    runner, delivery = separate_runner(store, target), SCHEDULED
    forced = delivery.as_forced()
    with pytest.raises(errors.Failed):
        await runner.run(forced, {}, "0" * 64)  # the force run failed: its retry is still due
    store.down = True

    with pytest.raises(errors.Unavailable, match="target was not called") as raised:
        await runner.run(delivery, {}, "0" * 64)
    assert (raised.value.run_id, raised.value.route) == (forced.run_id, "separate")
    assert len(target.dispatched) == 1


async def _refused(request: DispatchRequest) -> str:
    raise TargetFailed("refused")


async def _created(request: DispatchRequest) -> str:
    return f"executions/{request.run_id[:8]}"


class TakenOverBeforeGivenBack(MemoryStore):
    """Another attempt takes over the scheduled run's claim (its lease ran out) just before this
    attempt gives that claim back: the give-back is fenced."""

    async def finish(self, claim, finish, now):  # type: ignore[no-untyped-def]
        if claim.record.source == "scheduler":
            held = claim.record
            taken = await super().claim(
                NewRun(**{name: getattr(held, name) for name in NewRun.__dataclass_fields__}),
                held.lease_expires + timedelta(seconds=1),
                timedelta(seconds=3),
                timedelta(days=1),
            )
            assert taken.won
        return await super().finish(claim, finish, now)


async def test_a_give_back_fenced_by_another_attempt_still_runs_the_force_runs_retry() -> None:
    """The scheduled run's claim, made beside the force run's read, is not this delivery's; if
    another attempt holds it by the time it is given back, there is nothing of ours to give back,
    and the delivery goes on as the force run's retry."""
    store, target = TakenOverBeforeGivenBack(), ScriptedTarget()
    runner, delivery = separate_runner(store, target), SCHEDULED
    forced = delivery.as_forced()
    target.on_dispatch = _refused
    with pytest.raises(errors.Failed):
        await runner.run(forced, {}, "0" * 64)  # the force run failed: its retry is still due
    target.on_dispatch = _created

    result = await runner.run(delivery, {}, "0" * 64)
    assert result.status == "processed"
    assert [request.run_id for request in target.dispatched] == [forced.run_id, forced.run_id]
