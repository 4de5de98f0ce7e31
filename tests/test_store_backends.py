"""What only one backend can show: Firestore's round trips and Timestamps, SQLite's cross-process
locking, and each store's failure when its backend is gone."""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
import threading
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from runonce.stores import Decision, Finish, StoreUnavailable
from runonce.stores import sqlite as sqlite_store
from runonce.stores.base import COMPLETED, FAILED, IN_PROGRESS, SKIPPED
from runonce.stores.sqlite import SQLiteStore
from tests.support.procs import free_port
from tests.support.runs import LEASE, RETENTION, T0, claim, new_run
from tests.support.stores import firestore_store

# -- Firestore -------------------------------------------------------------------------------


@pytest.mark.usefixtures("firestore_emulator")
async def test_firestore_fresh_run_costs_one_create_and_one_update() -> None:
    store = firestore_store()
    try:
        first = await claim(store)
        await store.finish(first, Finish(COMPLETED, target={"type": "log", "resource": "x"}), T0)
        assert dict(store.round_trips) == {"create": 1, "update": 1}
    finally:
        await store.close()


@pytest.mark.usefixtures("firestore_emulator")
async def test_firestore_stores_timestamps_for_the_ttl_policy() -> None:
    store = firestore_store()
    try:
        first = await claim(store)
        raw = (await store._collection.document(first.record.run_id).get()).to_dict()
        for name in ("expire_at", "lease_expires", "created_at", "updated_at"):
            assert isinstance(raw[name], datetime), name  # a Timestamp, not a string
        assert raw["expire_at"] == T0 + RETENTION
    finally:
        await store.close()


@pytest.mark.usefixtures("firestore_emulator")
async def test_firestore_finish_falls_back_to_a_read_when_the_record_moved() -> None:
    store = firestore_store()
    try:
        first = await claim(store)
        await store.release(first.record.run_id, T0 + timedelta(seconds=1))  # changes update_time
        store.round_trips.clear()
        done = await store.finish(first, Finish(COMPLETED, target={"type": "log", "resource": "x"}), T0)
        assert done.status == COMPLETED
        # the precondition failed once, then: read, still ours, write again
        assert dict(store.round_trips) == {"update": 2, "get": 1}
    finally:
        await store.close()


@pytest.mark.usefixtures("firestore_emulator")
async def test_firestore_claim_finds_its_own_lost_create() -> None:
    """If a create's answer is lost and the client retried, the record found is our own claim."""
    store = firestore_store()
    try:
        first = await claim(store)
        # Simulate: the same attempt's create landed earlier; claim again with its record's attempt.
        from runonce.stores import base

        original = base.new_attempt_id
        base.new_attempt_id = lambda: first.record.attempt_id
        try:
            again = await claim(store, T0 + timedelta(seconds=1))
        finally:
            base.new_attempt_id = original
        assert again.won and again.record.attempt_id == first.record.attempt_id
    finally:
        await store.close()


def lose_next_answer(store) -> list[str]:
    """Test seam at the store's Commit call: the next commit that lands loses its answer, and the
    client sends it again (as google-api-core's retry does on UNAVAILABLE), so the caller sees the
    second answer: AlreadyExists or FailedPrecondition for a conditional write that had in fact
    committed."""
    real_commit = store._commit_call
    seen: list[str] = []

    async def commit(*args, **kwargs):
        await real_commit(*args, **kwargs)  # a write that fails (AlreadyExists) keeps the seam armed
        store._commit_call = real_commit  # only the next one that commits
        seen.append("committed, answer lost")
        return await real_commit(*args, **kwargs)

    store._commit_call = commit
    return seen


@pytest.mark.usefixtures("firestore_emulator")
async def test_firestore_takeover_whose_answer_was_lost_is_still_ours() -> None:
    store = firestore_store()
    try:
        first = await claim(store)
        await store.finish(first, Finish(FAILED, last_error="boom"), T0)
        seen = lose_next_answer(store)
        again = await claim(store, T0 + timedelta(seconds=1))
        assert seen == ["committed, answer lost"]
        assert again.decision is Decision.TAKEOVER  # not BUSY for its own claim
        assert again.previous is not None and again.previous.status == FAILED
        assert await store.get(again.record.run_id, T0) == again.record
        done = await store.finish(again, Finish(COMPLETED, target={"type": "log", "resource": "x"}), T0)
        assert done.status == COMPLETED
    finally:
        await store.close()


@pytest.mark.usefixtures("firestore_emulator")
@pytest.mark.parametrize("status", [COMPLETED, FAILED, IN_PROGRESS])
async def test_firestore_finish_whose_answer_was_lost_is_not_fenced(status: str) -> None:
    store = firestore_store()
    try:
        first = await claim(store)
        seen = lose_next_answer(store)
        done = await store.finish(first, Finish(status, last_error="x"), T0 + timedelta(seconds=1))
        assert seen == ["committed, answer lost"]
        assert done.status == status and await store.get(first.record.run_id, T0) == done
    finally:
        await store.close()


