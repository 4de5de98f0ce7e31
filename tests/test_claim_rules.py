"""The claim rules as one table, on every store: each stored state (in progress with a live or an
ended lease, kept after an unknown outcome, completed, failed) × the same or another body × the
record still retained or past its retention. What each decision writes is checked too."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from runonce.stores import Decision, Finish, RunStore
from runonce.stores.base import COMPLETED, FAILED, IN_PROGRESS
from tests.support.runs import LEASE, RETENTION, T0, claim, new_run

TARGET = {"type": "log", "resource": "log/1"}
JUST = timedelta(microseconds=1)


async def in_progress(store: RunStore) -> None:
    await claim(store)


async def kept_unknown(store: RunStore) -> None:
    await store.finish(await claim(store), Finish(IN_PROGRESS, last_error="timeout"), T0 + timedelta(seconds=5))


async def completed(store: RunStore) -> None:
    await store.finish(await claim(store), Finish(COMPLETED, target=TARGET), T0 + timedelta(seconds=5))


async def failed(store: RunStore) -> None:
    await store.finish(await claim(store), Finish(FAILED, last_error="HTTP 500"), T0 + timedelta(seconds=5))


Setup = Callable[[RunStore], Awaitable[None]]
LIVE, LEASE_OVER, LATER = T0 + LEASE - JUST, T0 + LEASE, T0 + timedelta(seconds=10)

# (state, set-up, when the next delivery comes) -> (decision with the same body, with another body)
TABLE: dict[str, tuple[Setup, datetime, Decision, Decision]] = {
    "in_progress-live-lease": (in_progress, LIVE, Decision.BUSY, Decision.MISMATCH),
    "in_progress-lease-over": (in_progress, LEASE_OVER, Decision.TAKEOVER, Decision.MISMATCH),
    "kept-unknown-live-lease": (kept_unknown, LIVE, Decision.BUSY, Decision.MISMATCH),
    "kept-unknown-lease-over": (kept_unknown, LEASE_OVER, Decision.TAKEOVER, Decision.MISMATCH),
    "completed": (completed, LATER, Decision.REPLAY, Decision.MISMATCH),
    "completed-long-after": (completed, T0 + RETENTION - JUST, Decision.REPLAY, Decision.MISMATCH),
    "failed": (failed, LATER, Decision.TAKEOVER, Decision.MISMATCH),
}
CASES = [(name, body) for name in TABLE for body in ("same", "other")]


@pytest.mark.parametrize(("state", "body"), CASES, ids=[f"{s}-{b}-body" for s, b in CASES])
async def test_claim_rules(store: RunStore, state: str, body: str) -> None:
    setup, now, same, other = TABLE[state]
    await setup(store)
    before = await store.get("a" * 64, T0 + timedelta(seconds=6))
    expected = same if body == "same" else other

    got = await claim(store, now, new_run(body="b" * 64 if body == "same" else "c" * 64))

    assert got.decision is expected
    after = await store.get("a" * 64, now)
    if expected is Decision.TAKEOVER:
        assert got.won and got.previous == before
        assert after == got.record
        assert (after.status, after.attempts, after.lease_expires, after.updated_at) == (
            IN_PROGRESS,
            2,
            now + LEASE,
            now,
        )
        assert after.attempt_id != before.attempt_id
        assert (after.created_at, after.expire_at, after.last_error) == (
            before.created_at,
            before.expire_at,
            before.last_error,
        )
    else:  # nothing written: the record found is answered as it is
        assert not got.won and got.record == before and after == before


@pytest.mark.parametrize("state", list(TABLE))
@pytest.mark.parametrize("body", ["same", "other"])
async def test_a_record_past_its_retention_counts_as_absent(store: RunStore, state: str, body: str) -> None:
    setup = TABLE[state][0]
    await setup(store)
    now = T0 + RETENTION  # expire_at itself: gone
    sha = "b" * 64 if body == "same" else "c" * 64

    got = await claim(store, now, new_run(body=sha))

    assert got.decision is Decision.CREATE and got.won
    record = got.record
    assert (record.status, record.attempts, record.created_at, record.lease_expires, record.expire_at) == (
        IN_PROGRESS,
        1,
        now,
        now + LEASE,
        now + RETENTION,
    )
    assert (record.target, record.last_error, record.body_sha256) == (None, None, sha)
    assert await store.get("a" * 64, now) == record


# -- what finish and release write, and where they stop ----------------------------------------------


async def test_finish_and_release_stamp_the_time_they_wrote(store: RunStore) -> None:
    first = await claim(store)
    done = await store.finish(first, Finish(COMPLETED, target=TARGET), T0 + timedelta(seconds=7))
    assert (done.updated_at, done.created_at, done.target) == (T0 + timedelta(seconds=7), T0, TARGET)
    second = await claim(store, T0, new_run(run_id="e" * 64))
    released = await store.release(second.record.run_id, T0 + timedelta(seconds=9))
    assert (released.updated_at, released.lease_expires) == (T0 + timedelta(seconds=9), T0 + timedelta(seconds=9))
    assert await store.get("e" * 64, T0 + timedelta(seconds=9)) == released


async def test_release_stops_where_the_lease_or_the_record_ends(store: RunStore) -> None:
    await claim(store)
    assert await store.release("a" * 64, T0 + LEASE) is None  # the lease has just ended: nothing to release
    assert (await store.release("a" * 64, T0 + LEASE - JUST)).lease_expires == T0 + LEASE - JUST
    long_lease = await store.claim(new_run(run_id="f" * 64), T0, RETENTION * 2, RETENTION)  # lease past retention
    assert await store.release(long_lease.record.run_id, T0 + RETENTION) is None  # the record itself has expired


async def test_list_answers_fifty_by_default(store: RunStore) -> None:
    for n in range(51):
        await claim(store, T0 + timedelta(seconds=n), new_run(run_id=f"{n:064x}"))
    listed = await store.list(T0 + timedelta(minutes=1))
    assert len(listed) == 50 and listed[0].run_id == f"{50:064x}"


def test_a_takeover_without_a_delivery_keeps_the_task_counters() -> None:
    from runonce.stores.base import fresh_record, takeover_record

    found = fresh_record(replace(new_run(), task_retry_count=3, task_execution_count=2), T0, LEASE, RETENTION)
    taken = takeover_record(found, T0 + LEASE, LEASE)
    assert (taken.task_retry_count, taken.task_execution_count, taken.attempts) == (3, 2, 2)
    by_delivery = takeover_record(
        found, T0 + LEASE, LEASE, replace(new_run(), task_retry_count=4, task_execution_count=3)
    )
    assert (by_delivery.task_retry_count, by_delivery.task_execution_count) == (4, 3)


def test_record_times_are_shown_in_utc_whatever_the_machine_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from runonce.stores.base import fresh_record

    record = fresh_record(new_run(), T0, LEASE, RETENTION)
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        shown = record.to_json()
    finally:
        monkeypatch.undo()
        time.tzset()
    assert shown["created_at"] == "2026-10-16T12:00:00.000000Z"
