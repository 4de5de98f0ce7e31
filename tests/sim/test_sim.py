"""The simulation in `make test`: a fixed number of seeded histories per store (more with
RUNONCE_SIM_HISTORIES / RUNONCE_SIM_SECONDS, another start with RUNONCE_SIM_SEED), each checked
against invariants I1-I11; a failure is shrunk and printed with its replay command."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from runonce.run.runner import Runner
from runonce.stores import base
from runonce.stores.base import Decision
from tests.support.stores import redis_url, spanner_table_url

from . import world
from .run import budget, explore, replay_command, shrink
from .world import draw_config, run_history


def _explore(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    seed, histories, seconds = budget(store)
    summary = explore(store, seed, histories, seconds)
    with capsys.disabled():
        print("\n" + "\n".join(summary.lines()))
    assert summary.histories > 0
    assert not summary.failures, "\n".join(summary.lines())


def test_simulation_on_memory(capsys: pytest.CaptureFixture[str]) -> None:
    _explore("memory", capsys)


def test_simulation_on_sqlite(capsys: pytest.CaptureFixture[str]) -> None:
    _explore("sqlite", capsys)


@pytest.mark.usefixtures("firestore_emulator")
def test_simulation_on_the_firestore_emulator(capsys: pytest.CaptureFixture[str]) -> None:
    _explore("firestore", capsys)


def test_simulation_on_the_spanner_emulator(
    spanner_database: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RUNONCE_SIM_SPANNER_URL", spanner_table_url(spanner_database))
    _explore("spanner", capsys)


def test_simulation_on_redis(redis_server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RUNONCE_SIM_REDIS_URL", redis_url(redis_server))
    _explore("redis", capsys)


def test_a_seed_replays_the_same_history() -> None:
    config = next(c for c in (draw_config(seed, "sqlite") for seed in range(20261016, 20261116)) if c.fault_rate >= 0.3)
    first, again = run_history(config), run_history(config)
    assert (first.faults, first.answers, first.crashes, first.violations) == (
        again.faults,
        again.answers,
        again.crashes,
        again.violations,
    )
    assert first.faults  # this seed injects faults
    assert run_history(config, first.faults).faults == first.faults  # replaying its faults: the same


def test_the_checker_catches_a_planted_bug_and_shrinks_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that ignores live leases (every busy claim taken over) must be caught, shrunk to
    a shorter fault list that still fails, and printed with a replay command."""
    real = base.decide

    def no_leases(found, new, now):  # type: ignore[no-untyped-def]
        decision = real(found, new, now)
        return Decision.TAKEOVER if decision is Decision.BUSY else decision

    monkeypatch.setattr(base, "decide", no_leases)
    summary = explore("memory", 20261016, 100, 60, shrink_failures=False)
    assert summary.failures, "the planted bug went unnoticed"
    report = min(summary.failures, key=lambda r: len(r.faults))
    assert any(v.startswith("I1 ") for v in report.violations)
    small = shrink(report)
    assert small.violations and len(small.faults) <= len(report.faults)
    assert set(small.faults) <= set(report.faults)
    assert f"--seed {report.config.seed}" in replay_command(small)


def test_the_checker_catches_a_backfill_keyed_apart_from_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    """A backfill that keys its runs other than Scheduler's delivery (here: under another job name)
    executes a fire time Scheduler already ran: caught as a different run_id (I9) and as a completed
    time executed again (I10)."""
    real = world.scheduled_delivery

    def keyed_apart(name, route, time):  # type: ignore[no-untyped-def]
        return real(name, route.model_copy(update={"job": f"backfill-{route.job}"}), time)

    monkeypatch.setattr(world, "scheduled_delivery", keyed_apart)
    summary = explore("memory", 20261016, 100, 60, shrink_failures=False)
    found = {v.split()[0] for report in summary.failures for v in report.violations}
    assert {"I9", "I10"} <= found, found


def test_the_checker_catches_a_backfill_that_claims_for_longer_than_the_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    """A backfill whose Runner claims with four leases (say, its own lease setting): a run it
    leaves unresolved stays held beyond a lease from its end (I11)."""
    real = world.run_one

    async def long_lease(runner, run, route):  # type: ignore[no-untyped-def]
        lease, runner.lease = runner.lease, runner.lease * 4
        try:
            return await real(runner, run, route)
        finally:
            runner.lease = lease

    monkeypatch.setattr(world, "run_one", long_lease)
    summary = explore("memory", 20261016, 100, 60, shrink_failures=False)
    assert any(v.startswith("I11 ") for report in summary.failures for v in report.violations)


# Seeds whose previous execution on the `wait` route ran past Scheduler's whole retry window, with
# attempts whose deadline ran out before runonce answered them 409 `waiting`.
WAITS_PAST_THE_WINDOW = [
    (52005337, {"get:cf7da41c:9": "crash_before"}),
    (52005348, {"list:ovw:10": "crash_after"}),
]


