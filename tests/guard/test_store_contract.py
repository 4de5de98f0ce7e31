"""One contract for every step store: the claim protocol of stores/base.py over each backend's three
primitives, on the real Firestore and Spanner emulators and a real redis-server."""

from __future__ import annotations

import functools
import threading
import uuid
from datetime import timedelta

import pytest

from runonce_guard import Fenced, GuardSettings, StepKey
from runonce_guard.rules import Decision
from runonce_guard.stores import StepStore, build_store
from runonce_guard.stores.firestore import FirestoreStepStore
from runonce_guard.stores.memory import MemoryStepStore
from tests.support.clock import Clock
from tests.support.stores import FIRESTORE_PROJECT, guard_spanner_url, redis_url

LEASE, RETENTION = timedelta(seconds=300), timedelta(days=1)


GUARD_STORES = ["memory", "firestore", "spanner", "redis"]


@pytest.fixture(params=[False, True], ids=["create-first", "read-first"])
def read_first(request: pytest.FixtureRequest) -> bool:
    """Both ways into a claim (a first attempt creates at once, a retry reads first) decide alike."""
    return bool(request.param)


@pytest.fixture(params=GUARD_STORES)
def make_store(request: pytest.FixtureRequest, read_first: bool):
    """Handles on ONE underlying store, as separate processes would have."""
    opened: list[StepStore] = []
    shared = MemoryStepStore()
    collection = f"steps_{uuid.uuid4().hex[:12]}"
    url = None
    if request.param == "firestore":
        request.getfixturevalue("firestore_emulator")
    elif request.param == "spanner":
        url = guard_spanner_url(request.getfixturevalue("spanner_database"))
    elif request.param == "redis":
        url = redis_url(request.getfixturevalue("redis_server"))

    def make() -> StepStore:
        store: StepStore
        if request.param == "memory":
            store = shared
        elif request.param == "firestore":
            store = FirestoreStepStore(project=FIRESTORE_PROJECT, collection=collection, timeout_seconds=30)
        else:
            # The Spanner emulator runs one transaction at a time: racing claims queue.
            store = build_store(GuardSettings.from_env({"RUNONCE_STORE": url, "RUNONCE_STORE_TIMEOUT_SECONDS": "60"}))
        opened.append(store)
        if read_first and not isinstance(store.claim, functools.partial):
            store.claim = functools.partial(store.claim, read_first=True)  # type: ignore[method-assign]
        return store

    yield make
    for store in opened:
        store.close()


def test_claim_busy_finish_replay(make_store) -> None:
    clock, key = Clock(), StepKey("run-1", "export", "0")
    a, b = make_store(), make_store()
    first = a.claim(key, clock(), LEASE, RETENTION, "attempt-a")
    assert first.decision is Decision.CREATE and first.record.holder == "attempt-a"
    busy = b.claim(key, clock(), LEASE, RETENTION, "attempt-b")
    assert busy.decision is Decision.BUSY and busy.record == first.record
    done = a.finish(first, "completed", clock(), result='{"rows":3}')
    replay = b.claim(key, clock(), LEASE, RETENTION)
    assert replay.decision is Decision.REPLAY and replay.record == done and replay.record.result_value() == {"rows": 3}


def test_takeover_after_the_lease_fences_the_old_attempt(make_store) -> None:
    clock, key = Clock(), StepKey("run-1", "export", "0")
    a, b = make_store(), make_store()
    old = a.claim(key, clock(), LEASE, RETENTION)
    clock.advance(LEASE.total_seconds())  # the lease ends exactly now: claimable
    new = b.claim(key, clock(), LEASE, RETENTION)
    assert new.decision is Decision.TAKEOVER and new.previous == old.record and new.record.attempts == 2
    with pytest.raises(Fenced):
        a.finish(old, "completed", clock())
    with pytest.raises(Fenced):
        a.finish(old, "failed", clock(), last_error="late")
    assert b.finish(new, "completed", clock()).status == "completed"


def test_failed_is_claimable_at_once_and_expired_counts_as_absent(make_store) -> None:
    clock, key = Clock(), StepKey("run-1", "export", "-")
    store = make_store()
    store.finish(store.claim(key, clock(), LEASE, RETENTION), "failed", clock(), last_error="boom")
    retry = store.claim(key, clock(), LEASE, RETENTION)
    assert retry.decision is Decision.TAKEOVER and retry.record.last_error == "boom"
    store.finish(retry, "completed", clock())
    clock.advance(RETENTION.total_seconds())
    assert store.get(key, clock()) is None
    assert store.claim(key, clock(), LEASE, RETENTION).decision is Decision.CREATE  # a fresh record, attempts 1


def test_of_simultaneous_claims_one_wins(make_store) -> None:
    clock, key = Clock(), StepKey("run-1", "export", "0")
    stores = [make_store() for _ in range(4)]
    decisions: list[Decision] = []
    barrier = threading.Barrier(16)

    def claim(index: int) -> None:
        barrier.wait()
        decisions.append(stores[index % 4].claim(key, clock(), LEASE, RETENTION).decision)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(d.name for d in decisions) == ["BUSY"] * 15 + ["CREATE"]


class CountingStore(MemoryStepStore):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def insert_if_absent(self, record):  # type: ignore[no-untyped-def]
        self.calls.append("create")
        return super().insert_if_absent(record)

    def load(self, key):  # type: ignore[no-untyped-def]
        self.calls.append("read")
        return super().load(key)

    def replace_if_version(self, record, version, changed=None):  # type: ignore[no-untyped-def]
        self.calls.append("write")
        return super().replace_if_version(record, version, changed)


def test_a_retry_replays_a_done_step_in_one_read_and_a_first_attempt_creates_in_one_write() -> None:
    clock, key = Clock(), StepKey("run-1", "export", "0")
    store = CountingStore()
    first = store.claim(key, clock(), LEASE, RETENTION)
    assert store.calls == ["create"]
    store.finish(first, "completed", clock())
    store.calls.clear()
    assert store.claim(key, clock(), LEASE, RETENTION, read_first=True).decision is Decision.REPLAY
    assert store.calls == ["read"]
    store.calls.clear()
    assert store.claim(key, clock(), LEASE, RETENTION).decision is Decision.REPLAY
    assert store.calls == ["create", "read"]  # without the hint: a refused create, then the read
    fresh = StepKey("run-1", "load", "0")
    store.calls.clear()
    assert store.claim(fresh, clock(), LEASE, RETENTION, read_first=True).decision is Decision.CREATE
    assert store.calls == ["read", "create"]


def test_a_cloud_run_task_retry_reads_first() -> None:
    """`once` on attempt 1 of a task (CLOUD_RUN_TASK_ATTEMPT=1) replays a done step with one read."""
    from runonce_guard import Guard, GuardSettings

    store = CountingStore()
    env = {"IDEMPOTENCY_KEY": "a" * 64, "CLOUD_RUN_TASK_INDEX": "0", "CLOUD_RUN_TASK_ATTEMPT": "0"}
    ran: list[str] = []
    Guard(store, GuardSettings(), environ=env).once("export")(lambda: ran.append("first"))()
    store.calls.clear()
    retry = Guard(store, GuardSettings(), environ=env | {"CLOUD_RUN_TASK_ATTEMPT": "1"})
    retry.once("export")(lambda: ran.append("retry"))()
    assert ran == ["first"] and store.calls == ["read"]
