"""SQLite claim store: the embedded default (`sqlite:///PATH`).

Atomicity comes from SQLite's own write lock: every claim or finish is one `BEGIN IMMEDIATE`
transaction that reads the row, applies the shared rules and writes, so two writers — threads or
uvicorn worker processes on the same file — cannot interleave. WAL lets readers run beside the
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any, TypeVar

from .base import (
    Claim,
    Decision,
    Fenced,
    Finish,
    NewRun,
    RunRecord,
    RunStatus,
    RunStore,
    StoreUnavailable,
    claimed_record,
    decide,
    finished_record,
    holds,
    releasable,
    rfc3339,
)

T = TypeVar("T")

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


def _to_row(record: RunRecord) -> tuple[Any, ...]:
    values = record.as_dict()
    values["target"] = json.dumps(record.target) if record.target is not None else None
    for name in _TIME_COLUMNS:
        values[name] = rfc3339(values[name])
    return tuple(values[name] for name in _COLUMNS)


def _from_row(row: sqlite3.Row) -> RunRecord:
    values = dict(zip(_COLUMNS, row, strict=True))  # pragma: no mutate - rows come from SELECT of _COLUMNS: the lengths always match
    values["target"] = json.loads(values["target"]) if values["target"] is not None else None
    for name in _TIME_COLUMNS:
        values[name] = datetime.fromisoformat(values[name])
    return RunRecord(**values)


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    """Files made before a column existed get it (NULL); CREATE TABLE IF NOT EXISTS would not."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}  # pragma: no mutate - SQL keywords and pragma names are case-insensitive
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
_UPSERT = f"INSERT OR REPLACE INTO runs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"


class SQLiteStore(RunStore):
    def __init__(self, path: str, timeout_seconds: float = 5.0):
        self.path = path
        self._timeout = timeout_seconds
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runonce-sqlite")  # pragma: no mutate - a thread's name shows only in a debugger
        self._conn: sqlite3.Connection | None = None

    @classmethod
    def from_url(cls, url: str, timeout_seconds: float = 5.0) -> SQLiteStore:
        return cls(url.removeprefix("sqlite:///"), timeout_seconds)

    # -- plumbing -----------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(
                self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False  # pragma: no mutate - busy_timeout is set right after; autocommit vs implicit BEGIN changes nothing before our BEGIN IMMEDIATE
            )
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
                # FULL: a claim that was answered must survive a power cut, or the run could repeat.
                conn.execute("PRAGMA synchronous = FULL")  # pragma: no mutate - SQL keywords and pragma names are case-insensitive
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
                if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":  # pragma: no mutate - asking for WAL again is harmless: its mutants only add a write
                    conn.execute("PRAGMA journal_mode = WAL")  # pragma: no mutate - SQL keywords and pragma names are case-insensitive
                conn.executescript(_SCHEMA)
                _add_missing_columns(conn)
                _allow_skipped(conn)
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

    @staticmethod
    def _transaction(conn: sqlite3.Connection, body: Callable[[], T]) -> T:
        conn.execute("BEGIN IMMEDIATE")  # pragma: no mutate - SQL keywords and pragma names are case-insensitive; takes the write lock before the read: no lost updates
        try:
            result = body()
        except BaseException:
            conn.execute("ROLLBACK")  # pragma: no mutate - SQL keywords and pragma names are case-insensitive
            raise
        conn.execute("COMMIT")  # pragma: no mutate - SQL keywords and pragma names are case-insensitive
        return result

    @staticmethod
    def _read(conn: sqlite3.Connection, run_id: str) -> RunRecord | None:
        row = conn.execute(f"{_SELECT} WHERE run_id = ?", (run_id,)).fetchone()
        return _from_row(row) if row is not None else None

    # -- RunStore -----------------------------------------------------------------------------

    async def claim(self, new: NewRun, now: datetime, lease: timedelta, retention: timedelta) -> Claim:
        def work(conn: sqlite3.Connection) -> Claim:
            def body() -> Claim:
                found = self._read(conn, new.run_id)
                decision = decide(found, new, now)
                if decision not in (Decision.CREATE, Decision.TAKEOVER):
                    assert found is not None
                    return Claim(decision, found)
                record = claimed_record(found, decision, new, now, lease, retention)
                conn.execute(_UPSERT, _to_row(record))
                return Claim(decision, record, previous=found)

            return self._transaction(conn, body)

        return await self._run(work)

    async def finish(self, claim: Claim, finish: Finish, now: datetime) -> RunRecord:
        def work(conn: sqlite3.Connection) -> RunRecord:
            def body() -> RunRecord:
                found = self._read(conn, claim.record.run_id)
                if not holds(found, claim):
                    raise Fenced(found)
                record = finished_record(found, finish, now)
                conn.execute(_UPSERT, _to_row(record))
                return record

            return self._transaction(conn, body)

        return await self._run(work)

    async def get(self, run_id: str, now: datetime) -> RunRecord | None:
        def work(conn: sqlite3.Connection) -> RunRecord | None:
            found = self._read(conn, run_id)
            return found if found is not None and found.expire_at > now else None

        return await self._run(work)

    async def list(
        self, now: datetime, route: str | None = None, status: RunStatus | None = None, limit: int = 50
    ) -> list[RunRecord]:
        def work(conn: sqlite3.Connection) -> list[RunRecord]:
            rows = conn.execute(
                f"{_SELECT} WHERE expire_at > ? AND (? IS NULL OR route = ?) AND (? IS NULL OR status = ?)"
                " ORDER BY created_at DESC LIMIT ?",  # pragma: no mutate - SQL keywords and pragma names are case-insensitive
                (rfc3339(now), route, route, status, status, limit),
            ).fetchall()
            return [_from_row(row) for row in rows]

        return await self._run(work)

    async def release(self, run_id: str, now: datetime) -> RunRecord | None:
        def work(conn: sqlite3.Connection) -> RunRecord | None:
            def body() -> RunRecord | None:
                found = self._read(conn, run_id)
                if not releasable(found, now):
                    return None
                conn.execute(
                    "UPDATE runs SET lease_expires = ?, updated_at = ? WHERE run_id = ?",  # pragma: no mutate - SQL keywords and pragma names are case-insensitive
                    (rfc3339(now), rfc3339(now), run_id),
                )
                return self._read(conn, run_id)

            return self._transaction(conn, body)

        return await self._run(work)

    async def ping(self) -> None:
        # Take the write lock a claim needs (and give it back): a SELECT would pass while another
        # process holds the database locked and every claim times out.
        await self._run(lambda conn: self._transaction(conn, lambda: None))

    async def close(self) -> None:
        def work() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None  # pragma: no mutate - None or '': either is falsy, so the next call reconnects

        await asyncio.get_running_loop().run_in_executor(self._executor, work)  # pragma: no mutate - check_same_thread=False: closing from another thread is the same
        self._executor.shutdown(wait=True)  # pragma: no mutate - the executor has no queued work left at this point

