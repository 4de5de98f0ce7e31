"""The Firestore store's hot calls go out as raw protobuf (runonce/stores/firestore.py): they must be the
very requests google-cloud-firestore's document API sends for the same record, with the same
metadata (routing, resource prefix, auth on the emulator), and fail and retry as it does.

A gRPC server stands where Firestore would (FIRESTORE_EMULATOR_HOST) and records what each client
sends; both the store and the library's own `DocumentReference` talk to it, and what they sent is
compared message for message. The emulator-backed tests (test_stores.py, test_store_backends.py)
show the records round-trip; these show nothing else changed on the wire. They need no emulator,
so the mutation run (which leaves out tests named for Firestore) runs them against firestore.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import grpc
import httpx
import pytest
from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.types import document as document_types
from google.cloud.firestore_v1.types import write as write_types

from runonce.api.main import create_app
from runonce.settings import Settings
from runonce.stores import Finish, StoreUnavailable
from runonce.stores.base import COMPLETED, FINISH_FIELDS, RELEASE_FIELDS, finished_record, fresh_record
from runonce.stores.firestore import (
    FirestoreStore,
)
from runonce.stores.firestore import (
    _BatchGetRequest as BatchGetRequest,
)
from runonce.stores.firestore import (
    _BatchGetResponse as BatchGetResponse,
)
from runonce.stores.firestore import (
    _CommitRequest as CommitRequest,
)
from runonce.stores.firestore import (
    _CommitResponse as CommitResponse,
)
from runonce.targets.scripted import ScriptedTarget
from tests.support.api import JOB, ROUTES
from tests.support.procs import free_port
from tests.support.runs import LEASE, RETENTION, T0, new_run
from tests.support.stores import FIRESTORE_PROJECT

WriteResult = write_types.WriteResult.pb()
Document = document_types.Document.pb()
COLLECTION = "runs"


@dataclass
class Call:
    method: str
    request: Any
    metadata: list[tuple[str, str]]
    deadline: float  # seconds the client gave the call


@dataclass
class FirestoreStandIn:
    """Answers Commit with an update time and BatchGetDocuments with `found` (or `missing`), or
    fails with `fail` (`fail_streaming`: after the stream's headers); records every call, parsed."""

    calls: list[Call] = field(default_factory=list)
    found: Any = None
    fail: grpc.StatusCode | None = None
    fail_message: str = ""  # default: "<CODE> from the stand-in"
    fail_streaming: bool = False
    empty_stream: bool = False

    async def abort(self, context: grpc.aio.ServicerContext) -> None:
        assert self.fail is not None
        await context.abort(self.fail, self.fail_message or f"{self.fail.name} from the stand-in")

    def record(self, method: str, request: Any, context: grpc.aio.ServicerContext) -> None:
        metadata = sorted((k, v) for k, v in context.invocation_metadata() if k != "grpc-accept-encoding")
        self.calls.append(Call(method, request, metadata, context.time_remaining()))

    async def commit(self, raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        self.record("Commit", CommitRequest.FromString(raw), context)
        if self.fail is not None:
            await self.abort(context)
        result = WriteResult()
        result.update_time.FromSeconds(1_800_000_000)
        result.update_time.nanos = 123_456_789  # nanoseconds survive the version's round trip
        return CommitResponse(write_results=[result], commit_time=result.update_time).SerializeToString()

    async def batch_get(self, raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        request = BatchGetRequest.FromString(raw)
        self.record("BatchGetDocuments", request, context)
        if self.fail is not None:
            if self.fail_streaming:  # headers first, and time for the client to see them before the error
                await context.send_initial_metadata(())
                await asyncio.sleep(0.2)
            await self.abort(context)
        if self.empty_stream:
            return
        response = BatchGetResponse()
        response.read_time.FromSeconds(1_900_000_000)
        if self.found is not None:
            response.found.CopyFrom(self.found)
        else:
            response.missing = request.documents[0]
        yield response.SerializeToString()


@pytest.fixture
async def stand_in(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FirestoreStandIn]:
    service = FirestoreStandIn()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "google.firestore.v1.Firestore",
                {
                    "Commit": grpc.unary_unary_rpc_method_handler(service.commit),
                    "BatchGetDocuments": grpc.unary_stream_rpc_method_handler(service.batch_get),
                },
            )
        ]
    )
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{port}")
    yield service
    await server.stop(None)


