"""One conformance suite for every claim store (memory, SQLite, Firestore and Spanner on the real
emulators, Redis on a real redis-server).

Each test is a rule of the run protocol (docs/contract.md, "The run record and its protocol"). Time
is injected: no test sleeps for a lease.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

import pytest

from runonce.stores import Decision, Fenced, Finish, RunStore
from runonce.stores.base import COMPLETED, FAILED, IN_PROGRESS, SKIPPED
from tests.support.runs import LEASE, RETENTION, T0, claim, new_run


async def test_fresh_claim_creates_an_in_progress_record(store: RunStore) -> None:
    result = await claim(store)

    assert result.decision is Decision.CREATE and result.won and result.previous is None
    record = result.record
    assert record.status == IN_PROGRESS
    assert record.attempts == 1
    assert record.lease_expires == T0 + LEASE
    assert record.expire_at == T0 + RETENTION
    assert record.created_at == record.updated_at == T0
    assert (record.route, record.job, record.schedule_time) == ("etl", "nightly", "2026-10-16T12:00:00Z")
    assert await store.get(record.run_id, T0) == record


async def test_live_lease_is_busy_and_changes_nothing(store: RunStore) -> None:
    first = await claim(store)
    second = await claim(store, T0 + LEASE - timedelta(seconds=1))

    assert second.decision is Decision.BUSY and not second.won
    assert second.record.attempt_id == first.record.attempt_id
    assert await store.get(first.record.run_id, T0) == first.record


async def test_completed_run_is_replayed_with_its_target(store: RunStore) -> None:
    first = await claim(store)
    target = {"type": "http", "resource": "https://example.test/run"}
    done = await store.finish(first, Finish(COMPLETED, target=target), T0 + timedelta(seconds=2))
    assert done.status == COMPLETED and done.target == target

    later = await claim(store, T0 + LEASE * 3)  # long after the lease: still a replay
    assert later.decision is Decision.REPLAY
    assert later.record.target == target
    assert later.record.attempts == 1


async def test_skipped_run_is_replayed_with_its_reason_and_no_target(store: RunStore) -> None:
    first = await claim(store)
    reason = "late: first claimed 7200s after its schedule time"
    skipped = await store.finish(first, Finish(SKIPPED, last_error=reason), T0 + timedelta(seconds=1))
    assert skipped.status == SKIPPED and skipped.target is None

    later = await claim(store, T0 + LEASE * 3)  # like completed: a replay for as long as it is kept
    assert later.decision is Decision.REPLAY and not later.won
    assert (later.record.status, later.record.last_error, later.record.attempts) == (SKIPPED, reason, 1)
    assert [r.run_id for r in await store.list(T0, status=SKIPPED)] == [first.record.run_id]


async def test_failed_run_is_claimable_at_once_and_keeps_last_error(store: RunStore) -> None:
    first = await claim(store)
    await store.finish(first, Finish(FAILED, last_error="HTTP 500"), T0 + timedelta(seconds=1))

    retry = await claim(store, T0 + timedelta(seconds=2))  # lease still "live" by the clock

    assert retry.decision is Decision.TAKEOVER and retry.won
    assert retry.previous is not None and retry.previous.status == FAILED
    assert retry.record.attempts == 2
    assert retry.record.attempt_id != first.record.attempt_id
    assert retry.record.last_error == "HTTP 500"
    assert retry.record.created_at == T0  # the run's age, and so its expire_at, do not move


async def test_expired_lease_is_taken_over_and_fences_the_old_attempt(store: RunStore) -> None:
    stale = await claim(store)
    takeover = await claim(store, T0 + LEASE + timedelta(seconds=1))

    assert takeover.decision is Decision.TAKEOVER
    assert takeover.previous is not None and takeover.previous.status == IN_PROGRESS  # -> reconcile
    assert takeover.record.attempts == 2

    with pytest.raises(Fenced) as refused:
        await store.finish(stale, Finish(COMPLETED, target={"type": "log", "resource": "x"}), T0 + LEASE * 2)
    assert refused.value.found is not None
    assert refused.value.found.attempt_id == takeover.record.attempt_id
    current = await store.get(takeover.record.run_id, T0 + LEASE * 2)
    assert current is not None and current.status == IN_PROGRESS and current.target is None


async def test_a_finished_attempt_cannot_finish_twice(store: RunStore) -> None:
    first = await claim(store)
    await store.finish(first, Finish(FAILED, last_error="boom"), T0)
    with pytest.raises(Fenced):
        await store.finish(first, Finish(COMPLETED, target={"type": "log", "resource": "x"}), T0)


async def test_unknown_outcome_keeps_the_claim_and_its_lease(store: RunStore) -> None:
    first = await claim(store)
    kept = await store.finish(first, Finish(IN_PROGRESS, last_error="timeout"), T0 + timedelta(seconds=30))

    assert kept.status == IN_PROGRESS and kept.last_error == "timeout"
    assert kept.lease_expires == T0 + LEASE
    assert (await claim(store, T0 + timedelta(seconds=60))).decision is Decision.BUSY
    assert (await claim(store, T0 + LEASE)).decision is Decision.TAKEOVER  # lease ends at lease_expires


async def test_same_run_with_another_body_is_a_mismatch_in_every_state(store: RunStore) -> None:
    first = await claim(store)
    other = new_run(body="c" * 64)
    assert (await claim(store, T0, other)).decision is Decision.MISMATCH
    await store.finish(first, Finish(COMPLETED, target={"type": "log", "resource": "x"}), T0)
    found = await claim(store, T0, other)
    assert found.decision is Decision.MISMATCH and found.record.status == COMPLETED


async def test_a_failed_run_delivered_with_another_body_is_a_mismatch_and_stays_failed(store: RunStore) -> None:
    first = await claim(store)
    failed = await store.finish(first, Finish(FAILED, last_error="HTTP 500"), T0)
    found = await claim(store, T0 + timedelta(seconds=1), new_run(body="c" * 64))
    assert found.decision is Decision.MISMATCH and found.record == failed
    assert await store.get(failed.run_id, T0) == failed  # not taken over: the retry with the first body still can
    assert (await claim(store, T0 + timedelta(seconds=2))).decision is Decision.TAKEOVER


async def test_expired_record_counts_as_absent(store: RunStore) -> None:
    first = await claim(store)
    await store.finish(first, Finish(COMPLETED, target={"type": "log", "resource": "x"}), T0)
    after = T0 + RETENTION

    assert await store.get(first.record.run_id, after) is None
    assert await store.list(after) == []
    again = await claim(store, after, new_run(body="d" * 64))  # even a different body: it is a new run
    assert again.decision is Decision.CREATE
    assert again.record.attempts == 1 and again.record.created_at == after


async def test_release_ends_a_live_lease_so_the_next_claim_reconciles(store: RunStore) -> None:
    first = await claim(store)
    released = await store.release(first.record.run_id, T0 + timedelta(seconds=5))
    assert released is not None and released.lease_expires == T0 + timedelta(seconds=5)

    takeover = await claim(store, T0 + timedelta(seconds=6))
    assert takeover.decision is Decision.TAKEOVER
    assert takeover.previous is not None and takeover.previous.status == IN_PROGRESS


async def test_release_refuses_runs_without_a_live_lease(store: RunStore) -> None:
    assert await store.release("f" * 64, T0) is None
    first = await claim(store)
    await store.finish(first, Finish(COMPLETED, target={"type": "log", "resource": "x"}), T0)
    assert await store.release(first.record.run_id, T0) is None
    assert (await store.get(first.record.run_id, T0)).status == COMPLETED


async def test_holder_may_finish_after_an_admin_touched_its_record(store: RunStore) -> None:
    first = await claim(store)
    await store.release(first.record.run_id, T0 + timedelta(seconds=1))
    done = await store.finish(
        first, Finish(COMPLETED, target={"type": "log", "resource": "x"}), T0 + timedelta(seconds=2)
    )
    assert done.status == COMPLETED


async def test_list_filters_and_orders_newest_first(store: RunStore) -> None:
    runs = [new_run(run_id=f"{i:064x}", route="etl" if i % 2 else "report") for i in range(4)]
    claims = [await claim(store, T0 + timedelta(seconds=i), run) for i, run in enumerate(runs)]
    await store.finish(claims[1], Finish(COMPLETED, target={"type": "log", "resource": "x"}), T0)

    assert [r.run_id for r in await store.list(T0)] == [r.run_id for r in reversed(runs)]
    assert [r.run_id for r in await store.list(T0, route="etl")] == [runs[3].run_id, runs[1].run_id]
    assert [r.run_id for r in await store.list(T0, route="etl", status=COMPLETED)] == [runs[1].run_id]
    assert len(await store.list(T0, limit=2)) == 2


async def test_100_concurrent_claims_have_exactly_one_winner(make_store, store: RunStore) -> None:
    # Several handles on one store (connections / clients), as several processes would have.
    handles = [store] + [make_store() for _ in range(3)]
    results = await asyncio.gather(*(claim(handles[i % 4]) for i in range(100)))

    winners = [r for r in results if r.won]
    assert len(winners) == 1
    assert all(r.decision is Decision.BUSY for r in results if not r.won)
    assert {r.record.attempt_id for r in results} == {winners[0].record.attempt_id}


async def test_concurrent_takeovers_of_an_expired_lease_have_one_winner(make_store, store: RunStore) -> None:
    await claim(store)
    handles = [store] + [make_store() for _ in range(3)]
    later = T0 + LEASE + timedelta(seconds=1)
    results = await asyncio.gather(*(claim(handles[i % 4], later) for i in range(40)))

    winners = [r for r in results if r.won]
    assert len(winners) == 1 and winners[0].decision is Decision.TAKEOVER
    assert winners[0].record.attempts == 2


async def test_records_survive_a_new_handle(make_store, store: RunStore) -> None:
    first = await claim(store)
    await store.finish(first, Finish(COMPLETED, target={"type": "log", "resource": "x"}), T0)
    other = make_store()
    assert (await other.get(first.record.run_id, T0)).status == COMPLETED
    assert (await claim(other)).decision is Decision.REPLAY


async def test_a_takeover_records_the_cloud_tasks_counters_of_its_delivery(store: RunStore) -> None:
    first = await store.claim(replace(new_run(), task_retry_count=0, task_execution_count=1), T0, LEASE, RETENTION)
    assert (first.record.task_retry_count, first.record.task_execution_count) == (0, 1)
    await store.finish(first, Finish(FAILED, last_error="HTTP 500"), T0)

    retry = await store.claim(replace(new_run(), task_retry_count=3, task_execution_count=2), T0, LEASE, RETENTION)
    assert retry.decision is Decision.TAKEOVER
    assert (retry.record.task_retry_count, retry.record.task_execution_count) == (3, 2)
    assert await store.get(retry.record.run_id, T0) == retry.record


async def test_integers_round_trip_exactly_through_every_write(store: RunStore) -> None:
    """A record's integers read back exactly, up to 2^63-1, after the claim, a takeover, a finish and
    a release wrote them (a store that re-encodes numbers as doubles rounds 2^53+1 to 2^53)."""
    top, odd = 2**63 - 1, 2**53 + 1
    counted = replace(new_run(), task_retry_count=top, task_execution_count=odd)
    first = await store.claim(counted, T0, LEASE, RETENTION)
    assert (first.record.task_retry_count, first.record.task_execution_count) == (top, odd)
    assert (await store.get(first.record.run_id, T0)) == first.record

    await store.finish(first, Finish(FAILED, last_error="HTTP 500"), T0)
    again = replace(counted, task_retry_count=top - 2, task_execution_count=odd + 2)
    taken = await store.claim(again, T0 + timedelta(seconds=1), LEASE, RETENTION)
    assert taken.decision is Decision.TAKEOVER
    await store.release(taken.record.run_id, T0 + timedelta(seconds=2))
    done = await store.finish(
        taken, Finish(COMPLETED, target={"type": "log", "resource": "x"}), T0 + timedelta(seconds=3)
    )

    for read in (
        await store.get(done.run_id, T0),
        (await store.get_many([done.run_id], T0))[done.run_id],
        (await store.list(T0, route="etl"))[0],
    ):
        assert read is not None
        assert (read.task_retry_count, read.task_execution_count) == (top - 2, odd + 2)
        assert type(read.task_retry_count) is int and read == done


async def test_get_many_returns_the_live_records_asked_for_by_run_id(store: RunStore) -> None:
    runs = [new_run(run_id=f"{i:064x}") for i in range(5)]
    claims = [await claim(store, T0 + timedelta(seconds=i), run) for i, run in enumerate(runs)]
    await store.finish(claims[1], Finish(COMPLETED, target={"type": "log", "resource": "x"}), T0)
    wanted = [runs[1].run_id, runs[3].run_id, "f" * 64, runs[1].run_id]  # one absent, one twice

    found = await store.get_many(wanted, T0 + timedelta(seconds=10))

    assert set(found) == {runs[1].run_id, runs[3].run_id}
    assert found[runs[1].run_id] == await store.get(runs[1].run_id, T0) and found[runs[1].run_id].status == COMPLETED
    assert found[runs[3].run_id] == claims[3].record
    assert await store.get_many([], T0) == {}
    # Record i expires at T0 + RETENTION + i: only the unexpired are returned.
    assert set(await store.get_many([r.run_id for r in runs], T0 + RETENTION + timedelta(seconds=2))) == {
        runs[3].run_id,
        runs[4].run_id,
    }


async def test_get_many_reads_more_than_one_batch(store: RunStore) -> None:
    from runonce.stores.base import GET_MANY_BATCH

    count = GET_MANY_BATCH + 3
    runs = [new_run(run_id=f"{i:064x}") for i in range(0, count, 50)]
    for run in runs:
        await claim(store, T0, run)
    wanted = [f"{i:064x}" for i in range(count)]

    assert set(await store.get_many(wanted, T0)) == {run.run_id for run in runs}


async def test_list_limit_is_met_past_runs_of_other_statuses_and_routes(store: RunStore) -> None:
    """The newest `limit` of a route and status, whatever else is newer (the reads of an overlap
    guard, by route and status)."""
    etl = [new_run(run_id=f"{i:064x}") for i in range(6)]
    claims = [await claim(store, T0 + timedelta(seconds=i), run) for i, run in enumerate(etl)]
    for done in claims[:3]:
        await store.finish(done, Finish(COMPLETED, target={"type": "log", "resource": "x"}), T0)
    for i in range(6, 10):  # newer runs of another route
        await claim(store, T0 + timedelta(seconds=i), new_run(run_id=f"{i:064x}", route="report"))

    completed = await store.list(T0 + timedelta(seconds=20), route="etl", status=COMPLETED, limit=2)
    running = await store.list(T0 + timedelta(seconds=20), route="etl", status=IN_PROGRESS, limit=10)
    newest = await store.list(T0 + timedelta(seconds=20), status=IN_PROGRESS, limit=2)

    assert [r.run_id for r in completed] == [etl[2].run_id, etl[1].run_id]
    assert [r.run_id for r in running] == [etl[5].run_id, etl[4].run_id, etl[3].run_id]
    assert [r.run_id for r in newest] == [f"{9:064x}", f"{8:064x}"]
    # A failed run then taken over moves between statuses: listed once, where it is now.
    await store.finish(claims[5], Finish(FAILED, last_error="HTTP 500"), T0)
    assert [r.run_id for r in await store.list(T0, route="etl", status=FAILED)] == [etl[5].run_id]
    await claim(store, T0 + timedelta(seconds=21), etl[5])
    assert await store.list(T0, route="etl", status=FAILED) == []
    assert [r.run_id for r in await store.list(T0, route="etl", status=IN_PROGRESS)][:1] == [etl[5].run_id]
    # A takeover keeps the run's place: it is as old as its first claim, whatever is newer.
    await store.finish(claims[3], Finish(FAILED, last_error="HTTP 500"), T0)
    await claim(store, T0 + timedelta(seconds=22), etl[3])
    running = await store.list(T0, route="etl", status=IN_PROGRESS)
    assert [r.run_id for r in running] == [etl[5].run_id, etl[4].run_id, etl[3].run_id]
    assert [r.run_id for r in await store.list(T0, status=IN_PROGRESS, limit=7)][-3:] == [r.run_id for r in running]
