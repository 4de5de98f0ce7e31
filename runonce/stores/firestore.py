"""Firestore claim store (`RUNONCE_STORE=firestore`): document `{collection}/{run_id}`.

No transactions: `RunStore`'s protocol over Firestore's conditional writes, a record's version being
the document's update time. A fresh run costs two round trips:

    claim:  create(doc)  precondition exists=false          (insert_if_absent)
    finish: update(doc)  precondition update_time=claim's    (replace_if_version)

A lost race shows up as AlreadyExists / FailedPrecondition and is decided again from a fresh read,
so the result is the same as a serializable transaction's (at most one winner), at a third of the
round trips of the textbook get+set transaction pair.

Timestamps are stored as Firestore Timestamps, so a TTL policy on `expire_at` deletes old records.

The three calls of the protocol (Commit for create and update, BatchGetDocuments for load) send the
same requests as google-cloud-firestore's `DocumentReference.create/update/get`, on its channel (so
its credentials), with its retry policies, but built as raw protobuf messages from the record: the
document API's proto-plus marshalling, field-path extraction and per-call wrappers cost more client
CPU than the gRPC calls themselves. `list` and `ping` are not on the hot path and use the client.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import grpc
from google.api_core import exceptions as gexc
from google.api_core import gapic_v1, retry_async
from google.cloud import firestore
from google.cloud._helpers import _datetime_to_pb_timestamp
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1.services.firestore.transports.base import DEFAULT_CLIENT_INFO
from google.cloud.firestore_v1.types import firestore as rpc

from runonce.stores.base import (
    GET_MANY_BATCH,
    Records,
    RunRecord,
    RunStatus,
    RunStore,
    StoreUnavailable,
    Version,
    chunks,
    live,
)

T = TypeVar("T")

logger = logging.getLogger("runonce.stores.firestore")

RETRY_INDEX_SECONDS = 300.0
"""How long `list` reads a collection without its composite indexes before it tries them again."""

# The errors that are the protocol's answers, not store failures, per write: the record is not as
# the write expected (it exists already; it changed or went since it was read). Anywhere else they
# are the store failing, e.g. FailedPrecondition "The Cloud Firestore API is not available for
# Firestore in Datastore Mode database ..." or NotFound "The database (default) does not exist ...".
_CREATE_REFUSED = (gexc.AlreadyExists,)
_UPDATE_REFUSED = (gexc.FailedPrecondition, gexc.NotFound)

# The raw protobuf classes under google-cloud-firestore's proto-plus types.
_CommitRequest = rpc.CommitRequest.pb()
_CommitResponse = rpc.CommitResponse.pb()
_BatchGetRequest = rpc.BatchGetDocumentsRequest.pb()
_BatchGetResponse = rpc.BatchGetDocumentsResponse.pb()

# What the GAPIC client applies to these two methods (firestore_v1's transports/grpc_asyncio.py):
# each attempt's deadline, and which errors are retried, with what backoff, for how long.
_COMMIT_TIMEOUT = 60.0
_BATCH_GET_TIMEOUT = 300.0
_COMMIT_RETRY = retry_async.AsyncRetry(
    initial=0.1,
    maximum=60.0,
    multiplier=1.3,
    deadline=60.0,
    predicate=retry_async.if_exception_type(gexc.ResourceExhausted, gexc.ServiceUnavailable),
)
_BATCH_GET_RETRY = retry_async.AsyncRetry(
    initial=0.1,
    maximum=60.0,
    multiplier=1.3,
    deadline=300.0,
    predicate=retry_async.if_exception_type(gexc.DeadlineExceeded, gexc.InternalServerError, gexc.ServiceUnavailable),
)

_FIELDS = tuple(f.name for f in fields(RunRecord))

INDEXES = (("route", "status"), ("route",), ("status",))
"""The composite indexes `list` needs: each of these fields ascending, then `created_at`
descending, on the collection (terraform/indexes.tf declares them; `runonce store init` prints the
gcloud commands). A list with no filter uses the automatic single-field index on created_at."""


def index_commands(collection: str) -> list[str]:
    """The gcloud commands that create INDEXES on `collection` (`runonce store init` prints them)."""
    return [
        f"gcloud firestore indexes composite create --collection-group={collection} "
        + " ".join(f"--field-config=field-path={name},order=ascending" for name in fields_)
        + " --field-config=field-path=created_at,order=descending"
        for fields_ in INDEXES
    ]


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
        self._unindexed_until = 0.0  # monotonic time before which list reads without the index
        self.round_trips: Counter[str] = Counter()
        """Firestore calls made, by operation (`create`, `get`, `update`, `query`, `get_many`)."""
        self.documents_read = 0
        """Documents the calls returned: what Firestore bills reads by."""
        self._database = self._client._database_string
        self._documents = f"{self._database}/documents/{collection}/"
        # The document API's metadata (resource prefix; on the emulator, its owner token), plus what
        # its GAPIC layer adds per call (routing header, client version).
        self._metadata = (
            *self._client._rpc_metadata,
            gapic_v1.routing_header.to_grpc_metadata((("database", self._database),)),
            DEFAULT_CLIENT_INFO.to_grpc_metadata(),
        )
        self._commit_stub: Callable[..., Any] | None = None
        self._batch_get_stub: Callable[..., Any] | None = None
        # One call each, retried as the GAPIC retries it (tests replace `_commit_call` to lose an answer).
        self._commit_call = _COMMIT_RETRY(self._commit_once)
        self._batch_get_call = _BATCH_GET_RETRY(self._batch_get_once)

    async def _rpc(self, op: str, call: Awaitable[T], refused: tuple[type[Exception], ...] = ()) -> T:
        """`call`'s result; `refused` errors raised as they are (the protocol's answers), any other
        failure or the store's deadline as StoreUnavailable."""
        self.round_trips[op] += 1
        try:
            async with asyncio.timeout(self._timeout):
                return await call
        except refused:
            raise
        except (TimeoutError, gexc.GoogleAPIError) as exc:
            raise StoreUnavailable(f"firestore {op}: {type(exc).__name__}: {exc}") from exc

    # -- the raw calls -------------------------------------------------------------------------

    def _stubs(self) -> None:
        """Callables on the client's own gRPC channel (built on first use, inside the event loop)."""
        channel = self._client._firestore_api.transport.grpc_channel
        self._commit_stub = channel.unary_unary(
            "/google.firestore.v1.Firestore/Commit",
            request_serializer=_CommitRequest.SerializeToString,
            response_deserializer=_CommitResponse.FromString,
        )
        self._batch_get_stub = channel.unary_stream(
            "/google.firestore.v1.Firestore/BatchGetDocuments",
            request_serializer=_BatchGetRequest.SerializeToString,
            response_deserializer=_BatchGetResponse.FromString,
        )

    async def _commit_once(self, request: Any) -> Any:
        if self._commit_stub is None:
            self._stubs()
        assert self._commit_stub is not None  # set by _stubs()
        try:
            return await self._commit_stub(request, timeout=_COMMIT_TIMEOUT, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise gexc.from_grpc_error(exc) from exc

    async def _batch_get_once(self, request: Any) -> Any:
        if self._batch_get_stub is None:
            self._stubs()
        assert self._batch_get_stub is not None  # set by _stubs()
        call = self._batch_get_stub(request, timeout=_BATCH_GET_TIMEOUT, metadata=self._metadata)
        try:
            await call.wait_for_connection()  # where api_core's retry sees a stream's errors
        except grpc.RpcError as exc:
            raise gexc.from_grpc_error(exc) from exc
        return call

    def _write(self, record: RunRecord, names: tuple[str, ...]) -> tuple[Any, Any]:
        """A CommitRequest of one Write setting `names` of the record's document: (request, write)."""
        request = _CommitRequest(database=self._database)
        write_pb = request.writes.add()
        write_pb.update.name = self._documents + record.run_id
        doc_fields = write_pb.update.fields
        for name in names:
            _encode(doc_fields[name], getattr(record, name))
        return request, write_pb

    async def _commit(self, op: str, request: Any, refused: tuple[type[Exception], ...]) -> Any:
        """The update time of the Commit's one write: the record's new version."""
        response = await self._rpc(op, self._commit_call(request), refused)
        return response.write_results[0].update_time

    # -- primitives (the protocol is RunStore's) -----------------------------------------------

    async def load(self, run_id: str) -> tuple[RunRecord, Version] | None:
        request = _BatchGetRequest(database=self._database, documents=[self._documents + run_id])
        response = await self._rpc("get", self._read_one(request))
        if response is None or not response.HasField("found"):
            return None
        self.documents_read += 1
        found = response.found  # decoded as DocumentSnapshot.to_dict() does (not on a fresh run's path)
        # A record is a plain map; the client decodes only references, which records never hold.
        fields = cast("dict[str, Any]", _helpers.decode_dict(found.fields, self._client))  # pragma: no mutate
        return _from_doc(fields), found.update_time  # pragma: no mutate - see above

    async def _read_one(self, request: Any) -> Any:
        call = await self._batch_get_call(request)
        try:
            response = await call.read()
        except grpc.RpcError as exc:
            raise gexc.from_grpc_error(exc) from exc
        return None if response is grpc.aio.EOF else response

    async def insert_if_absent(self, record: RunRecord) -> Version | None:
        request, write_pb = self._write(record, _FIELDS)
        write_pb.current_document.exists = False
        try:
            return await self._commit("create", request, _CREATE_REFUSED)
        except _CREATE_REFUSED:
            return None

    async def replace_if_version(
        self, record: RunRecord, version: Version, changed: tuple[str, ...] | None = None
    ) -> Version | None:
        names = _FIELDS if changed is None else changed  # a smaller write: only what the operation changes
        request, write_pb = self._write(record, names)
        write_pb.update_mask.field_paths.extend(sorted(names))
        write_pb.current_document.update_time.CopyFrom(version)
        try:
            return await self._commit("update", request, _UPDATE_REFUSED)
        except _UPDATE_REFUSED:
            return None

    # -- the rest of RunStore ------------------------------------------------------------------

    async def list(
        self, now: datetime, route: str | None = None, status: RunStatus | None = None, limit: int = 50
    ) -> list[RunRecord]:
        """Newest first, `limit` at a time, through a composite index on the filtered fields and
        `created_at` descending (INDEXES; the emulator needs none). Expired documents the TTL has not
        deleted yet are dropped here; they are the oldest, so a page ending in one ends the list."""
        query: Any = self._collection
        if route is not None:
            query = query.where(filter=firestore.FieldFilter("route", "==", route))
        if status is not None:
            query = query.where(filter=firestore.FieldFilter("status", "==", status))
        if time.monotonic() < self._unindexed_until:
            return await self._list_unordered(query, now, limit)
        ordered = query.order_by("created_at", direction=firestore.Query.DESCENDING).limit(limit)
        found: list[RunRecord] = []
        page = ordered
        while True:
            try:
                snaps = await self._rpc("query", page.get())
            except StoreUnavailable as exc:
                if not isinstance(exc.__cause__, gexc.FailedPrecondition) or "index" not in str(exc):
                    raise
                # A collection whose composite indexes are not built yet (`runonce store init` says
                # how): read as before, every record of the filter, and try the index again later.
                self._unindexed_until = time.monotonic() + RETRY_INDEX_SECONDS
                logger.warning("firestore list needs a composite index, reading without it: %s", exc)
                return await self._list_unordered(query, now, limit)
            records = [_from_doc(snap.to_dict()) for snap in snaps]
            self.documents_read += len(records)
            found.extend(r for r in records if r.expire_at > now)
            if len(found) >= limit or len(records) < limit or records[-1].expire_at <= now:
                return found[:limit]
            page = ordered.start_after(snaps[-1])

    async def _list_unordered(self, query: Any, now: datetime, limit: int) -> Records:
        """Every record of the equality filters, sorted here: what needs no composite index."""
        snaps = await self._rpc("query", query.get())
        self.documents_read += len(snaps)
        live_records = [r for r in (_from_doc(snap.to_dict()) for snap in snaps) if r.expire_at > now]
        return sorted(live_records, key=lambda r: r.created_at, reverse=True)[:limit]

    async def get_many(self, run_ids: Iterable[str], now: datetime) -> dict[str, RunRecord]:
        """One BatchGetDocuments per GET_MANY_BATCH run_ids."""
        found: dict[str, RunRecord] = {}
        for batch in chunks(list(dict.fromkeys(run_ids)), GET_MANY_BATCH):
            request = _BatchGetRequest(database=self._database, documents=[self._documents + r for r in batch])
            responses = await self._rpc("get_many", self._read_all(request))
            self.documents_read += sum(1 for response in responses if response.HasField("found"))
            records = (
                _from_doc(cast("dict[str, Any]", _helpers.decode_dict(response.found.fields, self._client)))
                for response in responses
                if response.HasField("found")
            )
            found.update(live(records, now))
        return found

    async def _read_all(self, request: Any) -> Sequence[Any]:
        call = await self._batch_get_call(request)
        try:
            return [response async for response in call]
        except grpc.RpcError as exc:
            raise gexc.from_grpc_error(exc) from exc

    async def ping(self) -> None:
        # A read of a document that never exists: proves reachability and permission.
        await self._rpc("get", self._collection.document("_runonce_readyz").get())

    async def close(self) -> None:
        # AsyncClient has no close(); its gRPC channel lives on the lazily built GAPIC client.
        api = self._client._firestore_api_internal
        if api is not None:
            await api.transport.close()


# -- record <-> document -------------------------------------------------------------------------


def _encode(value_pb: Any, value: Any) -> None:
    """Set a Value protobuf to `value` as google-cloud-firestore's `encode_value` does; the record's
    own types directly, anything else through `encode_value` itself."""
    if value is None:
        value_pb.null_value = 0
    elif (
        type(value) is str
    ):  # pragma: no mutate - encode_value (below) writes the same Value: this branch only saves CPU
        value_pb.string_value = value
    elif (
        type(value) is int
    ):  # pragma: no mutate - encode_value (below) writes the same Value: this branch only saves CPU
        value_pb.integer_value = value
    elif (
        type(value) is datetime
    ):  # pragma: no mutate - encode_value (below) writes the same Value: this branch only saves CPU
        value_pb.timestamp_value.CopyFrom(_datetime_to_pb_timestamp(value))
    elif (
        type(value) is dict
    ):  # pragma: no mutate - encode_value (below) writes the same Value: this branch only saves CPU
        value_pb.map_value.SetInParent()  # an empty map is still a map
        entries = value_pb.map_value.fields
        for key, item in value.items():
            _encode(entries[key], item)
    else:
        value_pb.CopyFrom(_helpers.encode_value(value)._pb)


def _from_doc(doc: dict[str, Any] | None) -> RunRecord:
    assert doc is not None
    values = dict(doc)
    for name in ("lease_expires", "expire_at", "created_at", "updated_at"):
        # DatetimeWithNanoseconds -> plain datetime, so records compare equal across stores
        value = values[name]
        values[name] = datetime(
            value.year, value.month, value.day, value.hour, value.minute, value.second, value.microsecond, tzinfo=UTC
        )
    return RunRecord(**values)