# A force run's late retry: its attempt processed past the deadline, the next one was the scheduled
# run (README, Force runs) and waited for that execution; the last retry processed past the deadline.
PROCESSED_PAST_THE_DEADLINE = [
    (53004771, {"claim:a0ff263a:1": "crash_after"}),
    (
        57005603,
        {
            "claim:2d9b0c4a:1": "crash_after",
            "claim:561ea58c:6": "commit_lose_answer",
            "claim:5cd497e7:1": "crash_before",
            "dispatch:5cd497e7:1": "crash_after",
            "finish:561ea58c:3": "crash_before",
            "finish:d4d150c7:1": "fail_before_commit",
            "get:2c22622a:2": "commit_then_timeout",
            "get:d4d150c7:3": "crash_before",
            "list:ovs:2": "commit_lose_answer",
            "list:ovs:4": "commit_lose_answer",
            "reconcile:d4d150c7:2": "crash_after",
            "release:2d9b0c4a:1": "crash_before",
            "release:561ea58c:2": "crash_after",
        },
    ),
]


def test_a_wait_while_its_own_twin_claims_the_scheduled_runs_key_is_no_failure() -> None:
    """Seed 70000719: the force run's last retry arrived twice; one copy claimed the scheduled
    run's key (to learn whether it retries the force run), the other saw that live claim and
    answered 409 `waiting`; Scheduler gave up, and the scheduled execution then ran the force run."""
    faults = {
        "claim:c15496e3:1": "crash_after",
        "get:0a02e4ee:1": "crash_after",
        "list:ovs:1": "commit_then_timeout",
        "reconcile:54ea8f77:1": "cannot_tell",
    }
    assert run_history(draw_config(70000719, "memory"), faults).violations == []


@pytest.mark.parametrize(("seed", "faults"), PROCESSED_PAST_THE_DEADLINE)
def test_an_attempt_processed_past_a_short_deadline_is_no_failure(seed: int, faults: dict[str, str]) -> None:
    report = run_history(draw_config(seed, "memory"), faults)
    assert report.violations == []
    assert report.covered["attempts past a short deadline, answered 200 or waiting (I2)"] > 0


@pytest.mark.parametrize(("seed", "faults"), WAITS_PAST_THE_WINDOW)
def test_a_wait_past_the_retry_window_is_a_missed_run_and_a_wait_that_never_ends_is_caught(
    seed: int, faults: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """README, overlap `wait`: if the job's retry window runs out while the previous execution
    runs, the run is missed. An attempt Scheduler stopped waiting for is judged by runonce's late
    answer, a 409 `waiting` like its in-time ones: no I2. But a state read that says "running"
    after the execution ended keeps the run waiting for nothing: I2, also when that read is so slow
    that every such answer comes past the attempt deadline."""
    config = draw_config(seed, "memory")
    report = run_history(config, faults)
    assert report.violations == []
    assert report.covered["attempts past a short deadline, answered 200 or waiting (I2)"] > 0

    async def never_ends(self: world.SimTarget, resource: str) -> bool:
        await asyncio.sleep(config.attempt_deadline)
        return True

    monkeypatch.setattr(world.SimTarget, "is_running", never_ends)
    assert any(v.startswith("I2 ") for v in run_history(config, faults).violations)


def test_an_answer_past_a_deadline_that_follows_the_retry_rule_is_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the attempt deadline README's retry rule asks for (dispatch timeout + three store
    calls), runonce answers in time: a Runner planted to answer later is caught (I2), though each
    late answer is a 200."""
    config = draw_config(52005348, "memory")
    config = dataclasses.replace(config, attempt_deadline=config.dispatch_timeout + 3 * config.store_timeout)
    assert run_history(config, {}).violations == []
    real = Runner.run

    async def slow(self: Runner, *args: Any, **kwargs: Any) -> Any:
        result = await real(self, *args, **kwargs)
        await asyncio.sleep(config.attempt_deadline)
        return result

    monkeypatch.setattr(Runner, "run", slow)
    assert any(v.startswith("I2 ") for v in run_history(config, {}).violations)


# -- the paths around the core: backfill, the audit and its catch-up --------------------------------
# Each planted bug is one these paths had (or could have): the seeds are histories that meet it.


def test_the_checker_catches_a_catch_up_past_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """A catch-up that runs fire times up to a future schedule time (a force run of the audit job)
    and a run_one that does not refuse them: executions before their time (I12), on the app's
    path and the Runner's."""
    import runonce.api.missed as api_missed
    from runonce import errors
    from runonce.missed import backfill
    from runonce.missed.audit import body_sha256

    real = backfill.catch_up

    async def ahead(runner, store, routes, at, now, **kwargs):  # type: ignore[no-untyped-def]
        return await real(runner, store, routes, at + timedelta(hours=1), now + timedelta(hours=1), **kwargs)

    async def any_time(runner, run, route):  # type: ignore[no-untyped-def]
        try:
            result = await runner.run(run.delivery, dict(route.body), body_sha256(route.body), late_ok=True)
        except errors.DeliveryError as exc:
            return backfill.Outcome(run, error=exc)
        return backfill.Outcome(run, result=result)

    for seed in (20261021, 20261025):  # the app (web), the Runner
        assert run_history(draw_config(seed, "memory")).violations == []
    monkeypatch.setattr(world, "catch_up", ahead)
    monkeypatch.setattr(api_missed, "catch_up", ahead)
    monkeypatch.setattr(backfill, "run_one", any_time)
    for seed in (20261021, 20261025):
        assert any(v.startswith("I12 ") for v in run_history(draw_config(seed, "memory")).violations), seed


