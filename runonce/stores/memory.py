"""In-process store: one dict. For tests of the coordinating logic and for demos; it forgets
everything on restart and is not shared between worker processes.

The claim protocol is `RunStore`'s; the primitives run without an await, so each is atomic on the
event loop. A record's version is the stored object itself (identity: a write always stores a new one).
`list` reads per-(route, status) lists kept in `created_at` order, newest last, so its cost is what
`limit` asks, as on the other stores.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from datetime import datetime

from runonce.stores.base import RunRecord, RunStatus, RunStore, Version

_Key = tuple[str | None, str | None]


class MemoryStore(RunStore):
    def __init__(self) -> None:
        self._records: dict[str, RunRecord] = {}
        self._by: dict[_Key, list[tuple[datetime, str]]] = {}
        """(created_at, run_id) of the records of each (route, status), (route, None), (None, status)
        and (None, None), sorted."""

    async def load(self, run_id: str) -> tuple[RunRecord, Version] | None:
        found = self._records.get(run_id)
        return (found, found) if found is not None else None

    async def insert_if_absent(self, record: RunRecord) -> Version | None:
        if record.run_id in self._records:
            return None
        self._store(record)
        return record

    async def replace_if_version(
        self, record: RunRecord, version: Version, changed: tuple[str, ...] | None = None
    ) -> Version | None:
        if self._records.get(record.run_id) is not version:
            return None
        self._store(record)
        return record

    def _store(self, record: RunRecord) -> None:
        old = self._records.get(record.run_id)
        if old is not None:
            for key in _keys(old):
                entries = self._by.get(key, [])
                at = bisect.bisect_left(entries, (old.created_at, old.run_id))
                if at < len(entries) and entries[at] == (old.created_at, old.run_id):
                    del entries[at]
        self._records[record.run_id] = record
        for key in _keys(record):
            bisect.insort(self._by.setdefault(key, []), (record.created_at, record.run_id))

    async def list(
        self, now: datetime, route: str | None = None, status: RunStatus | None = None, limit: int = 50
    ) -> list[RunRecord]:
        found: dict[str, RunRecord] = {}
        for created_at, run_id in reversed(self._by.get((route, status), [])):
            if len(found) >= limit:
                break
            record = self._records.get(run_id)  # a test may have changed the dict behind the store's back
            if record is None or (record.created_at, record.route, record.status) != (
                created_at,
                route or record.route,
                status or record.status,
            ):
                continue
            if record.expire_at > now:
                found[run_id] = record
        return list(found.values())

    async def get_many(self, run_ids: Iterable[str], now: datetime) -> dict[str, RunRecord]:
        found = (self._records.get(run_id) for run_id in run_ids)
        return {r.run_id: r for r in found if r is not None and r.expire_at > now}

    async def ping(self) -> None:
        return None


def _keys(record: RunRecord) -> list[_Key]:
    return [(record.route, record.status), (record.route, None), (None, record.status), (None, None)]
