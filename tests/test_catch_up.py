"""The audit as a scheduled run (AuditTarget under the real Runner) and catch-up racing Scheduler's late
delivery of the same run: one execution, in either order and at once. Real Runner and SQLite store,
the test's clock, a scripted target that counts executions."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runonce import errors
from runonce.metrics import Metrics
from runonce.missed.audit import AUDIT_ROUTE, AuditTarget, body_sha256, catch_up_runs, scheduled_runs
from runonce.missed.backfill import catch_up, run_one
from runonce.routes import parse_routes
from runonce.run.delivery import format_schedule_time, parse_delivery
from runonce.run.runner import Runner
from runonce.stores.sqlite import SQLiteStore
from runonce.targets import DispatchRequest, TargetFailed
from runonce.targets.scripted import ScriptedTarget
from tests.support.clock import Clock

LEASE = timedelta(seconds=300)
RETENTION = timedelta(days=1)
AUDIT_AT = datetime(2026, 3, 8, 12, 0, tzinfo=UTC)
ROUTES = parse_routes(
    """
routes:
  etl:
    target: {type: log}
    job: etl-job
    schedule: "*/5 * * * *"
    namespace: {project: proj-1, location: us-central1}
    catch_up: latest
    body: {mode: full}
  report:
    target: {type: log}
    job: report-job
    schedule: "*/5 * * * *"
    namespace: {project: proj-1, location: us-central1}
""",
    "test",
)


class World:
    """One process: a Runner over a SQLite store with the etl/report targets and the audit."""

    def __init__(self, store: SQLiteStore, clock: Clock, delay: float = 0.0):
        async def slow(request: DispatchRequest) -> str:
            await asyncio.sleep(delay)
            return f"exec/{request.run_id}"

        self.store, self.clock = store, clock
        self.etl, self.report = ScriptedTarget(slow), ScriptedTarget(slow)
        self.metrics = Metrics()
        self.audit = AuditTarget(store, ROUTES, lease=LEASE, retention=RETENTION, clock=clock, metrics=self.metrics)
        self.runner = Runner(
            store,
            {"etl": self.etl, "report": self.report, AUDIT_ROUTE: self.audit},
            routes=ROUTES,
            lease=LEASE,
            retention=RETENTION,
            dispatch_timeout=timedelta(seconds=30),
            clock=clock,
            metrics=self.metrics,
        )

    async def scheduler(self, route: str, when: datetime):
        """Scheduler's delivery of `route`'s run at `when`, as the web layer parses it."""
        config = ROUTES[route]
        headers = {"X-CloudScheduler-JobName": config.job, "X-CloudScheduler-ScheduleTime": when.isoformat()}
        delivery = parse_delivery(
            route, headers, ("proj-1", "us-central1"), self.clock(), timedelta(seconds=5), config.policy
        )
        return await self.runner.run(delivery, dict(config.body), body_sha256(config.body))

    async def run_audit(self, at: datetime = AUDIT_AT, payload: dict | None = None):
        """The audit job's delivery, then the catch-ups if this audit run was the one to process it."""
        headers = {"X-CloudScheduler-JobName": "runonce-audit", "X-CloudScheduler-ScheduleTime": at.isoformat()}
        delivery = parse_delivery(AUDIT_ROUTE, headers, ("proj-1", "us-central1"), self.clock(), timedelta(seconds=5))
        payload = payload or {}
        result = await self.runner.run(delivery, payload, body_sha256(payload))
        if result.status != "processed":
            return result, []
        return result, await catch_up(
            self.runner, self.store, ROUTES, at, self.clock(), lease=LEASE, retention=RETENTION
        )


@pytest.fixture
async def world(tmp_path: Path):
    store = SQLiteStore(str(tmp_path / "runs.db"))
    yield World(store, Clock(AUDIT_AT + timedelta(seconds=20)))
    await store.close()


