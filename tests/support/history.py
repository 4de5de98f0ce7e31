"""A route's history, written straight into a store, and what a delivery or an audit then costs
each store (tests/test_store_history.py, bench/bench_history.py).

`seed` writes completed records of route `etl` in bulk with each backend's own batch write (the
claim protocol would take minutes for 100,000 records on an emulator). `Meter` counts what the
store serves: its requests, and the work behind them where the backend shows it (SQLite: virtual
machine steps; Firestore: documents read; Redis: the commands the server ran, scripts' included).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from runonce.routes import parse_routes
from runonce.stores import RunStore
from runonce.stores.base import COMPLETED, RunRecord

ROUTE = "etl"
LEASE = timedelta(seconds=300)
RETENTION = timedelta(days=30)
BODY = "0" * 64
ROUTES = parse_routes(
    """
routes:
  etl:
    target: {type: log}
    job: nightly
    schedule: "* * * * *"
    namespace: {project: proj-1, location: us-central1}
""",
    "test",
)
TARGET_TYPE = "scripted"


def history(count: int, newest: datetime, retention: timedelta, start: int = 0) -> list[RunRecord]:
    """`count` completed runs of ROUTE, one a minute back from `newest` (run `start` the newest),
    each with a finished execution; live until `newest` + `retention`."""
    records = []
    for i in range(start, start + count):
        created = newest - timedelta(minutes=i + 1)
        records.append(
            RunRecord(
                run_id=f"{i:060x}hist",
                status=COMPLETED,
                attempt_id=f"{i:032x}",
                attempts=1,
                lease_expires=created + timedelta(minutes=5),
                expire_at=newest + retention - timedelta(minutes=i),
                created_at=created,
                updated_at=created + timedelta(seconds=1),
                route=ROUTE,
                source="scheduler",
                project="proj-1",
                location="us-central1",
                job="nightly",
                schedule_time=None,
                task=None,
                body_sha256="0" * 64,
                target={"type": TARGET_TYPE, "resource": f"scripted/{i}"},
            )
        )
    return records


async def seed(store: RunStore, records: Sequence[RunRecord]) -> None:
    """Write `records` into `store` with its backend's batch write (the indexes kept as the store
    keeps them)."""
    kind = type(store).__name__
    if kind == "MemoryStore":
        for record in records:
            store._store(record)  # type: ignore[attr-defined]
    elif kind == "SQLiteStore":
        from runonce.stores import sqlite

        rows = [sqlite._to_row(record) for record in records]

        def insert(conn: Any) -> None:
            with conn:  # one transaction: one fsync, not one per row
                conn.execute("BEGIN")
                conn.executemany(sqlite._INSERT, rows)

        await store._run(insert)  # type: ignore[attr-defined]
    elif kind == "FirestoreStore":
        await _seed_firestore(store, records)
    elif kind == "SpannerStore":
        await asyncio.to_thread(_seed_spanner, store, records)
    elif kind == "RedisStore":
        await _seed_redis(store, records)
    else:
        raise AssertionError(f"no bulk seed for {kind}")


async def _seed_firestore(store: Any, records: Sequence[RunRecord]) -> None:
    from runonce.stores import firestore

    async def commit(batch: Sequence[RunRecord]) -> None:
        request = firestore._CommitRequest(database=store._database)
        for record in batch:
            _, write = store._write(record, firestore._FIELDS)
            request.writes.add().CopyFrom(write)
        await store._commit_call(request)

    gate = asyncio.Semaphore(8)

    async def gated(batch: Sequence[RunRecord]) -> None:
        async with gate:
            await commit(batch)

    # Firestore's most writes per commit, several commits at once.
    await asyncio.gather(*(gated(records[start : start + 500]) for start in range(0, len(records), 500)))


def _seed_spanner(store: Any, records: Sequence[RunRecord]) -> None:
    from runonce.stores import spanner

    for start in range(0, len(records), 2000):  # within the 80,000 mutations of one commit
        with store._database.batch() as batch:
            batch.insert(store.table, spanner._COLUMNS, [spanner._to_row(r) for r in records[start : start + 2000]])


async def _seed_redis(store: Any, records: Sequence[RunRecord]) -> None:
    from runonce.stores import redis

    now = min(record.created_at for record in records)
    for start in range(0, len(records), 5000):
        async with store._client.pipeline(transaction=False) as pipe:
            for record in records[start : start + 5000]:
                ttl = record.expire_at - now
                pipe.set(store._key(record.run_id), redis._to_json(record), px=int(ttl.total_seconds() * 1000))
                for key in redis._index_keys(record):
                    pipe.zadd(key, {record.run_id: redis._score(record.created_at)})
            pipe.set(redis.INDEXED, "1")
            await pipe.execute()


class Meter:
    """What a store served between `start()` and `read()`: {"requests": n, WORK: n}."""

    def __init__(self, store: RunStore):
        self.store = store
        self.kind = type(store).__name__
        self.calls = 0
        self._steps = [0]
        self._installed = False

    async def _install(self) -> None:
        """Count every store call (all kinds) and SQLite's VM steps, once."""
        if self._installed:
            return
        self._installed = True
        for name in ("load", "insert_if_absent", "replace_if_version", "list", "get_many", "claim", "finish"):
            original = getattr(self.store, name)

            def counted(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                self.calls += 1
                return _original(*args, **kwargs)

            setattr(self.store, name, counted)
        if self.kind == "SQLiteStore":
            steps = self._steps

            def tick() -> int:
                steps[0] += 1
                return 0

            await self.store._run(lambda conn: conn.set_progress_handler(tick, 10))  # type: ignore[attr-defined]

    async def _work(self) -> int:
        if self.kind == "SQLiteStore":
            return self._steps[0]  # tens of SQLite VM instructions
        if self.kind == "FirestoreStore":
            return self.store.documents_read  # type: ignore[attr-defined]
        if self.kind == "RedisStore":
            stats = await self.store._client.info("commandstats")  # type: ignore[attr-defined]
            return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")
        if self.kind == "SpannerStore":
            return sum(self.store.calls.values())  # type: ignore[attr-defined]
        return 0

    async def start(self) -> None:
        await self._install()
        self._calls0, self._work0 = self.calls, await self._work()

    async def read(self) -> dict[str, int]:
        work = await self._work()  # Redis: the INFO calls themselves are left out of the sum
        return {"requests": self.calls - self._calls0, "work": work - self._work0}
