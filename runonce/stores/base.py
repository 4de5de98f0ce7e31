"""The run record, the claim rules, and the interface every claim store implements.

The rules live here once (`decide`, `fresh_record`, `takeover_record`), and so does the protocol
that applies them (`RunStore.claim`, `finish`, `release`): read what is there, `decide`, write
conditionally on what was read. A backend implements three primitives (see `RunStore`).

Time windows of one run (a store never compares anything else):

    created_at            lease_expires                         expire_at = created_at + retention
        |--- lease live: other attempts get 409 ---|--- claimable: takeover (+ reconcile) ---|--- absent
        ^ claim (in_progress)                                                                 ^ TTL may delete

A `failed` record is claimable at once; a `completed` (or `skipped`) one is replayed until `expire_at`.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from runonce.errors import RunonceError

RunStatus = Literal["in_progress", "completed", "failed", "skipped"]
IN_PROGRESS: RunStatus = "in_progress"
COMPLETED: RunStatus = "completed"
FAILED: RunStatus = "failed"
SKIPPED: RunStatus = "skipped"
"""Terminal like completed, with nothing dispatched (late, or the previous run still running:
runonce/run/guarantees.py); `last_error` holds `REASON: text`."""


class StoreError(RunonceError):
    """Base of claim-store errors."""


class StoreUnavailable(StoreError):
    """The store could not be reached or did not answer in time; nothing is known to have changed."""


class Fenced(StoreError):
    """A finish was refused: the run is no longer held by this attempt (another attempt took over)."""

    def __init__(self, found: RunRecord | None):
        self.found = found
        holder = f"attempt {found.attempt_id} ({found.status})" if found else "no record"
        super().__init__(f"run is now held by {holder}")


@dataclass(frozen=True)
class NewRun:
    """What one delivery asks to claim: the identity of the run and what it carries."""

    run_id: str
    route: str
    source: str
    project: str
    location: str
    job: str
    schedule_time: str | None
    task: str | None
    body_sha256: str
    task_retry_count: int | None = None  # Cloud Tasks' X-CloudTasks-Task*Count of this delivery
    task_execution_count: int | None = None


@dataclass(frozen=True)
class RunRecord:
    """One record per run_id, the same in every store (field names are part of the contract)."""

    run_id: str
    status: RunStatus
    attempt_id: str
    attempts: int
    lease_expires: datetime
    expire_at: datetime
    created_at: datetime
    updated_at: datetime
    route: str
    source: str
    project: str
    location: str
    job: str
    schedule_time: str | None
    task: str | None
    body_sha256: str
    target: dict[str, str] | None = None
    last_error: str | None = None
    task_retry_count: int | None = None  # Cloud Tasks' counters of the delivery that claimed last
    task_execution_count: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> dict[str, Any]:
        """The record as the API and CLI show it: timestamps in RFC 3339 UTC."""
        return {k: (rfc3339(v) if isinstance(v, datetime) else v) for k, v in self.as_dict().items()}


def rfc3339(value: datetime) -> str:
    """`2026-10-16T12:00:00.123456Z`: UTC, microseconds, fixed width (so text sorts as time)."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Decision(enum.Enum):
    """What a claim found, decided by `decide` from the stored record alone."""

    CREATE = "create"  # nothing there (or an expired record): create a fresh record
    TAKEOVER = "takeover"  # failed, or its lease expired: replace it with a new attempt
    REPLAY = "replay"  # completed or skipped: answer with the stored result
    BUSY = "busy"  # another attempt holds a live lease
    MISMATCH = "mismatch"  # same run_id, different body


def decide(found: RunRecord | None, new: NewRun, now: datetime) -> Decision:
    """The claim rules, in order. Expired records count as absent (TTL deletion lags)."""
    if found is None or found.expire_at <= now:
        return Decision.CREATE
    if found.body_sha256 != new.body_sha256:
        return Decision.MISMATCH
    if found.status in (COMPLETED, SKIPPED):
        return Decision.REPLAY
    if found.status == IN_PROGRESS and found.lease_expires > now:
        return Decision.BUSY
    return Decision.TAKEOVER