@pytest.fixture(params=["(default)", "runs-db"])
async def clients(
    stand_in: FirestoreStandIn, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[FirestoreStore, Any]]:
    """The store, and the library's client, on the same database (the default or a named one)."""
    store = FirestoreStore(project=FIRESTORE_PROJECT, database=request.param, collection=COLLECTION, timeout_seconds=5)
    library = firestore.AsyncClient(project=FIRESTORE_PROJECT, database=request.param)
    yield store, library
    await store.close()
    await library._firestore_api.transport.close()


def assert_same_call(stand_in: FirestoreStandIn) -> Call:
    """The last two calls (the store's, then the library's) are one and the same; the store's."""
    ours, theirs = stand_in.calls[-2:]
    assert ours.method == theirs.method
    assert ours.request == theirs.request, f"\nstore:   {ours.request}\nlibrary: {theirs.request}"
    assert ours.metadata == theirs.metadata
    assert abs(ours.deadline - theirs.deadline) < 5, (ours.deadline, theirs.deadline)  # the GAPIC's 60 s / 300 s
    return ours


async def test_writes_are_the_document_apis_create_and_update(stand_in, clients) -> None:
    store, library = clients
    ref = library.collection(COLLECTION)
    record = fresh_record(new_run(), T0, LEASE, RETENTION)

    version = await store.insert_if_absent(record)
    result = await ref.document(record.run_id).create(record.as_dict())
    assert assert_same_call(stand_in).request.writes[0].current_document.exists is False
    assert version is not None and version.nanos == 123_456_789  # the write's update time, exactly

    for changed, finish in (
        (FINISH_FIELDS, Finish(COMPLETED, target={"type": "log", "resource": "x"})),
        (FINISH_FIELDS, Finish(COMPLETED, target={})),
        # whatever an adapter puts in `target` is written as the library would
        (FINISH_FIELDS, Finish(COMPLETED, target={"n": 1, "ok": True, "f": 0.5, "l": ["a"]})),  # type: ignore[dict-item]
        (RELEASE_FIELDS, Finish("in_progress")),
        (None, Finish("failed", last_error="boom")),
    ):
        written = finished_record(record, finish, T0)
        new_version = await store.replace_if_version(written, version, changed)
        doc = written.as_dict()
        update = doc if changed is None else {name: doc[name] for name in changed}
        await ref.document(record.run_id).update(
            update, option=library.write_option(last_update_time=result.update_time)
        )
        ours = assert_same_call(stand_in)
        assert ours.request.writes[0].current_document.update_time == version  # the precondition
        assert new_version == version  # the stand-in's update time, which never moves
    assert store.round_trips == {"create": 1, "update": 5}


async def test_reads_are_the_document_apis_get(stand_in, clients) -> None:
    store, library = clients
    ref = library.collection(COLLECTION)
    now = T0 + timedelta(microseconds=123_456)  # microseconds survive the round trip
    record = finished_record(
        fresh_record(new_run(), now, LEASE, RETENTION), Finish(COMPLETED, target={"type": "log", "resource": "x"}), now
    )

    assert await store.load(record.run_id) is None
    assert not (await ref.document(record.run_id).get()).exists
    assert_same_call(stand_in)

    await store.insert_if_absent(record)
    stored = Document()
    stored.CopyFrom(stand_in.calls[-1].request.writes[0].update)  # what a create wrote
    stored.update_time.FromSeconds(1_800_000_000)
    stored.update_time.nanos = 999_999_999
    stored.create_time.CopyFrom(stored.update_time)
    stand_in.found = stored

    loaded = await store.load(record.run_id)
    snap = await ref.document(record.run_id).get()
    assert_same_call(stand_in)
    assert loaded is not None and loaded[0] == record  # the record round-trips, timestamps included
    assert {type(loaded[0].created_at)} == {datetime}  # plain datetimes, as every store's records
    assert loaded[1] == snap.update_time.timestamp_pb()  # the version: the update time, to the nanosecond

    stand_in.empty_stream = True  # an answer without the document: none found, as the library says
    assert await store.load(record.run_id) is None
    assert not (await ref.document(record.run_id).get()).exists
    assert store.round_trips == {"get": 3, "create": 1}


