"""Firestore claim store (`RUNONCE_STORE=firestore`): document `{collection}/{run_id}`.

No transactions: `RunStore`'s protocol over Firestore's conditional writes, a record's version being
the document's update time. A fresh run costs two round trips:

    claim:  create(doc)  precondition exists=false          (insert_if_absent)
    finish: update(doc)  precondition update_time=claim's    (replace_if_version)

A lost race shows up as AlreadyExists / FailedPrecondition and is decided again from a fresh read,
so the result is the same as a serializable transaction's (at most one winner), at a third of the
round trips of the textbook get+set transaction pair.

Timestamps are stored as Firestore Timestamps, so a TTL policy on `expire_at` deletes old records.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable
from datetime import datetime, timezone
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.cloud import firestore

from .base import RunRecord, RunStatus, RunStore, StoreUnavailable, Version

T = TypeVar("T")

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

    # -- primitives (the protocol is RunStore's) -----------------------------------------------

    async def load(self, run_id: str) -> tuple[RunRecord, Version] | None:
        snap = await self._rpc("get", self._collection.document(run_id).get())
        return (_from_doc(snap.to_dict()), snap.update_time) if snap.exists else None

    async def insert_if_absent(self, record: RunRecord) -> Version | None:
        try:
            result = await self._rpc("create", self._collection.document(record.run_id).create(_to_doc(record)))
        except gexc.AlreadyExists:
            return None
        return result.update_time

    async def replace_if_version(
        self, record: RunRecord, version: Version, changed: tuple[str, ...] | None = None
    ) -> Version | None:
        doc = _to_doc(record)
        if changed is not None:  # a smaller write: only what the operation changes
            doc = {name: doc[name] for name in changed}
        option = self._client.write_option(last_update_time=version)
        try:
            result = await self._rpc("update", self._collection.document(record.run_id).update(doc, option=option))
        except (gexc.FailedPrecondition, gexc.NotFound):
            return None
        return result.update_time

    # -- the rest of RunStore ------------------------------------------------------------------

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