async def fill(world: World, skip: set[datetime]) -> None:
    """Scheduler's deliveries of both routes for the hour before the audit, except at `skip`."""
    for run in scheduled_runs(ROUTES, AUDIT_AT - timedelta(hours=1), AUDIT_AT):
        if run.time not in skip:
            await world.scheduler(run.route, run.time)


MISSED = AUDIT_AT - timedelta(minutes=10)  # 11:50, due by the audit's 11:55 cut


async def test_the_audit_reports_each_missed_run_once_and_catches_up_the_latest(world: World, caplog) -> None:
    await fill(world, skip={MISSED, AUDIT_AT - timedelta(minutes=5)})  # 11:55 is not due at 12:00 − lease
    executed = len(world.etl.dispatched)
    with caplog.at_level(logging.ERROR, logger="runonce.audit"):
        result, caught = await world.run_audit()
    assert result.status == "processed" and result.record.target["resource"].endswith(
        "11:45:00Z/2026-03-08T11:55:00Z: 2 missed of 4"
    )
    missed = [r for r in caplog.records if getattr(r, "fields", {}).get("outcome") == "missed"]
    assert sorted(r.fields["route"] for r in missed) == ["etl", "report"]
    assert {r.fields["schedule_time"] for r in missed} == {"2026-03-08T11:50:00Z"}
    assert world.metrics.missed_runs.labels("etl")._value.get() == 1
    # etl catches up its latest due run (11:50) with Scheduler's run_id and body; report has catch_up none
    assert [(o.run.route, o.outcome) for o in caught] == [("etl", "processed")]
    assert len(world.etl.dispatched) == executed + 1 and world.etl.dispatched[-1].payload == {"mode": "full"}
    assert world.etl.dispatched[-1].run_id == caught[0].run.run_id and world.etl.dispatched[-1].source == "scheduler"


async def test_a_run_that_failed_until_scheduler_gave_up_is_missed_and_caught_up(world: World, caplog) -> None:
    """A run whose attempts all ended `failed` did not happen (the target refused; or, on an
    `overlap: wait` route, it waited for the previous execution past Scheduler's retry window): the
    audit reports it with why, and catch-up runs it, once (issue 13 §1)."""
    await fill(world, skip={MISSED})
    real = world.etl.on_dispatch

    async def refuse(request: DispatchRequest) -> str:
        raise TargetFailed("the route's previous execution exec/x is still running (overlap: wait)")

    world.etl.on_dispatch = refuse
    with pytest.raises(errors.DeliveryError):
        await world.scheduler("etl", MISSED)
    assert (await world.store.get(caught_id(MISSED), world.clock())).status == "failed"
    world.etl.on_dispatch = real
    executed = len(world.etl.dispatched)
    with caplog.at_level(logging.ERROR, logger="runonce.audit"):
        _result, caught = await world.run_audit()
    reported = {
        r.fields["route"]: r.fields for r in caplog.records if getattr(r, "fields", {}).get("outcome") == "missed"
    }
    assert reported["report"]["why"] == "no delivery"  # the other route's hole (fill skipped it too)
    missed = reported["etl"]
    assert missed["schedule_time"] == "2026-03-08T11:50:00Z" and missed["run_id"] == caught_id(MISSED)
    assert missed["why"].startswith("failed: ") and "overlap: wait" in missed["why"]
    assert [(o.run.route, o.outcome) for o in caught] == [("etl", "processed")]
    assert len(world.etl.dispatched) == executed + 1 and world.etl.dispatched[-1].run_id == caught_id(MISSED)
    world.clock.advance(600)
    _, again = await world.run_audit(AUDIT_AT + timedelta(minutes=10))
    assert caught_id(MISSED) not in {o.run.run_id for o in again}  # completed now: not missed
    assert [r.run_id for r in world.etl.dispatched].count(caught_id(MISSED)) == 2  # the refused attempt, the catch-up


def caught_id(when: datetime) -> str:
    """The run_id of etl's Scheduler delivery at `when`."""
    [run] = list(scheduled_runs({"etl": ROUTES["etl"]}, when, when + timedelta(seconds=1)))
    return run.run_id