def test_the_checker_catches_a_backfill_without_the_route_guards(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's backfill Runner, as it was built (no guards): an execution started while the one
    before it on an overlap route ran (I13)."""
    real = world.run_all

    async def unguarded(runner, runs, route, **kwargs):  # type: ignore[no-untyped-def]
        guards, runner.guards = runner.guards, {}
        try:
            return await real(runner, runs, route, **kwargs)
        finally:
            runner.guards = guards

    assert run_history(draw_config(20261062, "memory")).violations == []
    monkeypatch.setattr(world, "run_all", unguarded)
    assert any(v.startswith("I13 ") for v in run_history(draw_config(20261062, "memory")).violations)


def test_the_checker_catches_an_audit_that_answers_an_error_after_completing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A catch-up that fails after the audit's run was recorded completed: the answer (400 on the
    app's path, 500 on the Runner's) disagrees with the record (I14)."""
    import runonce.api.missed as api_missed
    from runonce.missed.audit import RangeRefused

    async def refusing(*args: Any, **kwargs: Any) -> Any:
        raise RangeRefused("range", "more than 20000 fire times")

    monkeypatch.setattr(world, "catch_up", refusing)
    monkeypatch.setattr(api_missed, "catch_up", refusing)
    for seed in (20261021, 20261025):
        assert any(v.startswith("I14 ") for v in run_history(draw_config(seed, "memory")).violations), seed


def test_the_checker_catches_a_backfill_whose_runs_keep_each_other_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backfill as it was over HTTP: every fire time of an overlap route at once, no retry; each
    sees the others' claims and waits, so the first waits with nothing else on the route (I15)."""
    from runonce.missed import backfill

    real = world.run_all

    async def at_once(runner, runs, route, **kwargs):  # type: ignore[no-untyped-def]
        return await real(runner, runs, route, **{**kwargs, "timeout": None})

    assert run_history(draw_config(20261062, "memory")).violations == []
    monkeypatch.setattr(backfill, "backfill_concurrency", lambda route, asked: max(1, asked))
    monkeypatch.setattr(world, "run_all", at_once)
    assert any(v.startswith("I15 ") for v in run_history(draw_config(20261062, "memory")).violations)


def test_an_audit_told_unavailable_after_an_earlier_attempt_completed_its_run_is_no_failure() -> None:
    """The audit's run was completed by an attempt that crashed after finishing (no answer); the
    next attempt's replay met a store fault and was told 503: the record is not its doing (I14)."""
    faults = {
        "claim:5134b7b2:3": "commit_lose_answer",
        "finish:5134b7b2:2": "crash_after",
        "get:6c91effc:1": "fail_before_commit",
    }
    assert run_history(draw_config(20262083, "memory"), faults=faults).violations == []


def test_a_catch_up_whose_answer_a_crash_lost_is_still_a_past_time_run_on_purpose() -> None:
    """The audit's catch-up ran late fire times on purpose; the instance crashed after finishing
    one, so no answer named them. They are known from the dispatch, not the answer (I8)."""
    assert run_history(draw_config(40015320, "memory"), faults={"finish:be70a9a0:1": "crash_after"}).violations == []


def test_an_audit_told_its_body_differs_from_the_one_that_completed_its_run_is_no_failure() -> None:
    """Two audit deliveries with one identity (job and schedule time) and different bodies: the
    second is told 422 payload_mismatch while the first's run is completed, as it should be (I14)."""
    assert run_history(draw_config(60003594, "memory"), faults={}).violations == []


def test_the_checker_catches_a_storage_event_keyed_by_its_message_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """Storage events keyed like any message (subscription + message id, ce-source + ce-id): the same
    event published under several ids starts several executions, caught as I1."""
    from runonce.run import events

    monkeypatch.setattr(events, "default_identity", lambda event: events.DEFAULT_IDENTITY[event.source])
    summary = explore("memory", 20261016, 100, 60, shrink_failures=False)
    found = [v for report in summary.failures for v in report.violations if v.startswith("I1 event storage-")]
    assert found, "the planted bug went unnoticed"
