"""The step-store interface: the claim protocol once, over three primitives each backend implements.

Like Powertools' persistence layers, and with the server's primitives (`runonce/stores/base.py`:
the same names, the same convention: a conditional write that loses returns None), the loop lives
here; a backend only translates records:

    load(key)                           -> (record, version) | None
    insert_if_absent(record)            -> version | None (None: a record exists)
    replace_if_version(record, version) -> version | None (None: it is no longer at `version`)

    claim:  insert_if_absent(fresh)            -> we hold the step (one round trip)
            else load, decide, replace_if_version; a lost race is decided again from a new load
    finish: replace_if_version(outcome, version of our claim's write)
            else load: still ours (holds) -> write again over what is there, else Fenced

So of any number of simultaneous claims at most one wins. Firestore (create / update-time
precondition), Spanner (insert / read-compare-update transaction) and Redis (SET NX /
compare-and-set script) implement the same three primitives.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from ..errors import Fenced, StoreUnavailable
from ..rules import (
    FINISH_FIELDS,
    Decision,
    StepKey,
    StepRecord,
    StepStatus,
    decide,
    finished_record,
    fresh_record,
    holds,
    takeover_record,
)

# Every retry of a lost race needs another writer to have succeeded in between: this bounds a livelock.
MAX_RACES = 20


@dataclass(frozen=True)
class Claim:
    """The answer to a claim. CREATE/TAKEOVER: this attempt holds the step, `record` is what was
    written and `previous` what it replaced. Otherwise `record` is what was found, unchanged.
    `version` is store-private (Firestore's update time) and lets `finish` skip a read."""

    decision: Decision
    record: StepRecord
    previous: StepRecord | None = None
    version: Any = field(default=None, compare=False, repr=False)

    @property
    def won(self) -> bool:
        return self.decision in (Decision.CREATE, Decision.TAKEOVER)


class StepStore(ABC):
    """A step store. Methods take `now` so tests drive the clock, and raise `StoreUnavailable`
    when the backend cannot be reached or times out."""

    # -- primitives (per backend) ---------------------------------------------------------------

    @abstractmethod
    def load(self, key: StepKey) -> tuple[StepRecord, Any] | None:
        """The stored record (expired or not) and its version, or None when there is none."""

    @abstractmethod
    def insert_if_absent(self, record: StepRecord) -> Any | None:
        """Write `record` unless a record exists under its key; its version, or None if one does."""

    @abstractmethod
    def replace_if_version(
        self, record: StepRecord, version: Any, changed: tuple[str, ...] | None = None
    ) -> Any | None:
        """Write `record` over the stored one if that is still at `version`; the new version, or
        None when it moved on or is gone. `changed`: the only fields that differ (a hint)."""

    def ping(self) -> None:  # noqa: B027 - optional
        """Raise `StoreUnavailable` unless the store answers."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release connections."""

    # -- the protocol (once, for every backend) -------------------------------------------------

    def claim(
        self,
        key: StepKey,
        now: datetime,
        lease: timedelta,
        retention: timedelta,
        holder: str | None = None,
        *,
        read_first: bool = False,
    ) -> Claim:
        """Atomically apply `decide` to the stored record and, on CREATE/TAKEOVER, write the claim.

        A first attempt creates at once (a fresh step: one write). `read_first` is for a retry,
        whose step is most likely done already: one read replays it, where a refused create (as
        dear as a write) and then the read would cost two round trips. The decisions are the same."""
        record = fresh_record(key, now, lease, retention, holder)
        if not read_first:
            version = self.insert_if_absent(record)
            if version is not None:
                return Claim(Decision.CREATE, record, version=version)
        for _ in range(MAX_RACES):
            loaded = self.load(key)
            if loaded is None:  # deleted since (TTL), or never there: create
                version = self.insert_if_absent(record)
                if version is not None:
                    return Claim(Decision.CREATE, record, version=version)
                continue
            found, version = loaded
            if found.attempt_id == record.attempt_id:
                return Claim(Decision.CREATE, found, version=version)  # our create landed, its answer was lost
            decision = decide(found, now)
            if decision is Decision.REPLAY or decision is Decision.BUSY:
                return Claim(decision, found)
            claimed = (
                fresh_record(key, now, lease, retention, holder)
                if decision is Decision.CREATE
                else takeover_record(found, now, lease, holder)
            )
            written = self.replace_if_version(claimed, version)
            if written is not None:
                return Claim(decision, claimed, previous=found, version=written)
            # someone wrote in between: decide again on what they wrote
        raise StoreUnavailable(f"claim of {key.doc_id}: still contended after {MAX_RACES} tries")

    def finish(
        self, claim: Claim, status: StepStatus, now: datetime, result: str | None = None, last_error: str | None = None
    ) -> StepRecord:
        """Write the outcome only while `claim` still holds the step; raise `Fenced` otherwise.
        `status` in_progress keeps the claim (outcome unknown) and only records `last_error`."""
        return self._write_held(
            claim, lambda held: finished_record(held, status, now, result, last_error), FINISH_FIELDS
        ).record

    def renew(self, claim: Claim, now: datetime, lease: timedelta) -> Claim:
        """Extend the lease of a step this attempt still holds (`Fenced` otherwise); the returned
        claim carries the new version for the next renew or the finish."""
        return self._write_held(
            claim,
            lambda held: replace(held, lease_expires=now + lease, updated_at=now),
            ("lease_expires", "updated_at"),
        )

    def _write_held(self, claim: Claim, change: Callable[[StepRecord], StepRecord], fields: tuple[str, ...]) -> Claim:
        """Write `change(record)` conditional on the claim's version; on a conflict, re-read and
        write again while the claim still holds the step (fencing), else raise `Fenced`."""
        held, version = claim.record, claim.version
        for _ in range(MAX_RACES):
            record = change(held)
            if version is not None:
                written = self.replace_if_version(record, version, fields)
                if written is not None:
                    return replace(claim, record=record, version=written)
            found, version = self.load(held.key) or (None, None)
            if not holds(found, claim.record.attempt_id):
                if found is not None and found.attempt_id == held.attempt_id and found == record:
                    return replace(claim, record=found, version=version)  # our own retried write had landed
                raise Fenced(found)
            assert found is not None
            held = found
        raise StoreUnavailable(f"write of {held.key.doc_id}: still contended after {MAX_RACES} tries")

    def get(self, key: StepKey, now: datetime) -> StepRecord | None:
        """The record, or None if absent or expired."""
        loaded = self.load(key)
        return loaded[0] if loaded is not None and loaded[0].expire_at > now else None