@pytest.mark.usefixtures("firestore_emulator")
async def test_firestore_release_whose_answer_was_lost_reports_the_release() -> None:
    store = firestore_store()
    try:
        first = await claim(store)
        seen = lose_next_answer(store)
        released = await store.release(first.record.run_id, T0 + timedelta(seconds=1))
        assert seen == ["committed, answer lost"]
        assert released is not None and released.lease_expires == T0 + timedelta(seconds=1)
    finally:
        await store.close()


@pytest.mark.usefixtures("firestore_emulator")
async def test_firestore_unreachable_is_unavailable_within_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client would retry a refused connection for a minute; the store gives up at its own
    deadline. Measured on the event loop's clock, the one `asyncio.timeout` is scheduled on."""
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{free_port()}")  # nothing listens
    store = firestore_store(timeout_seconds=0.5)
    loop = asyncio.get_running_loop()
    try:
        for call in (lambda: claim(store), store.ping):
            started = loop.time()
            with pytest.raises(StoreUnavailable) as unavailable:
                await call()
            waited = loop.time() - started
            assert isinstance(unavailable.value.__cause__, TimeoutError)  # our deadline, not the client's
            assert 0.5 <= waited < 10, waited  # not before the deadline; nowhere near the client's minute
    finally:
        await store.close()


# -- SQLite ----------------------------------------------------------------------------------


def _claim_in_process(path: str, barrier, results) -> None:
    import asyncio

    async def go() -> str:
        store = SQLiteStore(path)
        try:
            barrier.wait()
            return (await claim(store)).decision.value
        finally:
            await store.close()

    results.put(asyncio.run(go()))


def test_sqlite_claims_from_many_processes_have_one_winner(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(8), ctx.Queue()
    procs = [ctx.Process(target=_claim_in_process, args=(path, barrier, results)) for _ in range(8)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    decisions = sorted(results.get(timeout=5) for _ in procs)
    assert decisions.count(Decision.CREATE.value) == 1
    assert decisions.count(Decision.BUSY.value) == 7


async def test_sqlite_uses_wal_and_full_sync(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "runs.db"))
    try:
        await store.ping()
        assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        await store.close()


async def test_sqlite_locked_past_the_timeout_is_unavailable(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    store = SQLiteStore(path, timeout_seconds=0.2)
    await store.ping()  # creates the schema
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreUnavailable, match="locked"):
            await claim(store)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert (await claim(store)).decision is Decision.CREATE  # and it recovers
    await store.close()


async def test_sqlite_opening_a_new_file_another_process_writes_waits_for_the_write_to_end(tmp_path: Path) -> None:
    """Switching a new file to WAL while another process holds its write lock fails at once, without
    the busy handler (processes opening a new file together): the store retries it until the lock
    ends, within its timeout."""
    path = str(tmp_path / "runs.db")
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the write lock, in the rollback journal a new file starts with
    store = SQLiteStore(path, timeout_seconds=30)
    try:
        opening = asyncio.create_task(store.ping())
        await asyncio.sleep(0.2)  # the store meets the lock meanwhile
        blocker.execute("ROLLBACK")
        await opening
        assert (await claim(store)).decision is Decision.CREATE
    finally:
        blocker.close()
        await store.close()


async def test_sqlite_opening_a_new_file_another_process_writes_past_the_timeout_is_unavailable(tmp_path: Path) -> None:
    """The switch to WAL waits for the other writer up to the store timeout, then gives up (503),
    never spins on."""
    path = str(tmp_path / "runs.db")
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the write lock, in the rollback journal a new file starts with
    store = SQLiteStore(path, timeout_seconds=0.2)
    try:
        with pytest.raises(StoreUnavailable, match="locked"):
            await asyncio.wait_for(store.ping(), 20)  # a bound on a hang, not a timing assertion
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        await store.close()


async def test_sqlite_a_file_of_todays_schema_opens_and_reads_while_another_process_writes(tmp_path: Path) -> None:
    """WAL readers do not wait for the writer, and opening a file whose schema is current takes no
    write lock: `runonce runs` works while the server holds a claim's transaction."""
    path = str(tmp_path / "runs.db")
    first = SQLiteStore(path)
    won = await claim(first)
    await first.close()
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    reader = SQLiteStore(path, timeout_seconds=0.2)
    try:
        assert await reader.get(won.record.run_id, T0) == won.record
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        await reader.close()


async def test_sqlite_runs_every_statement_on_the_stores_one_thread(tmp_path: Path) -> None:
    """The store's connection is shared: a ping's BEGIN IMMEDIATE ... ROLLBACK must never take in a
    claim's INSERT from another thread."""
    store = SQLiteStore(str(tmp_path / "runs.db"))
    threads: set[int] = set()
    try:
        await store.ping()
        store._conn.set_trace_callback(lambda statement: threads.add(threading.get_ident()))
        await asyncio.gather(*(store.get(f"{n:064x}", T0) for n in range(20)), store.ping())
        assert len(threads) == 1
    finally:
        await store.close()


async def test_sqlite_unusable_path_is_unavailable(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "missing-dir" / "runs.db"))
    with pytest.raises(StoreUnavailable, match="unable to open"):
        await store.claim(new_run(), T0, LEASE, RETENTION)
    await store.close()


