"""SQLite claim store: the embedded default (`sqlite:///PATH`).

`RunStore`'s protocol over single statements, each atomic under SQLite's write lock, so writers in
other threads or uvicorn worker processes on the same file cannot interleave with one:

    insert_if_absent:   INSERT ... ON CONFLICT (run_id) DO NOTHING            (1 row: we wrote it)
    replace_if_version: UPDATE ... WHERE run_id = ? AND every column IS its value in `version`

A record's version is the record itself (what `load` read). A fresh run is two statements (the
insert, then the finish's update), each its own transaction. WAL lets readers run beside the
writer; `busy_timeout` makes a writer wait for the lock up to the store timeout, after which the
store counts as unavailable (503).

All sqlite3 calls run on one dedicated thread per store, so the event loop never blocks on disk or
on the lock.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from datetime import datetime
from typing import Any, TypeVar

from runonce.stores.base import (
    GET_MANY_BATCH,
    RunRecord,
    RunStatus,
    RunStore,
    StoreUnavailable,
    Version,
    chunks,
    live,
    rfc3339,
)

T = TypeVar("T")

MMAP_BYTES = 256 * 1024 * 1024
"""How much of the file SQLite reads memory-mapped: about 300,000 records (some 840 bytes each with
their indexes); past it, reads go through its page cache as before."""

_COLUMNS = [f.name for f in fields(RunRecord)]
_TIME_COLUMNS = {"lease_expires", "expire_at", "created_at", "updated_at"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id        TEXT PRIMARY KEY,
    status        TEXT NOT NULL CHECK (status IN ('in_progress', 'completed', 'failed', 'skipped')),
    attempt_id    TEXT NOT NULL,
    attempts      INTEGER NOT NULL,
    lease_expires TEXT NOT NULL,  -- RFC 3339 UTC, fixed width: compares as text
    expire_at     TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    route         TEXT NOT NULL,
    source        TEXT NOT NULL,
    project       TEXT NOT NULL,
    location      TEXT NOT NULL,
    job           TEXT NOT NULL,
    schedule_time TEXT,
    task          TEXT,
    body_sha256   TEXT NOT NULL,
    target        TEXT,           -- JSON {"type", "resource"}
    last_error    TEXT,
    task_retry_count     INTEGER,  -- Cloud Tasks' counters of the delivery that claimed last
    task_execution_count INTEGER
);
CREATE INDEX IF NOT EXISTS runs_by_created ON runs (created_at);
"""

_INDEXES = """
CREATE INDEX IF NOT EXISTS runs_by_route_status ON runs (route, status, created_at);
CREATE INDEX IF NOT EXISTS runs_by_route ON runs (route, created_at);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, created_at);
"""
"""What `list` reads through, so a route's newest runs cost what `limit` asks, not the route's
history. Created on open (idempotent), so an older file gains them the first time it is opened."""


def _to_row(record: RunRecord) -> tuple[Any, ...]:
    values = record.as_dict()
    values["target"] = json.dumps(record.target) if record.target is not None else None
    for name in _TIME_COLUMNS:
        values[name] = rfc3339(values[name])
    return tuple(values[name] for name in _COLUMNS)


def _from_row(row: sqlite3.Row) -> RunRecord:
    values = dict(
        zip(_COLUMNS, row, strict=True)
    )  # pragma: no mutate - rows come from SELECT of _COLUMNS: the lengths always match
    values["target"] = json.loads(values["target"]) if values["target"] is not None else None
    for name in _TIME_COLUMNS:
        values[name] = datetime.fromisoformat(values[name])
    return RunRecord(**values)


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    """Files made before a column existed get it (NULL); CREATE TABLE IF NOT EXISTS would not."""
    have = {
        row[1] for row in conn.execute("PRAGMA table_info(runs)")
    }  # pragma: no mutate - SQL keywords and pragma names are case-insensitive
    for name in ("task_retry_count", "task_execution_count"):
        if name not in have:
            conn.execute(f"ALTER TABLE runs ADD COLUMN {name} INTEGER")


def _allow_skipped(conn: sqlite3.Connection) -> None:
    """Files made before the `skipped` status have a CHECK that refuses it, and SQLite cannot alter
    a CHECK: copy the rows into a table with today's schema, in one transaction."""
    if "'skipped'" in _table_sql(conn):
        return
    conn.execute("BEGIN IMMEDIATE")  # pragma: no mutate - SQL keywords are case-insensitive
    try:
        if "'skipped'" not in _table_sql(conn):  # another process may have done it meanwhile
            create_table, create_index = _SCHEMA.split(";")[:2]
            columns = ", ".join(_COLUMNS)
            conn.execute("ALTER TABLE runs RENAME TO runs_before_skipped")
            conn.execute(create_table)
            conn.execute(f"INSERT INTO runs ({columns}) SELECT {columns} FROM runs_before_skipped")
            conn.execute("DROP TABLE runs_before_skipped")  # and its index, made again below
            conn.execute(create_index)
    except BaseException:
        conn.execute("ROLLBACK")  # pragma: no mutate - SQL keywords are case-insensitive
        raise
    conn.execute("COMMIT")  # pragma: no mutate - SQL keywords are case-insensitive