async def test_the_default_collection_is_runonce_runs(stand_in) -> None:
    store = FirestoreStore(project=FIRESTORE_PROJECT)
    try:
        await store.load("a" * 64)
        assert stand_in.calls[0].request.documents == [
            f"projects/{FIRESTORE_PROJECT}/databases/(default)/documents/runonce_runs/{'a' * 64}"
        ]
    finally:
        await store.close()


async def test_a_store_that_made_no_call_closes(stand_in) -> None:
    """`runonce serve` stopped before any delivery: its client never built a channel to close."""
    await FirestoreStore(project=FIRESTORE_PROJECT).close()


async def test_closing_the_store_closes_its_channel(stand_in) -> None:
    store = FirestoreStore(project=FIRESTORE_PROJECT)
    await store.load("a" * 64)
    channel = store._client._firestore_api.transport.grpc_channel
    await store.close()
    with pytest.raises(grpc.aio.UsageError, match="closed"):
        await channel.unary_unary("/google.firestore.v1.Firestore/Commit")(b"")


def unavailable_message(op: str, code: grpc.StatusCode) -> str:
    error = gexc.exception_class_for_grpc_status(code)
    return f"firestore {op}: {error.__name__}: {error.code} {code.name} from the stand-in"


REFUSALS = {
    "create": {grpc.StatusCode.ALREADY_EXISTS},
    "update": {grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND},
}


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.INTERNAL,
    ],
)
async def test_a_write_refused_is_a_lost_race_or_unavailable_at_once(stand_in, clients, code) -> None:
    """AlreadyExists to a create, FailedPrecondition / NotFound to an update: the record is not as
    read, so the protocol reads again. Anything else, those codes to the other write included, is
    the store failing: one attempt, no retry, the server's reason in the message (a Datastore-mode
    database answers every create FailedPrecondition; a missing database, NotFound)."""
    store, _ = clients
    record = fresh_record(new_run(), T0, LEASE, RETENTION)
    version = await store.insert_if_absent(record)
    stand_in.fail = code
    for op, write in (
        ("create", lambda: store.insert_if_absent(record)),
        ("update", lambda: store.replace_if_version(record, version, FINISH_FIELDS)),
    ):
        stand_in.calls[:] = []
        if code in REFUSALS[op]:
            assert await write() is None
        else:
            with pytest.raises(StoreUnavailable) as unavailable:
                await write()
            assert str(unavailable.value) == unavailable_message(op, code)
        assert [call.method for call in stand_in.calls] == ["Commit"]  # once: not retried


@pytest.mark.parametrize(
    "code", [grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ALREADY_EXISTS]
)
async def test_a_read_refused_is_the_store_failing(stand_in, clients, code) -> None:
    """A read has no refusal in the protocol (a missing record is `missing`, not an error): these
    codes come from the database itself (none, or in Datastore mode), and the delivery and
    /readyz must say so as the store being unavailable, not fail with an unexpected error."""
    store, _ = clients
    stand_in.fail = code
    for read in (lambda: store.load("a" * 64), store.ping):
        stand_in.calls[:] = []
        with pytest.raises(StoreUnavailable) as unavailable:
            await read()
        assert str(unavailable.value) == unavailable_message("get", code)
        assert [call.method for call in stand_in.calls] == ["BatchGetDocuments"]


DATASTORE_MODE = (
    "The Cloud Firestore API is not available for Firestore in Datastore Mode database "
    f"projects/{FIRESTORE_PROJECT}/databases/(default)."
)


