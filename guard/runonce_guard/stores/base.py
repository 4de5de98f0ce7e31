"""The step-store interface: the claim protocol once, over three primitives each backend implements.

Like Powertools' persistence layers (and as the server's `runonce/stores/base.py` does), the
loop lives here; a backend only translates records and maps its conflicts to `Conflict`:

    claim:  _create(record)                         -> we hold the step (one round trip)
            on Conflict: _read(), decide(), _write_if_unchanged(claimed, version read)
    finish: _write_if_unchanged(outcome, version of our claim's write)
            on Conflict: _read(); still ours (holds) -> write again over what is there, else Fenced

A lost race is a Conflict and is decided again from a fresh read, so of any number of simultaneous
claims at most one wins. Spanner (read-write transaction) and Redis (WATCH/MULTI, or a Lua
compare-and-set on a version field) implement the same three primitives.
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


class Conflict(Exception):
    """A conditional write lost: the record exists (create), or changed or vanished (update)."""


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
    def _create(self, record: StepRecord) -> Any:
        """Write `record` only if no record exists under its key; return the new version.
        Raise `Conflict` if one exists."""

    @abstractmethod
    def _read(self, key: StepKey) -> tuple[StepRecord | None, Any]:
        """The stored record (expired or not) and its version, or (None, None)."""

    @abstractmethod
    def _write_if_unchanged(self, record: StepRecord, version: Any, fields: tuple[str, ...] | None = None) -> Any:
        """Write `record` (only `fields` of it, if given) if the stored version is still `version`;
        return the new version. Raise `Conflict` if it changed or vanished."""

    def ping(self) -> None:  # noqa: B027 - optional
        """Raise `StoreUnavailable` unless the store answers."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release connections."""

    # -- the protocol (once, for every backend) -------------------------------------------------

    def claim(
        self, key: StepKey, now: datetime, lease: timedelta, retention: timedelta, holder: str | None = None
    ) -> Claim:
        """Atomically apply `decide` to the stored record and, on CREATE/TAKEOVER, write the claim."""
        record = fresh_record(key, now, lease, retention, holder)
        try:
            return Claim(Decision.CREATE, record, version=self._create(record))
        except Conflict:
            pass
        for _ in range(MAX_RACES):
            found, version = self._read(key)
            if found is None:  # deleted since (TTL): start over with a create
                try:
                    return Claim(Decision.CREATE, record, version=self._create(record))
                except Conflict:
                    continue
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
            try:
                return Claim(decision, claimed, previous=found, version=self._write_if_unchanged(claimed, version))
            except Conflict:
                continue  # someone wrote in between: decide again on what they wrote
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
                try:
                    return replace(claim, record=record, version=self._write_if_unchanged(record, version, fields))
                except Conflict:
                    pass
            found, version = self._read(held.key)
            if not holds(found, claim.record.attempt_id):
                if found is not None and found.attempt_id == held.attempt_id and found == record:
                    return replace(claim, record=found, version=version)  # our own retried write had landed
                raise Fenced(found)
            assert found is not None
            held = found
        raise StoreUnavailable(f"write of {held.key.doc_id}: still contended after {MAX_RACES} tries")

    def get(self, key: StepKey, now: datetime) -> StepRecord | None:
        """The record, or None if absent or expired."""
        found, _ = self._read(key)
        return found if found is not None and found.expire_at > now else None