async def test_a_duplicated_audit_delivery_reports_nothing_twice_and_catches_up_nothing_twice(
    world: World, caplog
) -> None:
    await fill(world, skip={MISSED})
    first, caught = await world.run_audit()
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="runonce.audit"):
        again, caught_again = await world.run_audit()
    assert again.status == "duplicate" and again.record.target == first.record.target and caught_again == []
    assert [r for r in caplog.records if getattr(r, "fields", {}).get("outcome") == "missed"] == []
    assert world.metrics.missed_runs.labels("etl")._value.get() == 1 and len(caught) == 1


async def test_the_next_audit_does_not_report_the_caught_up_run_and_every_fire_time_is_reported_once(
    world: World,
) -> None:
    await fill(world, skip={MISSED})
    await world.run_audit()
    world.clock.advance(600)
    for when in (AUDIT_AT - timedelta(minutes=5), AUDIT_AT):  # Scheduler delivered the next ones
        await world.scheduler("etl", when)
        await world.scheduler("report", when)
    later, caught = await world.run_audit(AUDIT_AT + timedelta(minutes=10))
    # [11:55, 12:05): the 11:50 miss was the previous audit's to report, and etl's was caught up
    assert later.record.target["resource"].endswith("11:55:00Z/2026-03-08T12:05:00Z: 0 missed of 4") and caught == []


async def test_catch_up_then_schedulers_late_retry_is_one_execution(world: World) -> None:
    await fill(world, skip={MISSED})
    before = len(world.etl.dispatched)
    _, caught = await world.run_audit()
    late = await world.scheduler("etl", MISSED)
    assert caught[0].outcome == "processed" and late.status == "duplicate"
    assert late.record.run_id == caught[0].run.run_id and len(world.etl.dispatched) == before + 1


async def test_schedulers_late_delivery_then_the_audit_is_one_execution(world: World) -> None:
    await fill(world, skip={MISSED})
    before = len(world.etl.dispatched)
    world.clock.advance(5)
    late = await world.scheduler("etl", MISSED)
    result, caught = await world.run_audit()
    assert late.status == "processed" and caught == [] and "1 missed" in result.record.target["resource"]  # report only
    assert len(world.etl.dispatched) == before + 1


async def test_catch_up_racing_schedulers_late_delivery_is_one_execution(tmp_path: Path) -> None:
    """Both have decided to deliver the run and claim it at once, while the target takes a moment:
    one dispatches, the other gets 409 in_progress (Scheduler retries, then replays)."""
    store = SQLiteStore(str(tmp_path / "race.db"))
    world = World(store, Clock(AUDIT_AT + timedelta(seconds=20)), delay=0.2)
    try:
        runs = await catch_up_runs(
            store, "etl", ROUTES["etl"], AUDIT_AT, world.clock(), lease=LEASE, retention=RETENTION
        )
        [run] = runs
        caught, late = await asyncio.gather(
            run_one(world.runner, run, ROUTES["etl"]), world.scheduler("etl", run.time), return_exceptions=True
        )
        retried = await world.scheduler("etl", run.time)
        executed = [request.run_id for request in world.etl.dispatched]
    finally:
        await store.close()
    assert executed == [run.run_id]
    outcomes = {caught.outcome, late.status if not isinstance(late, errors.InProgress) else "in_progress"}
    assert outcomes == {"processed", "in_progress"} and retried.status == "duplicate"