async def test_a_database_in_datastore_mode_answers_deliveries_and_readyz_503_with_its_reason(stand_in) -> None:
    """What a user pointing runonce at a Datastore-mode database sees: Scheduler is told to retry
    (503, nothing dispatched) and the operator reads Firestore's own reason, not an internal error."""
    stand_in.fail, stand_in.fail_message = grpc.StatusCode.FAILED_PRECONDITION, DATASTORE_MODE
    store = FirestoreStore(project=FIRESTORE_PROJECT, collection=COLLECTION, timeout_seconds=5)
    target = ScriptedTarget()
    settings = Settings(routes=ROUTES, auth="none", store="firestore")
    app = create_app(settings, store=store, targets={"etl": target, "bare": target})
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runonce") as client,
    ):
        delivered = await client.post("/v1/routes/etl:run", headers=JOB)
        ready = await client.get("/readyz")
    assert delivered.status_code == 503 and delivered.json()["status"] == "unavailable"
    assert DATASTORE_MODE in delivered.json()["error"]["message"]
    assert ready.status_code == 503 and ready.json() == {"status": "unavailable"}  # the reason is in the log
    assert target.dispatched == [] and target.reconciled == []


async def attempts(stand_in: FirestoreStandIn, call: Any) -> int:
    """How often `call` reached the server before it gave up or made a third attempt."""
    stand_in.calls[:] = []
    task = asyncio.ensure_future(call)
    for _ in range(500):
        if task.done() or len(stand_in.calls) > 2:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return len(stand_in.calls)


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.PERMISSION_DENIED,
    ],
)
async def test_what_is_retried_is_what_the_library_retries(stand_in, clients, code) -> None:
    """Commit retries UNAVAILABLE and RESOURCE_EXHAUSTED; BatchGetDocuments UNAVAILABLE, INTERNAL and
    DEADLINE_EXCEEDED (the GAPIC's policies), until the store's own deadline."""
    store, library = clients
    ref = library.collection(COLLECTION)
    record = fresh_record(new_run(), T0, LEASE, RETENTION)
    stand_in.fail = code
    for method, ours, theirs in (
        ("Commit", store.insert_if_absent(record), ref.document(record.run_id).create(record.as_dict())),
        ("BatchGetDocuments", store.load(record.run_id), ref.document(record.run_id).get()),
    ):
        ours_attempts, their_attempts = await attempts(stand_in, ours), await attempts(stand_in, theirs)
        assert (ours_attempts > 1) == (their_attempts > 1), (method, ours_attempts, their_attempts)
        assert ours_attempts >= 1 and {c.method for c in stand_in.calls} == {method}


async def test_a_read_failing_in_its_stream_is_unavailable_at_once(stand_in, clients) -> None:
    """Once the stream has started, the library's retry no longer sees its errors, nor does ours."""
    store, _ = clients
    stand_in.fail, stand_in.fail_streaming = grpc.StatusCode.UNAVAILABLE, True
    with pytest.raises(StoreUnavailable) as unavailable:
        await store.load("a" * 64)
    assert str(unavailable.value) == unavailable_message("get", grpc.StatusCode.UNAVAILABLE)
    assert len(stand_in.calls) == 1


async def test_retries_end_at_the_stores_own_deadline(stand_in) -> None:
    store = FirestoreStore(project=FIRESTORE_PROJECT, collection=COLLECTION, timeout_seconds=0.3)
    stand_in.fail = grpc.StatusCode.UNAVAILABLE
    try:
        for write in (store.insert_if_absent(fresh_record(new_run(), T0, LEASE, RETENTION)), store.load("a" * 64)):
            with pytest.raises(StoreUnavailable) as unavailable:
                await asyncio.wait_for(write, 10)  # the client alone would retry for a minute or more
            assert isinstance(unavailable.value.__cause__, TimeoutError)
        assert len(stand_in.calls) > 2
    finally:
        await store.close()
