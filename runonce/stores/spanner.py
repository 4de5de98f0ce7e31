"""Cloud Spanner claim store (`RUNONCE_STORE=spanner://projects/P/instances/I/databases/D[?table=T]`).

One row per run, and `RunStore`'s protocol over three primitives, a record's version being the
record itself (what `load` read):

    load:               a strong single-use read                            1 round trip
    insert_if_absent:   a mutation-only commit (`insert`): AlreadyExists if the row exists   1
    replace_if_version: one read-write transaction: read, compare with `version`, update     2

So a fresh run costs 3 round trips (insert; finish's read + commit), a replay 2 (insert refused,
read), a takeover 4. The textbook shape, one read-write transaction per operation (read → decide →
write), costs 4 per fresh run and makes concurrent deliveries of one run contend for the row's lock
(Spanner aborts and retries all but one); here losers of a storm are refused by the insert and read
a snapshot, lock-free. Spanner's transactions are serializable and a mutation-only commit is atomic,
so at most one claim wins.

The client is synchronous: every call runs on this store's thread pool, bounded by the store
timeout, so the event loop never blocks. Rows are deleted by the table's row deletion policy after
`expire_at`; reads treat an expired row as absent until then.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.cloud import spanner
from google.cloud.spanner_v1 import param_types

from runonce.stores.base import GET_MANY_BATCH, RunRecord, RunStatus, RunStore, StoreUnavailable, Version, chunks, live
from runonce.stores.urls import SpannerURL

T = TypeVar("T")

logger = logging.getLogger("runonce.stores.spanner")

DDL = """CREATE TABLE {table} (
  run_id STRING(MAX) NOT NULL,
  status STRING(16) NOT NULL,
  attempt_id STRING(64) NOT NULL,
  attempts INT64 NOT NULL,
  lease_expires TIMESTAMP NOT NULL,
  expire_at TIMESTAMP NOT NULL,
  created_at TIMESTAMP NOT NULL,
  updated_at TIMESTAMP NOT NULL,
  route STRING(MAX) NOT NULL,
  source STRING(MAX) NOT NULL,
  project STRING(MAX) NOT NULL,
  location STRING(MAX) NOT NULL,
  job STRING(MAX) NOT NULL,
  schedule_time STRING(MAX),
  task STRING(MAX),
  body_sha256 STRING(64) NOT NULL,
  target STRING(MAX),
  last_error STRING(MAX),
  task_retry_count INT64,
  task_execution_count INT64,
) PRIMARY KEY (run_id),
  ROW DELETION POLICY (OLDER_THAN(expire_at, INTERVAL 0 DAY))"""
"""The table, the one text `runonce store init` applies and Terraform's database carries (a test
checks they agree). `target` is JSON text, as in SQLite, so every store reads it the same way."""

INDEX_DDL = (
    "CREATE INDEX {table}_by_route_status ON {table} (route, status, created_at DESC)",
    "CREATE INDEX {table}_by_route ON {table} (route, created_at DESC)",
    "CREATE INDEX {table}_by_status ON {table} (status, created_at DESC)",
)
"""The secondary indexes `list` reads through: a route's newest runs (of one status) cost what the
limit asks, not the route's history. `store init` creates those missing; Terraform's database
carries them after the table."""
_NO_INDEX = re.compile(r"secondary index|index .*not found|does not have .*index", re.IGNORECASE)
RETRY_INDEX_SECONDS = 300.0
"""How long `list` reads a table without its indexes before it tries them again."""
_INDEX_FOR = {(True, True): "by_route_status", (True, False): "by_route", (False, True): "by_status"}

_COLUMNS = [f.name for f in fields(RunRecord)]
_TIME_COLUMNS = ("lease_expires", "expire_at", "created_at", "updated_at")

_DROPPED = re.compile(r"Transaction not found|Invalid transaction ID|after it has been committed or rolledback")

_LIST_TYPES = {
    "now": param_types.TIMESTAMP,
    "route": param_types.STRING,
    "status": param_types.STRING,
    "limit": param_types.INT64,
}

# Errors that say the store could not answer; Aborted is retried inside run_in_transaction.
_UNAVAILABLE = (gexc.GoogleAPIError, TimeoutError, OSError)


def _to_row(record: RunRecord) -> list[Any]:
    values = record.as_dict()
    values["target"] = json.dumps(record.target) if record.target is not None else None
    return [values[name] for name in _COLUMNS]


def _from_row(row: list[Any]) -> RunRecord:
    values = dict(zip(_COLUMNS, row, strict=True))
    values["target"] = json.loads(values["target"]) if values["target"] is not None else None
    for name in _TIME_COLUMNS:  # DatetimeWithNanoseconds -> datetime, so records compare equal across stores
        value = values[name]
        values[name] = datetime(
            value.year, value.month, value.day, value.hour, value.minute, value.second, value.microsecond, tzinfo=UTC
        )
    return RunRecord(**values)


class SpannerStore(RunStore):
    def __init__(self, url: SpannerURL, timeout_seconds: float = 5.0, threads: int = 16):
        self.url = url
        self.table = url.table
        self._timeout = timeout_seconds
        self._client = spanner.Client(project=url.project)
        self._database = self._client.instance(url.instance).database(url.database)
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="runonce-spanner")
        self._unindexed_until = 0.0  # monotonic time before which list reads without an index hint
        self.calls: Counter[str] = Counter()
        """Primitives called, by name (`load`, `insert`, `replace`; each costs what the module says)."""

    # -- plumbing -----------------------------------------------------------------------------

    async def _run(self, op: str, fn: Callable[[], T]) -> T:
        self.calls[op] += 1

        def call() -> T:
            try:
                return fn()
            except _UNAVAILABLE as exc:
                raise StoreUnavailable(f"spanner {op}: {type(exc).__name__}: {exc}") from exc

        try:
            async with asyncio.timeout(self._timeout):
                return await asyncio.get_running_loop().run_in_executor(self._executor, call)
        except TimeoutError as exc:
            raise StoreUnavailable(f"spanner {op}: no answer in {self._timeout:g}s") from exc

    async def _transaction(self, op: str, body: Callable[[Any], T]) -> T:
        """`body(txn)` in one read-write transaction; aborts are retried within the store timeout."""

        def attempt() -> T:
            deadline = time.monotonic() + self._timeout
            while True:
                try:
                    result: T = self._database.run_in_transaction(body, timeout_secs=self._timeout)
                    return result
                except (gexc.NotFound, gexc.FailedPrecondition) as exc:
                    # A transaction the server dropped (its session gone; the emulator drops all but
                    # one concurrent transaction) never committed: run it again from the read.
                    if not _DROPPED.search(str(exc)) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)

        return await self._run(op, attempt)

    def _read(self, reader: Any, run_id: str) -> RunRecord | None:
        rows = list(reader.read(self.table, _COLUMNS, spanner.KeySet(keys=[[run_id]])))
        return _from_row(rows[0]) if rows else None

    # -- primitives (the protocol is RunStore's) -----------------------------------------------

    async def load(self, run_id: str) -> tuple[RunRecord, Version] | None:
        def read() -> RunRecord | None:
            with self._database.snapshot() as snapshot:
                return self._read(snapshot, run_id)

        found = await self._run("load", read)
        return (found, found) if found is not None else None

    async def insert_if_absent(self, record: RunRecord) -> Version | None:
        def insert() -> bool:
            try:
                with self._database.batch() as batch:
                    batch.insert(self.table, _COLUMNS, [_to_row(record)])
            except gexc.AlreadyExists:
                return False
            return True

        return record if await self._run("insert", insert) else None

    async def replace_if_version(
        self, record: RunRecord, version: Version, changed: tuple[str, ...] | None = None
    ) -> Version | None:
        def body(txn: Any) -> bool:
            if self._read(txn, record.run_id) != version:
                return False
            txn.update(self.table, _COLUMNS, [_to_row(record)])
            return True

        return record if await self._transaction("replace", body) else None

    # -- the rest of RunStore ------------------------------------------------------------------

    async def list(
        self, now: datetime, route: str | None = None, status: RunStatus | None = None, limit: int = 50
    ) -> list[RunRecord]:
        # Only the filters asked for, read through the index on them (INDEX_DDL), newest first: the
        # scan stops at `limit` live rows. No filter at all is an admin's view: a scan of the table.
        where, params = ["expire_at > @now"], {"now": now, "limit": limit}
        if route is not None:
            where.append("route = @route")
            params["route"] = route
        if status is not None:
            where.append("status = @status")
            params["status"] = status
        types = {name: _LIST_TYPES[name] for name in params}
        index = _INDEX_FOR.get((route is not None, status is not None))
        hinted = index is not None and time.monotonic() >= self._unindexed_until
        source = f"{self.table}@{{FORCE_INDEX={self.table}_{index}}}" if hinted else self.table
        sql = (
            f"SELECT {', '.join(_COLUMNS)} FROM {source} WHERE {' AND '.join(where)}"
            " ORDER BY created_at DESC LIMIT @limit"
        )

        def query() -> list[RunRecord]:
            with self._database.snapshot() as snapshot:
                return [_from_row(row) for row in snapshot.execute_sql(sql, params=params, param_types=types)]

        try:
            return await self._run("list", query)
        except StoreUnavailable as exc:
            if not hinted or not _NO_INDEX.search(str(exc)):
                raise
        # A table from before the indexes (`runonce store init` adds them): read it as before, a
        # scan, and try the index again in a while.
        self._unindexed_until = time.monotonic() + RETRY_INDEX_SECONDS
        logger.warning(
            "spanner table %s has no index %s_%s: listing runs scans the table; run `runonce store init`",
            self.table,
            self.table,
            index,
        )
        return await self.list(now, route, status, limit)

    async def get_many(self, run_ids: Iterable[str], now: datetime) -> dict[str, RunRecord]:
        """One strong read of a KeySet per GET_MANY_BATCH run_ids."""
        unique = list(dict.fromkeys(run_ids))

        def read() -> dict[str, RunRecord]:
            found: dict[str, RunRecord] = {}
            with self._database.snapshot(multi_use=True) as snapshot:
                for batch in chunks(unique, GET_MANY_BATCH):
                    keys = spanner.KeySet(keys=[[run_id] for run_id in batch])
                    found.update(live((_from_row(row) for row in snapshot.read(self.table, _COLUMNS, keys)), now))
            return found

        return await self._run("get_many", read)

    async def ping(self) -> None:
        def select() -> None:
            with self._database.snapshot() as snapshot:
                list(snapshot.execute_sql(f"SELECT 1 FROM {self.table} LIMIT 1"))

        await self._run("ping", select)

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        await asyncio.get_running_loop().run_in_executor(None, self._client.close)

    # -- runonce store init ---------------------------------------------------------------------

    def init(self, say: Callable[[str], None]) -> None:
        """Create the table with its row deletion policy and its indexes, or those of them missing
        (then change nothing else); say what was done."""
        with self._database.snapshot(multi_use=True) as snapshot:
            rows = list(
                snapshot.execute_sql(
                    "SELECT ROW_DELETION_POLICY_EXPRESSION FROM INFORMATION_SCHEMA.TABLES"
                    " WHERE TABLE_SCHEMA = '' AND TABLE_NAME = @table",
                    params={"table": self.table},
                    param_types={"table": param_types.STRING},
                )
            )
            have = {
                row[0]
                for row in snapshot.execute_sql(
                    "SELECT INDEX_NAME FROM INFORMATION_SCHEMA.INDEXES WHERE TABLE_SCHEMA = '' AND TABLE_NAME = @table",
                    params={"table": self.table},
                    param_types={"table": param_types.STRING},
                )
            }
        missing = [ddl.format(table=self.table) for ddl in INDEX_DDL if _index_name(ddl, self.table) not in have]
        if not rows:
            self._database.update_ddl([DDL.format(table=self.table), *missing]).result(timeout=300)
            say(
                f"spanner table {self.table} created, with a row deletion policy on expire_at"
                f" and {len(missing)} indexes"
            )
            return
        policy = rows[0][0]
        say(f"spanner table {self.table} exists (row deletion policy: {policy or 'none'})")
        if not policy:
            say(f"  add it: ALTER TABLE {self.table} ADD ROW DELETION POLICY (OLDER_THAN(expire_at, INTERVAL 0 DAY))")
        if not missing:
            say(f"spanner indexes of {self.table}: all {len(INDEX_DDL)} present, nothing to do")
            return
        # Spanner backfills a new index while the table stays readable and writable.
        self._database.update_ddl(missing).result(timeout=3600)
        for ddl in missing:
            say(f"spanner index created: {ddl}")


def _index_name(ddl: str, table: str) -> str:
    """The name a statement of INDEX_DDL gives its index for `table`."""
    return ddl.format(table=table).split()[2]