async def test_a_catch_up_of_a_time_whose_force_run_is_unresolved_runs_the_scheduled_run_itself(world: World) -> None:
    """A force run carrying 11:50 (sent at 11:46) failed, and Scheduler's 11:50 delivery never came.
    The audit's catch-up of 11:50 is the scheduled run, not a retry of that force run (Scheduler's
    one-outstanding-execution rule says nothing of a catch-up): 11:50's own run executes and the
    outcome names it. Found by the simulation (seed 20261104): the table said 11:50 ran when only
    the force run had been retried."""
    await fill(world, skip={MISSED})
    real = world.etl.on_dispatch

    async def refuse_once(request: DispatchRequest) -> str:
        world.etl.on_dispatch = real
        raise TargetFailed("refused")

    world.etl.on_dispatch = refuse_once
    config = ROUTES["etl"]
    headers = {"X-CloudScheduler-JobName": config.job, "X-CloudScheduler-ScheduleTime": MISSED.isoformat()}
    forced = parse_delivery(
        "etl", headers, ("proj-1", "us-central1"), MISSED - timedelta(minutes=4), timedelta(seconds=5), config.policy
    )
    assert forced.source == "scheduler-forced"
    with pytest.raises(errors.DeliveryError):
        await world.runner.run(forced, dict(config.body), body_sha256(config.body))
    _, caught = await world.run_audit()
    assert [(o.run.route, o.run.time, o.outcome) for o in caught] == [("etl", MISSED, "processed")]
    dispatched = world.etl.dispatched[-1]
    assert dispatched.run_id == caught[0].run.run_id != forced.run_id and dispatched.source == "scheduler"


# -- a fire time that is not due yet is never dispatched ------------------------------------------


@pytest.mark.parametrize("ahead", [timedelta(seconds=4), timedelta(minutes=52), timedelta(days=3)])
async def test_an_audit_with_a_future_schedule_time_audits_up_to_now_and_dispatches_nothing_not_due(
    world: World, ahead: timedelta
) -> None:
    """A force run of the audit job (Scheduler sends the next schedule time) or an admin's call with
    a future X-CloudScheduler-ScheduleTime: the audit reports and catches up to now, never past it."""
    latest = AUDIT_AT - timedelta(minutes=5)  # due by now − the lease
    await fill(world, skip={MISSED, latest})
    now = world.clock()
    result, caught = await world.run_audit(at=now + ahead)
    assert result.status == "processed"
    assert [(outcome.run.time, outcome.outcome) for outcome in caught] == [(latest, "processed")]
    assert all(datetime.fromisoformat(r.schedule_time) <= now for r in world.etl.dispatched + world.report.dispatched)
    assert result.record.target["resource"].endswith(f"{format_schedule_time(now - LEASE)}: 4 missed of 4")


async def test_catch_up_runs_of_a_future_audit_time_stop_at_now(world: World) -> None:
    now = world.clock()
    runs = await catch_up_runs(
        world.store, "etl", ROUTES["etl"], now + timedelta(hours=5), now, lease=LEASE, retention=RETENTION
    )
    assert runs and all(run.time <= now - LEASE for run in runs)


async def test_a_backfill_or_catch_up_of_a_fire_time_after_now_is_refused_and_claims_nothing(world: World) -> None:
    now = world.clock()
    [future] = scheduled_runs({"etl": ROUTES["etl"]}, now + timedelta(minutes=1), now + timedelta(minutes=6))
    outcome = await run_one(world.runner, future, ROUTES["etl"])
    assert (outcome.outcome, outcome.error.field) == ("invalid", "schedule_time")
    assert "is not due yet" in outcome.error.message and world.etl.dispatched == []
    assert await world.store.get(future.run_id, now) is None
    assert (outcome.error.route, outcome.error.run_id) == ("etl", future.run_id)
    assert outcome.to_json() == {**future.to_json(), "outcome": "invalid", "error": outcome.error.message}


async def test_a_catch_up_of_a_fire_time_that_is_due_this_very_moment_dispatches_it(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "runs.db"))
    world = World(store, Clock(AUDIT_AT))
    try:
        [due] = scheduled_runs({"etl": ROUTES["etl"]}, AUDIT_AT, AUDIT_AT + timedelta(minutes=1))
        outcome = await run_one(world.runner, due, ROUTES["etl"])
    finally:
        await store.close()
    assert outcome.outcome == "processed" and [r.run_id for r in world.etl.dispatched] == [due.run_id]