def _table_sql(conn: sqlite3.Connection) -> str:
    return str(conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'runs'").fetchone()[0])


_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM runs"
_INSERT = (
    f"INSERT INTO runs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
    " ON CONFLICT (run_id) DO NOTHING"
)
_REPLACE = (
    f"UPDATE runs SET {', '.join(f'{name} = ?' for name in _COLUMNS)}"
    f" WHERE {' AND '.join(f'{name} IS ?' for name in _COLUMNS)}"  # IS: NULL matches NULL
)


class SQLiteStore(RunStore):
    def __init__(self, path: str, timeout_seconds: float = 5.0):
        self.path = path
        self._timeout = timeout_seconds
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="runonce-sqlite"
        )  # pragma: no mutate - a thread's name shows only in a debugger
        self._conn: sqlite3.Connection | None = None

    @classmethod
    def from_url(cls, url: str, timeout_seconds: float = 5.0) -> SQLiteStore:
        return cls(url.removeprefix("sqlite:///"), timeout_seconds)

    # -- plumbing -----------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,  # autocommit: each statement is its own transaction
                timeout=self._timeout,
                # busy_timeout is set right after; the connection is used on the store's one thread only
                check_same_thread=False,  # pragma: no mutate
            )
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
                # FULL: a claim that was answered must survive a power cut, or the run could repeat.
                conn.execute(
                    "PRAGMA synchronous = FULL"
                )  # pragma: no mutate - SQL keywords and pragma names are case-insensitive
                # Reads through the OS's page cache, not a 2 MB cache of its own: a read by key then
                # costs the same whatever the history the file holds (bench/bench_history.py).
                conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")  # pragma: no mutate - a read cost only
                self._initialize(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _initialize(self, conn: sqlite3.Connection) -> None:
        """Switch to WAL and create the schema. Switching the journal mode does not wait on the
        busy handler, so processes opening a new file together retry it here."""
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                if (
                    conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal"
                ):  # pragma: no mutate - asking for WAL again is harmless: its mutants only add a write
                    conn.execute(
                        "PRAGMA journal_mode = WAL"
                    )  # pragma: no mutate - SQL keywords and pragma names are case-insensitive
                conn.executescript(_SCHEMA)
                _add_missing_columns(conn)
                _allow_skipped(conn)
                conn.executescript(_INDEXES)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def call() -> T:
            try:
                return fn(self._connect())
            except sqlite3.Error as exc:  # locked past busy_timeout, disk or file trouble
                raise StoreUnavailable(f"sqlite {self.path}: {exc}") from exc

        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    # -- primitives (the protocol is RunStore's) -----------------------------------------------

    async def load(self, run_id: str) -> tuple[RunRecord, Version] | None:
        def work(conn: sqlite3.Connection) -> tuple[RunRecord, Version] | None:
            row = conn.execute(f"{_SELECT} WHERE run_id = ?", (run_id,)).fetchone()
            return (record := _from_row(row), record) if row is not None else None

        return await self._run(work)

    async def insert_if_absent(self, record: RunRecord) -> Version | None:
        wrote = await self._run(lambda conn: conn.execute(_INSERT, _to_row(record)).rowcount)
        return record if wrote else None

    async def replace_if_version(
        self, record: RunRecord, version: Version, changed: tuple[str, ...] | None = None
    ) -> Version | None:
        wrote = await self._run(lambda conn: conn.execute(_REPLACE, _to_row(record) + _to_row(version)).rowcount)
        return record if wrote else None

    # -- the rest of RunStore ------------------------------------------------------------------

    async def list(
        self, now: datetime, route: str | None = None, status: RunStatus | None = None, limit: int = 50
    ) -> list[RunRecord]:
        # Only the filters asked for, so SQLite walks the matching index newest first and stops at
        # `limit` live rows (an `(? IS NULL OR route = ?)` would make it scan the table).
        where, params = ["expire_at > ?"], [rfc3339(now)]
        if route is not None:
            where.append("route = ?")
            params.append(route)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        sql = f"{_SELECT} WHERE {' AND '.join(where)} ORDER BY created_at DESC LIMIT ?"

        def work(conn: sqlite3.Connection) -> list[RunRecord]:
            return [_from_row(row) for row in conn.execute(sql, (*params, limit)).fetchall()]

        return await self._run(work)

    async def get_many(self, run_ids: Iterable[str], now: datetime) -> dict[str, RunRecord]:
        """One SELECT per GET_MANY_BATCH run_ids, by primary key."""
        unique = list(dict.fromkeys(run_ids))

        def work(conn: sqlite3.Connection) -> dict[str, RunRecord]:
            found: dict[str, RunRecord] = {}
            for batch in chunks(unique, GET_MANY_BATCH):
                marks = ", ".join("?" * len(batch))
                rows = conn.execute(f"{_SELECT} WHERE run_id IN ({marks})", tuple(batch)).fetchall()
                found.update(live((_from_row(row) for row in rows), now))
            return found

        return await self._run(work)

    async def ping(self) -> None:
        # Take the write lock a claim needs (and give it back): a SELECT would pass while another
        # process holds the database locked and every claim times out.
        def lock(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")  # pragma: no mutate - SQL keywords are case-insensitive
            conn.execute("ROLLBACK")  # pragma: no mutate - SQL keywords are case-insensitive

        await self._run(lock)

    async def close(self) -> None:
        def work() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None  # pragma: no mutate - None or '': either is falsy, so the next call reconnects

        await asyncio.get_running_loop().run_in_executor(
            self._executor, work
        )  # pragma: no mutate - check_same_thread=False: closing from another thread is the same
        self._executor.shutdown(wait=True)  # pragma: no mutate - the executor has no queued work left at this point