@pytest.mark.usefixtures("firestore_emulator")
async def test_firestore_fresh_scheduled_run_reads_the_force_run_beside_its_claim() -> None:
    """The force-run check costs no extra wait: `get` of the force run's record runs while the
    claim's `create` is in flight, so a fresh scheduled run waits one round trip, then `update`s."""
    from runonce.run.delivery import Delivery
    from runonce.run.runner import Rules, Runner
    from runonce.targets.scripted import ScriptedTarget

    store = firestore_store()
    in_flight, most = 0, 0
    real_rpc = store._rpc

    async def rpc(op, call, refused=()):  # type: ignore[no-untyped-def]
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            return await real_rpc(op, call, refused)
        finally:
            in_flight -= 1

    store._rpc = rpc  # type: ignore[method-assign]
    delivery = Delivery(
        source="scheduler",
        project="proj-1",
        location="us-central1",
        route="etl",
        job="nightly",
        schedule_time=T0,
        may_be_forced_retry=True,
    )
    runner = Runner(
        store,
        {"etl": ScriptedTarget()},
        routes={"etl": Rules()},
        lease=LEASE,
        retention=RETENTION,
        dispatch_timeout=timedelta(seconds=30),
        clock=lambda: T0,
    )
    try:
        result = await runner.run(delivery, {}, "0" * 64)
        assert result.status == "processed"
        assert dict(store.round_trips) == {"create": 1, "get": 1, "update": 1}
        assert most == 2  # create and get at once
    finally:
        await store.close()


async def test_sqlite_waits_for_a_lock_as_long_as_its_timeout(tmp_path: Path) -> None:
    for store, waits_ms in (
        (SQLiteStore.from_url(f"sqlite:///{tmp_path / 'runs.db'}", timeout_seconds=0.25), 250),
        (SQLiteStore.from_url(f"sqlite:///{tmp_path / 'runs.db'}"), 5000),  # the documented default
        (SQLiteStore(str(tmp_path / "runs.db")), 5000),
    ):
        try:
            await store.ping()
            assert store._conn.execute("PRAGMA busy_timeout").fetchone()[0] == waits_ms
        finally:
            await store.close()


async def test_sqlite_ping_fails_while_another_process_holds_the_write_lock(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    store = SQLiteStore(path, timeout_seconds=0.1)
    await store.ping()
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreUnavailable, match="locked"):
            await store.ping()  # /readyz: the store could not take a claim now
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    await store.ping()
    await store.close()


async def test_sqlite_file_from_before_the_task_counters_gets_them(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    schema = (
        "CREATE TABLE runs (run_id TEXT PRIMARY KEY, "
        + ", ".join(  # the key every released schema had
            f"{name} TEXT"
            for name in (
                "status",
                "attempt_id",
                "lease_expires",
                "expire_at",
                "created_at",
                "updated_at",
                "route",
                "source",
                "project",
                "location",
                "job",
                "schedule_time",
                "task",
                "body_sha256",
                "target",
                "last_error",
            )
        )
        + ", attempts INTEGER)"
    )
    old.execute(schema)
    old.commit()
    old.close()
    store = SQLiteStore(str(path))
    try:
        won = await store.claim(replace(new_run(), task_retry_count=2, task_execution_count=1), T0, LEASE, RETENTION)
        got = await store.get(won.record.run_id, T0)
        assert (got.task_retry_count, got.task_execution_count) == (2, 1)
    finally:
        await store.close()


async def test_sqlite_file_from_before_skipped_takes_it_and_keeps_its_runs(tmp_path: Path) -> None:
    """A file whose CHECK predates `skipped` would refuse a skipped run for good (503 on every retry):
    opening it rebuilds the table with today's CHECK, rows and index included."""
    path = tmp_path / "old.db"
    old_schema = sqlite_store._SCHEMA.replace(", 'skipped')", ")")
    assert old_schema != sqlite_store._SCHEMA
    earlier = await claim(SQLiteStore(str(tmp_path / "scratch.db")))
    with sqlite3.connect(path) as old:
        old.executescript(old_schema)
        with pytest.raises(sqlite3.IntegrityError):
            old.execute(sqlite_store._INSERT, sqlite_store._to_row(replace(earlier.record, status=SKIPPED)))
        old.execute(sqlite_store._INSERT, sqlite_store._to_row(earlier.record))
    old.close()

    store = SQLiteStore(str(path))
    try:
        assert await store.get(earlier.record.run_id, T0) == earlier.record
        other = await claim(store, run=new_run(run_id="c" * 64))
        skipped = await store.finish(other, Finish(SKIPPED, last_error="late: 2h"), T0)
        assert (await store.get(skipped.run_id, T0)).status == SKIPPED
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert names == {
        "runs",
        "runs_by_created",
        "runs_by_route_status",
        "runs_by_route",
        "runs_by_status",
        "sqlite_autoindex_runs_1",
    }


async def test_sqlite_keeps_no_target_as_null(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = SQLiteStore(str(path))
    try:
        await claim(store)
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT target IS NULL FROM runs").fetchone() == (1,)
