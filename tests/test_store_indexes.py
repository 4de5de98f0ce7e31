"""The indexes each store lists a route's newest runs through, and how an existing deployment gets
them (`runonce store init`), keeping working before it has them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from google.api_core import exceptions as gexc

from runonce.cli import main
from runonce.stores import Finish, open_store
from runonce.stores.base import COMPLETED, IN_PROGRESS
from runonce.stores.sqlite import SQLiteStore
from tests.support.backends import run_store_init
from tests.support.runs import T0, claim, new_run
from tests.support.stores import firestore_store, redis_url

LOG_TARGET = {"type": "log", "resource": "x"}


# -- SQLite --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("route", "status", "index"),
    [("etl", "completed", "runs_by_route_status"), ("etl", None, "runs_by_route"), (None, "failed", "runs_by_status")],
)
async def test_sqlite_list_reads_through_an_index_in_order(tmp_path: Path, route, status, index: str) -> None:
    """No sort and no scan of the table: the newest rows of the index, `limit` of them."""
    store = SQLiteStore(str(tmp_path / "runs.db"))
    await claim(store)
    captured: list[str] = []

    def work(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(captured.append)

    await store._run(work)
    await store.list(T0, route=route, status=status, limit=5)
    sql = captured[-1]
    await store.close()
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        params = [v for v in ("2026-10-16T12:00:00.000000Z", route, status) if v is not None]
        query = sql[: sql.index("LIMIT")].replace("'", "")  # the statement as run, parameters inline
        for value in params:
            query = query.replace(value, "?", 1)
        plan = " ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {query} LIMIT 5", params))
    assert f"USING INDEX {index}" in plan and "TEMP B-TREE" not in plan, plan


async def test_sqlite_file_from_before_the_indexes_gets_them_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = SQLiteStore(str(path))
    await claim(store)
    await store.close()
    with sqlite3.connect(path) as conn:
        for name in ("runs_by_route_status", "runs_by_route", "runs_by_status"):
            conn.execute(f"DROP INDEX {name}")
    again = SQLiteStore(str(path))
    try:
        assert [r.run_id for r in await again.list(T0, route="etl")] == [new_run().run_id]
    finally:
        await again.close()
    with sqlite3.connect(path) as conn:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"runs_by_route_status", "runs_by_route", "runs_by_status"} <= names


# -- Spanner -------------------------------------------------------------------------------------


def _spanner_indexes(store) -> set[str]:
    with store._database.snapshot() as snapshot:
        rows = snapshot.execute_sql(
            f"SELECT INDEX_NAME FROM INFORMATION_SCHEMA.INDEXES WHERE TABLE_NAME = '{store.table}'"
            " AND INDEX_TYPE = 'INDEX'"
        )
        return {row[0] for row in rows}


async def test_spanner_table_from_before_the_indexes_lists_then_store_init_adds_them(spanner_database: str) -> None:
    """A table made by an earlier `store init` (no indexes) keeps listing; `store init` adds the
    indexes, says so, and a second run changes nothing."""
    from runonce.stores.spanner import DDL

    table = "before_indexes"
    url = f"{spanner_database}?table={table}"
    store = open_store(url)
    store._database.update_ddl([DDL.format(table=table)]).result(120)
    try:
        first = await claim(store)
        await store.finish(first, Finish(COMPLETED, target=LOG_TARGET), T0)
        assert [r.run_id for r in await store.list(T0, route="etl", status=COMPLETED)] == [first.record.run_id]
        assert _spanner_indexes(store) == set()

        added = run_store_init(url).stdout
        assert added.count("spanner index created: CREATE INDEX") == 3 and "exists" in added
        assert _spanner_indexes(store) == {f"{table}_by_route_status", f"{table}_by_route", f"{table}_by_status"}
        again = run_store_init(url).stdout
        assert "all 3 present, nothing to do" in again and "created" not in again

        indexed = open_store(url)  # a new process: reads through the indexes from the start
        try:
            assert [r.run_id for r in await indexed.list(T0, route="etl", status=COMPLETED)] == [first.record.run_id]
            assert [r.run_id for r in await indexed.list(T0, status=COMPLETED)] == [first.record.run_id]
            assert await indexed.list(T0, route="etl", status=IN_PROGRESS) == []
        finally:
            await indexed.close()
    finally:
        await store.close()


def test_spanner_store_init_creates_the_table_with_its_indexes(spanner_database: str) -> None:
    url = f"{spanner_database}?table=fresh_with_indexes"
    said = run_store_init(url).stdout
    assert "created" in said and "3 indexes" in said
    store = open_store(url)
    assert _spanner_indexes(store) == {
        "fresh_with_indexes_by_route_status",
        "fresh_with_indexes_by_route",
        "fresh_with_indexes_by_status",
    }


# -- Redis ---------------------------------------------------------------------------------------


def _old_record(run_id: str, created_at: str, status: str = "completed") -> str:
    """A record as a store from before the index sets wrote it (counters as JSON numbers)."""
    return json.dumps(
        {
            **vars(new_run(run_id=run_id)),
            "status": status,
            "attempt_id": "0" * 32,
            "attempts": 1,
            "lease_expires": created_at,
            "expire_at": "2026-10-17T12:00:00.000000Z",
            "created_at": created_at,
            "updated_at": created_at,
            "target": LOG_TARGET,
            "last_error": None,
            "task_retry_count": 3,
            "task_execution_count": 2,
        }
    )


async def test_redis_records_from_before_the_index_sets_are_listed_then_indexed_by_store_init(redis_server) -> None:
    import redis

    url = redis_url(redis_server)
    with redis.Redis(port=redis_server.port) as client:
        for i in range(3):
            client.set(f"runonce:run:{i:064x}", _old_record(f"{i:064x}", f"2026-10-16T11:0{i}:00.000000Z"))
    store = open_store(url)
    try:
        new = await claim(store, run=new_run(run_id="e" * 64))  # written by this version: indexed
        await store.finish(new, Finish(COMPLETED, target=LOG_TARGET), T0)
        listed = await store.list(T0, route="etl", status=COMPLETED, limit=3)
        assert [r.run_id for r in listed] == ["e" * 64, f"{2:064x}", f"{1:064x}"]
        assert listed[1].task_retry_count == 3

        assert "indexed 4 run record(s)" in run_store_init(url).stdout
        assert "all 4 run record(s) were indexed already; nothing changed" in run_store_init(url).stdout

        with redis.Redis(port=redis_server.port) as client:
            client.set(f"runonce:run:{9:064x}", _old_record(f"{9:064x}", "2026-10-16T11:30:00.000000Z"))
        # Indexed now: list reads the sets, so a record written around them is not seen.
        listed = await store.list(T0, route="etl", status=COMPLETED, limit=3)
        assert [r.run_id for r in listed] == ["e" * 64, f"{2:064x}", f"{1:064x}"]
    finally:
        await store.close()


async def test_redis_with_only_indexed_records_marks_itself_indexed(redis_server) -> None:
    import redis

    store = open_store(redis_url(redis_server))
    try:
        await claim(store)
        with redis.Redis(port=redis_server.port) as client:
            assert not client.exists("runonce:idx:built")
            assert [r.run_id for r in await store.list(T0, route="etl")] == [new_run().run_id]
            assert client.exists("runonce:idx:built")
    finally:
        await store.close()


async def test_redis_index_sets_are_trimmed_as_records_expire(redis_server) -> None:
    import redis

    from tests.support.runs import RETENTION

    store = open_store(redis_url(redis_server))
    try:
        for i in range(5):
            await claim(store, T0, new_run(run_id=f"{i:064x}"))
        later = await claim(store, T0 + RETENTION + RETENTION / 2, new_run(run_id="e" * 64))
        with redis.Redis(port=redis_server.port) as client:
            for key in client.scan_iter(match="runonce:idx:*"):
                if key != b"runonce:idx:built":
                    assert client.zrange(key, 0, -1) == [later.record.run_id.encode()], key
    finally:
        await store.close()


# -- Firestore -----------------------------------------------------------------------------------


def test_store_init_firestore_prints_the_index_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNONCE_STORE", "firestore")
    monkeypatch.setenv("RUNONCE_FIRESTORE_PROJECT", "my-proj")
    done = CliRunner().invoke(main, ["store", "init"])
    assert done.exit_code == 0
    assert (
        "gcloud firestore indexes composite create --collection-group=runonce_runs "
        "--field-config=field-path=route,order=ascending --field-config=field-path=status,order=ascending "
        "--field-config=field-path=created_at,order=descending --database='(default)' --project=my-proj"
    ) in done.output
    assert done.output.count("gcloud firestore indexes composite create") == 3


async def test_firestore_without_its_composite_index_lists_as_before(
    firestore_emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Firestore refuses an ordered query whose composite index is not built yet
    (FailedPrecondition "The query requires an index"): the list reads without it."""
    from google.cloud.firestore_v1.async_query import AsyncQuery

    store = firestore_store()
    runs = [new_run(run_id=f"{i:064x}") for i in range(3)]
    for i, run in enumerate(runs):
        await claim(store, T0.replace(second=i), run)
    real_get = AsyncQuery.get

    async def refuse_ordered(self, *args, **kwargs):
        if self._orders:
            raise gexc.FailedPrecondition("The query requires an index. You can create it here: https://...")
        return await real_get(self, *args, **kwargs)

    monkeypatch.setattr(AsyncQuery, "get", refuse_ordered)
    listed = await store.list(T0, route="etl", status=IN_PROGRESS, limit=2)
    assert [r.run_id for r in listed] == [runs[2].run_id, runs[1].run_id]
    assert store.round_trips["query"] == 2  # the refused one, then the unordered one
    await store.list(T0, route="etl", limit=2)
    assert store.round_trips["query"] == 3  # and it does not ask again for a while