def new_attempt_id() -> str:
    return uuid.uuid4().hex


def fresh_record(new: NewRun, now: datetime, lease: timedelta, retention: timedelta) -> RunRecord:
    return RunRecord(
        run_id=new.run_id,
        status=IN_PROGRESS,
        attempt_id=new_attempt_id(),
        attempts=1,
        lease_expires=now + lease,
        expire_at=now + retention,
        created_at=now,
        updated_at=now,
        route=new.route,
        source=new.source,
        project=new.project,
        location=new.location,
        job=new.job,
        schedule_time=new.schedule_time,
        task=new.task,
        body_sha256=new.body_sha256,
        task_retry_count=new.task_retry_count,
        task_execution_count=new.task_execution_count,
    )


def takeover_record(found: RunRecord, now: datetime, lease: timedelta, new: NewRun | None = None) -> RunRecord:
    """A new attempt on an existing run: keeps identity, history and `target`, fences the old one
    (and records the Cloud Tasks counters of the delivery that took over)."""
    return replace(
        found,
        status=IN_PROGRESS,
        attempt_id=new_attempt_id(),
        attempts=found.attempts + 1,
        lease_expires=now + lease,
        updated_at=now,
        task_retry_count=new.task_retry_count if new is not None else found.task_retry_count,
        task_execution_count=new.task_execution_count if new is not None else found.task_execution_count,
    )


def claimed_record(
    found: RunRecord | None,
    decision: Decision,
    new: NewRun,
    now: datetime,
    lease: timedelta,
    retention: timedelta,
) -> RunRecord:
    """The record a store writes for a CREATE or TAKEOVER decision."""
    if decision is Decision.CREATE:
        return fresh_record(new, now, lease, retention)
    assert (
        found is not None and decision is Decision.TAKEOVER
    )  # pragma: no mutate - an assertion of what claimed_record's callers guarantee
    return takeover_record(found, now, lease, new)


Version = Any
"""A store's opaque token for one state of a record (Firestore: the document's update time; SQLite
and Spanner: the record itself). Only the store that issued it interprets it."""


@dataclass(frozen=True)
class Claim:
    """The answer to a claim.

    `decision` CREATE or TAKEOVER: this attempt holds the run; `record` is what was written and
    `previous` what it replaced (an in_progress `previous` means an earlier attempt may have created
    an execution: reconcile first). Otherwise `record` is the record found, unchanged.
    `version` is the store's token for the state it wrote (see `Version`): `finish` writes on it
    without a read first. None when unknown: `finish` reads.
    """

    decision: Decision
    record: RunRecord
    previous: RunRecord | None = None
    version: Version = field(default=None, compare=False, repr=False)

    @property
    def won(self) -> bool:
        return self.decision in (Decision.CREATE, Decision.TAKEOVER)


@dataclass(frozen=True)
class Finish:
    """How an attempt ends. `status` in_progress keeps the claim (outcome unknown)."""

    status: RunStatus
    target: dict[str, str] | None = None
    last_error: str | None = None


def holds(found: RunRecord | None, claim: Claim) -> bool:
    """Fencing: may `claim` still write its outcome over `found`?"""
    return found is not None and found.attempt_id == claim.record.attempt_id and found.status == IN_PROGRESS


def releasable(found: RunRecord | None, now: datetime) -> bool:
    """An admin release applies only to a live lease on an unexpired in_progress run."""
    return found is not None and found.expire_at > now and found.status == IN_PROGRESS and found.lease_expires > now


def finished_record(held: RunRecord, finish: Finish, now: datetime) -> RunRecord:
    return replace(
        held,
        status=finish.status,
        # held.target is always None here: only completed records have a target, and they are never held
        target=finish.target if finish.target is not None else held.target,  # pragma: no mutate
        last_error=finish.last_error,
        updated_at=now,
    )


