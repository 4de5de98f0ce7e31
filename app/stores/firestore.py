"""Firestore claim store (`RUNONCE_STORE=firestore`): document `{collection}/{run_id}`.

No transactions. Each write is a single conditional write, so a fresh run costs two round trips:

    claim:  create(doc)                              precondition exists=false  -> we hold the run
            on AlreadyExists: get(doc), decide(), update(doc) with precondition update_time=read's
    finish: update(doc) with precondition update_time=claim's write time
            on FailedPrecondition: get(doc); still ours -> retry with the new update_time, else Fenced

A lost race shows up as AlreadyExists / FailedPrecondition and is retried from a fresh read, so the
result is the same as a serializable transaction's (at most one winner), at a third of the round
trips of the textbook get+set transaction pair. A write of ours whose answer was lost (the client
retried it and got AlreadyExists / FailedPrecondition) is recognised on that read: by attempt_id
for a claim, by the record being exactly what we wrote for finish and release.

Timestamps are stored as Firestore Timestamps, so a TTL policy on `expire_at` deletes old records.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.cloud import firestore

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
)

T = TypeVar("T")

# Conditional writes that lose a race are retried from a fresh read; this bounds a pathological
# livelock (every retry needs another writer to have succeeded in between).
_MAX_RACES = 20

# What a finish changes (see base.finished_record): a smaller write than the whole record.
_FINISH_FIELDS = ("status", "target", "last_error", "updated_at")

# Errors that are part of the protocol, not store failures.
_PROTOCOL_ERRORS = (gexc.AlreadyExists, gexc.FailedPrecondition, gexc.NotFound)


class FirestoreStore(RunStore):
    def __init__(
        self,
        project: str | None = None,
        database: str = "(default)",
        collection: str = "runonce_runs",
        timeout_seconds: float = 5.0,
        client: firestore.AsyncClient | None = None,
    ):
        self._client = client or firestore.AsyncClient(project=project, database=database)
        self._collection = self._client.collection(collection)
        self._timeout = timeout_seconds
        self.round_trips: Counter[str] = Counter()
        """Firestore calls made, by operation (`create`, `get`, `update`, `query`)."""

    async def _rpc(self, op: str, call: Awaitable[T]) -> T:
        self.round_trips[op] += 1
        try:
            async with asyncio.timeout(self._timeout):
                return await call
        except _PROTOCOL_ERRORS:
            raise
        except (TimeoutError, gexc.GoogleAPIError) as exc:
            raise StoreUnavailable(f"firestore {op}: {type(exc).__name__}: {exc}") from exc

    async def _read(self, run_id: str) -> tuple[RunRecord | None, Any]:
        snap = await self._rpc("get", self._collection.document(run_id).get())
        if not snap.exists:
            return None, None
        return _from_doc(snap.to_dict()), snap.update_time

    async def _write_if_unchanged(self, record: RunRecord, version: Any, fields: tuple[str, ...] | None = None) -> Any:
        """Write `record` (only `fields` of it, if given) if the document's update time is still
        `version`. Returns the new update time; raises FailedPrecondition / NotFound otherwise."""
        ref = self._collection.document(record.run_id)
        option = self._client.write_option(last_update_time=version)
        doc = _to_doc(record)
        if fields is not None:
            doc = {name: doc[name] for name in fields}
        result = await self._rpc("update", ref.update(doc, option=option))
        return result.update_time

    # -- RunStore -----------------------------------------------------------------------------

    async def claim(self, new: NewRun, now: datetime, lease: timedelta, retention: timedelta) -> Claim:
        ref = self._collection.document(new.run_id)
        record = claimed_record(None, Decision.CREATE, new, now, lease, retention)
        try:
            result = await self._rpc("create", ref.create(_to_doc(record)))
            return Claim(Decision.CREATE, record, version=result.update_time)
        except gexc.AlreadyExists:
            pass

        # Every write this claim sent, by attempt_id: (decision, record it replaced). A write whose
        # answer was lost (the client retried it and got AlreadyExists / FailedPrecondition) is
        # recognised on the next read by its attempt_id, so we never report BUSY for our own claim.
        sent: dict[str, tuple[Decision, RunRecord | None]] = {record.attempt_id: (Decision.CREATE, None)}
        for _ in range(_MAX_RACES):
            found, version = await self._read(new.run_id)
            if found is None:  # deleted since (TTL): start over with a create
                try:
                    result = await self._rpc("create", ref.create(_to_doc(record)))
                    return Claim(Decision.CREATE, record, version=result.update_time)
                except gexc.AlreadyExists:
                    continue
            if found.attempt_id in sent:
                # Our own write landed but its answer was lost.
                decision, previous = sent[found.attempt_id]
                return Claim(decision, found, previous=previous, version=version)
            decision = decide(found, new, now)
            if decision not in (Decision.CREATE, Decision.TAKEOVER):
                return Claim(decision, found)
            claimed = claimed_record(found, decision, new, now, lease, retention)
            sent[claimed.attempt_id] = (decision, found)
            try:
                written = await self._write_if_unchanged(claimed, version)
                return Claim(decision, claimed, previous=found, version=written)
            except (gexc.FailedPrecondition, gexc.NotFound):
                continue  # someone (or our own lost write) wrote in between: decide again
        raise StoreUnavailable(f"firestore claim of {new.run_id}: still contended after {_MAX_RACES} tries")

    async def finish(self, claim: Claim, finish: Finish, now: datetime) -> RunRecord:
        held, version = claim.record, claim.version
        for _ in range(_MAX_RACES):
            record = finished_record(held, finish, now)
            if version is not None:
                try:
                    await self._write_if_unchanged(record, version, _FINISH_FIELDS)
                    return record
                except (gexc.FailedPrecondition, gexc.NotFound):
                    pass
            found, version = await self._read(held.run_id)
            if found is not None and found == record:
                return found  # our own write had landed, its answer was lost
            if not holds(found, claim):
                raise Fenced(found)
            assert found is not None
            held = found  # still ours (e.g. an admin touched the lease): write over what is there
        raise StoreUnavailable(f"firestore finish of {held.run_id}: still contended after {_MAX_RACES} tries")

    async def get(self, run_id: str, now: datetime) -> RunRecord | None:
        found, _ = await self._read(run_id)
        return found if found is not None and found.expire_at > now else None

    async def list(
        self, now: datetime, route: str | None = None, status: RunStatus | None = None, limit: int = 50
    ) -> list[RunRecord]:
        # Equality filters only: served by single-field indexes, no composite index to deploy.
        query: Any = self._collection
        if route is not None:
            query = query.where(filter=firestore.FieldFilter("route", "==", route))
        if status is not None:
            query = query.where(filter=firestore.FieldFilter("status", "==", status))
        snaps = await self._rpc("query", query.get())
        records = [_from_doc(snap.to_dict()) for snap in snaps]
        live = [r for r in records if r.expire_at > now]
        return sorted(live, key=lambda r: r.created_at, reverse=True)[:limit]

    async def release(self, run_id: str, now: datetime) -> RunRecord | None:
        released: RunRecord | None = None
        for _ in range(_MAX_RACES):
            found, version = await self._read(run_id)
            if found is not None and found == released:
                return found  # our own write had landed, its answer was lost
            if not releasable(found, now):
                return None
            assert found is not None
            released = replace(found, lease_expires=now, updated_at=now)
            try:
                await self._write_if_unchanged(released, version, ("lease_expires", "updated_at"))
                return released
            except (gexc.FailedPrecondition, gexc.NotFound):
                continue
        raise StoreUnavailable(f"firestore release of {run_id}: still contended after {_MAX_RACES} tries")

    async def ping(self) -> None:
        # A read of a document that never exists: proves reachability and permission.
        await self._rpc("get", self._collection.document("_runonce_readyz").get())

    async def close(self) -> None:
        # AsyncClient has no close(); its gRPC channel lives on the lazily built GAPIC client.
        api = self._client._firestore_api_internal
        if api is not None:
            await api.transport.close()


def _to_doc(record: RunRecord) -> dict[str, Any]:
    return record.as_dict()  # datetimes become Timestamps; target is a map


def _from_doc(doc: dict[str, Any] | None) -> RunRecord:
    assert doc is not None
    values = dict(doc)
    for name in ("lease_expires", "expire_at", "created_at", "updated_at"):
        # DatetimeWithNanoseconds -> plain datetime, so records compare equal across stores
        value = values[name]
        values[name] = datetime(*value.timetuple()[:6], value.microsecond, tzinfo=timezone.utc)
    return RunRecord(**values)
