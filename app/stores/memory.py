"""In-process store: one dict and one lock. For tests of the coordinating logic and for demos;
it forgets everything on restart and is not shared between worker processes."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime, timedelta

from .base import (
    Claim,
    Decision,
    Fenced,
    Finish,
    NewRun,
    RunRecord,
    RunStatus,
    RunStore,
    claimed_record,
    decide,
    finished_record,
    holds,
    releasable,
)


class MemoryStore(RunStore):
    def __init__(self) -> None:
        self._records: dict[str, RunRecord] = {}
        self._lock = asyncio.Lock()

    async def claim(self, new: NewRun, now: datetime, lease: timedelta, retention: timedelta) -> Claim:
        async with self._lock:
            found = self._records.get(new.run_id)
            decision = decide(found, new, now)
            if decision in (Decision.CREATE, Decision.TAKEOVER):
                record = claimed_record(found, decision, new, now, lease, retention)
                self._records[new.run_id] = record
                return Claim(decision, record, previous=found)
            assert found is not None
            return Claim(decision, found)

    async def finish(self, claim: Claim, finish: Finish, now: datetime) -> RunRecord:
        async with self._lock:
            found = self._records.get(claim.record.run_id)
            if not holds(found, claim):
                raise Fenced(found)
            record = finished_record(found, finish, now)
            self._records[record.run_id] = record
            return record

    async def get(self, run_id: str, now: datetime) -> RunRecord | None:
        found = self._records.get(run_id)
        return found if found is not None and found.expire_at > now else None

    async def list(
        self, now: datetime, route: str | None = None, status: RunStatus | None = None, limit: int = 50
    ) -> list[RunRecord]:
        found = [
            r
            for r in self._records.values()
            if r.expire_at > now and route in (None, r.route) and status in (None, r.status)
        ]
        return sorted(found, key=lambda r: r.created_at, reverse=True)[:limit]

    async def release(self, run_id: str, now: datetime) -> RunRecord | None:
        async with self._lock:
            found = self._records.get(run_id)
            if not releasable(found, now):
                return None
            record = replace(found, lease_expires=now, updated_at=now)
            self._records[run_id] = record
            return record

    async def ping(self) -> None:
        return None