# A conditional write loses only when another writer succeeded in between (or our own write's
# answer was lost); this bounds a pathological livelock, after which the store counts as unavailable.
MAX_RACES = 20

# What each write changes: a store may write only these fields (Firestore does: a smaller write).
FINISH_FIELDS = ("status", "target", "last_error", "updated_at")
RELEASE_FIELDS = ("lease_expires", "updated_at")

GET_MANY_CONCURRENCY = 16
"""Reads in flight at once in `RunStore.get_many`'s default (one `get` each)."""
GET_MANY_BATCH = 500
"""Most run_ids one batch read asks for (Firestore's BatchGet and a Redis MGET take this many
comfortably; SQLite's bound-parameter limit is 32,766)."""


Records = list[RunRecord]
"""A list of records (the name `list` is a method of every store)."""


def live(records: Iterable[RunRecord], now: datetime) -> dict[str, RunRecord]:
    """`records` that have not expired, by run_id: what `get_many` returns of a batch read."""
    return {record.run_id: record for record in records if record.expire_at > now}


def chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    """`items` in slices of at most `size`, in order."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


class RunStore(ABC):
    """A claim store. Every method takes `now` so tests drive the clock.

    The claim protocol is written once, here, over three primitives a backend implements:

        load(run_id)                        -> (record, version) | None
        insert_if_absent(record)            -> version | None (None: a record exists)
        replace_if_version(record, version) -> version | None (None: it is no longer at `version`)

    claim:   insert_if_absent(fresh)   -> we hold a fresh run in one write
             else load, decide, replace_if_version; a lost race is decided again from a new load
    finish:  replace_if_version(finished, claim.version); on a lost race load: still ours -> again,
             else Fenced
    release: load, releasable, replace_if_version

    Each primitive is one atomic step of the backend, so the result is that of a serializable
    transaction: of any number of concurrent claims at most one wins. A write of ours whose answer
    was lost (a client that resent it sees AlreadyExists / a changed version) is recognised on the
    next load: by attempt_id for a claim, by the record being exactly what we wrote for finish and
    release. A backend whose engine does a whole operation in one round trip may override it
    (Redis: one Lua script each), held to the same conformance suite.

    Methods raise `StoreUnavailable` when the backend cannot be reached or times out.
    """

    # -- primitives -------------------------------------------------------------------------------

    @abstractmethod
    async def load(self, run_id: str) -> tuple[RunRecord, Version] | None:
        """The stored record (expired or not) and its version, or None when there is none."""

    async def insert_if_absent(self, record: RunRecord) -> Version | None:
        """Write `record` unless a record with its run_id exists; its version, or None if one does."""
        raise NotImplementedError(f"{type(self).__name__} must implement insert_if_absent, or override claim")

    async def replace_if_version(
        self, record: RunRecord, version: Version, changed: tuple[str, ...] | None = None
    ) -> Version | None:
        """Write `record` over the stored one if that is still at `version`; the new version, or
        None when it moved on or is gone. `changed`: the only fields that differ (a hint)."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement replace_if_version, or override claim, finish and release"
        )

    @abstractmethod
    async def list(
        self, now: datetime, route: str | None = None, status: RunStatus | None = None, limit: int = 50
    ) -> list[RunRecord]:
        """Unexpired records, newest first."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise `StoreUnavailable` unless the store answers."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    # -- the protocol, once -----------------------------------------------------------------------

    async def claim(self, new: NewRun, now: datetime, lease: timedelta, retention: timedelta) -> Claim:
        """Atomically apply `decide` to the stored record and, on CREATE/TAKEOVER, write the claim.

        Of any number of simultaneous claims of one run_id, in this process and others, at most
        one wins."""
        record = fresh_record(new, now, lease, retention)
        version = await self.insert_if_absent(record)
        if version is not None:
            return Claim(Decision.CREATE, record, version=version)
        # Every claim this call wrote, by attempt_id: (decision, record it replaced).
        sent: dict[str, tuple[Decision, RunRecord | None]] = {record.attempt_id: (Decision.CREATE, None)}
        for _ in range(MAX_RACES):
            loaded = await self.load(new.run_id)
            if loaded is None:  # deleted since (TTL): create again
                version = await self.insert_if_absent(record)
                if version is not None:
                    return Claim(Decision.CREATE, record, version=version)
                continue
            found, version = loaded
            if found.attempt_id in sent:  # our own write landed, its answer was lost
                decision, previous = sent[found.attempt_id]
                return Claim(decision, found, previous=previous, version=version)
            decision = decide(found, new, now)
            if decision not in (Decision.CREATE, Decision.TAKEOVER):
                return Claim(decision, found)
            claimed = claimed_record(found, decision, new, now, lease, retention)
            sent[claimed.attempt_id] = (decision, found)
            written = await self.replace_if_version(claimed, version)
            if written is not None:
                return Claim(decision, claimed, previous=found, version=written)
        raise StoreUnavailable(f"claim of {new.run_id}: still contended after {MAX_RACES} tries")

    async def finish(self, claim: Claim, finish: Finish, now: datetime) -> RunRecord:
        """Write the outcome, only if the record is still held by `claim.record.attempt_id` and
        still in_progress; return the written record. Raise `Fenced` otherwise."""
        held, version = claim.record, claim.version
        for _ in range(MAX_RACES):
            record = finished_record(held, finish, now)
            if version is not None and await self.replace_if_version(record, version, FINISH_FIELDS) is not None:
                return record
            loaded = await self.load(held.run_id)
            found, version = loaded if loaded is not None else (None, None)
            if found is not None and found == record:
                return found  # our own write landed, its answer was lost
            if not holds(found, claim):
                raise Fenced(found)
            assert found is not None
            held = found  # still ours (an admin touched the lease): write over what is there
        raise StoreUnavailable(f"finish of {held.run_id}: still contended after {MAX_RACES} tries")

    async def release(self, run_id: str, now: datetime) -> RunRecord | None:
        """Admin: end the live lease of an in_progress run so the next delivery takes over (and
        reconciles). Returns the updated record, or None when there is nothing to release."""
        released: RunRecord | None = None  # pragma: no mutate - nothing written yet: no record equals None (or "")
        for _ in range(MAX_RACES):
            loaded = await self.load(run_id)
            found, version = loaded if loaded is not None else (None, None)
            if found is not None and found == released:
                return found  # our own write landed, its answer was lost
            if not releasable(found, now):
                return None
            assert found is not None
            released = replace(found, lease_expires=now, updated_at=now)
            if await self.replace_if_version(released, version, RELEASE_FIELDS) is not None:
                return released
        raise StoreUnavailable(f"release of {run_id}: still contended after {MAX_RACES} tries")

    async def get(self, run_id: str, now: datetime) -> RunRecord | None:
        """The record, or None if absent or expired (TTL deletion lags)."""
        loaded = await self.load(run_id)
        if loaded is None or loaded[0].expire_at <= now:
            return None
        return loaded[0]

    async def get_many(self, run_ids: Iterable[str], now: datetime) -> dict[str, RunRecord]:
        """The unexpired records of `run_ids` that exist, by run_id (absent ones are left out).

        This default reads them with `get`, GET_MANY_CONCURRENCY at a time; a backend with a batch
        read overrides it, so the audit costs a request per batch, not per fire time."""
        gate = asyncio.Semaphore(GET_MANY_CONCURRENCY)

        async def one(run_id: str) -> RunRecord | None:
            async with gate:
                return await self.get(run_id, now)

        unique = list(dict.fromkeys(run_ids))
        found = await asyncio.gather(*(one(run_id) for run_id in unique))
        return {record.run_id: record for record in found if record is not None}
