"""In-process store: one dict. For tests of the coordinating logic and for demos; it forgets
everything on restart and is not shared between worker processes.

The claim protocol is `RunStore`'s; the primitives run without an await, so each is atomic on the
event loop. A record's version is the stored object itself (identity: a write always stores a new one).
"""

from __future__ import annotations

from datetime import datetime

from runonce.stores.base import RunRecord, RunStatus, RunStore, Version


class MemoryStore(RunStore):
    def __init__(self) -> None:
        self._records: dict[str, RunRecord] = {}

    async def load(self, run_id: str) -> tuple[RunRecord, Version] | None:
        found = self._records.get(run_id)
        return (found, found) if found is not None else None

    async def insert_if_absent(self, record: RunRecord) -> Version | None:
        if record.run_id in self._records:
            return None
        self._records[record.run_id] = record
        return record

    async def replace_if_version(
        self, record: RunRecord, version: Version, changed: tuple[str, ...] | None = None
    ) -> Version | None:
        if self._records.get(record.run_id) is not version:
            return None
        self._records[record.run_id] = record
        return record

    async def list(
        self, now: datetime, route: str | None = None, status: RunStatus | None = None, limit: int = 50
    ) -> list[RunRecord]:
        found = [
            r
            for r in self._records.values()
            if r.expire_at > now and route in (None, r.route) and status in (None, r.status)
        ]
        return sorted(found, key=lambda r: r.created_at, reverse=True)[:limit]

    async def ping(self) -> None:
        return None
