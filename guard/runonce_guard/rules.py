"""The step record and the claim rules: pure functions, no I/O.

The same rules as the server's (`runonce/stores/base.py`: `decide`, `holds`, the takeover), kept in
this distribution so a job's image installs the guard without the server and its web stack. A
conformance test (`tests/guard/test_rules_conformance.py`) holds the two to the same decision in every
situation (absent, each status, lease and expiry before, at and after now), and the stores of both
share the primitives' names and conventions (`load`, `insert_if_absent`, `replace_if_version`).
A step has no request body to compare (no MISMATCH) and no `skipped` status.

Time windows of one step (a store compares nothing else):

    created_at            lease_expires                         expire_at = created_at + retention
        |--- lease live: others wait or raise ----|--- claimable: takeover, attempts+1 ---|--- absent
        ^ claim (in_progress)                                                                 ^ TTL may delete

`failed` (the body raised) is claimable at once; `completed` is replayed until `expire_at`.
"""

from __future__ import annotations

import enum
import json
import re
import uuid
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from .errors import GuardConfigError
from .settings import shown

StepStatus = Literal["in_progress", "completed", "failed"]
IN_PROGRESS: StepStatus = "in_progress"
COMPLETED: StepStatus = "completed"
FAILED: StepStatus = "failed"

NO_TASK = "-"
"""The task part of a key outside Cloud Run jobs (Workflows, Cloud Build, `task=None`)."""

# Each is matched against the whole value (`fullmatch`): `$` alone would accept a trailing newline.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9_.:=+-]{1,256}")
STEP_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,100}")
TASK_PATTERN = re.compile(r"[0-9]{1,9}|-")


@dataclass(frozen=True)
class StepKey:
    """(run_id, step, task): one record each. `doc_id` is the same in every recipe (library,
    wrapper, Workflows, Cloud Build): `{run_id}~{step}~{task}`."""

    run_id: str
    step: str
    task: str = NO_TASK

    def __post_init__(self) -> None:
        if not RUN_ID_PATTERN.fullmatch(self.run_id):
            raise GuardConfigError(
                f"run_id {shown(self.run_id)}: 1 to 256 letters, digits and `_ . : = + -` (runonce's run_id is 64 hex)"
            )
        if not STEP_PATTERN.fullmatch(self.step):
            raise GuardConfigError(f"step {shown(self.step)}: 1 to 100 letters, digits and `_ . -`")
        if not TASK_PATTERN.fullmatch(self.task):
            raise GuardConfigError(f"task {shown(self.task)}: must be a task index (0, 1, …) or '-'")

    @property
    def doc_id(self) -> str:
        return f"{self.run_id}~{self.step}~{self.task}"


@dataclass(frozen=True)
class StepRecord:
    """One record per StepKey, the same in every store (field names are part of the contract)."""

    run_id: str
    step: str
    task: str
    status: StepStatus
    attempt_id: str
    attempts: int
    lease_expires: datetime
    expire_at: datetime
    created_at: datetime
    updated_at: datetime
    result: str | None = None  # JSON text of the step's result, when it recorded one
    last_error: str | None = None
    holder: str | None = None  # who claimed last: Cloud Run execution/task attempt, or host/pid

    @property
    def key(self) -> StepKey:
        return StepKey(self.run_id, self.step, self.task)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> dict[str, Any]:
        """The record as `runonce-guard status` prints it: timestamps in RFC 3339 UTC."""
        return {k: (rfc3339(v) if isinstance(v, datetime) else v) for k, v in self.as_dict().items()}

    def result_value(self) -> Any:
        return None if self.result is None else json.loads(self.result)


def rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Decision(enum.Enum):
    """What a claim found; the same names and order as the server's `Decision` (minus MISMATCH:
    a step has no body to compare)."""

    CREATE = "create"  # nothing there (or an expired record)
    TAKEOVER = "takeover"  # failed, or its lease expired: a new attempt replaces it
    REPLAY = "replay"  # completed: skip the body, hand back the stored result
    BUSY = "busy"  # another attempt holds a live lease


def decide(found: StepRecord | None, now: datetime) -> Decision:
    """The claim rules, in order. Expired records count as absent (TTL deletion lags)."""
    if found is None or found.expire_at <= now:
        return Decision.CREATE
    if found.status == COMPLETED:
        return Decision.REPLAY
    if found.status == IN_PROGRESS and found.lease_expires > now:
        return Decision.BUSY
    return Decision.TAKEOVER


def holds(found: StepRecord | None, attempt_id: str) -> bool:
    """Fencing: may attempt `attempt_id` still write its outcome over `found`?"""
    return found is not None and found.attempt_id == attempt_id and found.status == IN_PROGRESS


def fresh_record(key: StepKey, now: datetime, lease: timedelta, retention: timedelta, holder: str | None) -> StepRecord:
    return StepRecord(
        run_id=key.run_id,
        step=key.step,
        task=key.task,
        status=IN_PROGRESS,
        attempt_id=uuid.uuid4().hex,
        attempts=1,
        lease_expires=now + lease,
        expire_at=now + retention,
        created_at=now,
        updated_at=now,
        holder=holder,
    )


def takeover_record(found: StepRecord, now: datetime, lease: timedelta, holder: str | None) -> StepRecord:
    """A new attempt on an existing record: keeps identity and history, fences the old attempt."""
    return replace(
        found,
        status=IN_PROGRESS,
        attempt_id=uuid.uuid4().hex,
        attempts=found.attempts + 1,
        lease_expires=now + lease,
        updated_at=now,
        result=None,
        holder=holder,
    )


def finished_record(
    held: StepRecord, status: StepStatus, now: datetime, result: str | None = None, last_error: str | None = None
) -> StepRecord:
    return replace(held, status=status, result=result, last_error=last_error, updated_at=now)


FINISH_FIELDS = ("status", "result", "last_error", "updated_at")
"""What a finish changes: a smaller write than the whole record."""
