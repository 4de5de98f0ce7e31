"""Every error the guard raises, as one tree:

GuardError
├── NotStartedByRunonce    no run_id in the environment: the job was not started by runonce
├── GuardConfigError       a bad setting or argument (names it); nothing was claimed
├── StepInProgress         another attempt holds a live lease (after waiting, if configured to)
├── Fenced                 this attempt's claim was taken over: its completion is refused
└── StoreUnavailable       the store did not answer; nothing is known to have changed
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .rules import StepRecord


class GuardError(Exception):
    """Base of the guard's errors."""


class NotStartedByRunonce(GuardError):
    """No run_id: without it there is no key to guard the step with."""


class GuardConfigError(GuardError, ValueError):
    """A bad setting or argument."""


class StepInProgress(GuardError):
    """Another attempt holds the step's lease."""

    def __init__(self, record: StepRecord, waited: float):
        self.record = record
        super().__init__(
            f"step {record.step!r} (task {record.task}) of run {record.run_id} is in progress in attempt "
            f"{record.attempt_id} ({record.holder or 'unknown holder'}), lease until "
            f"{record.lease_expires.isoformat()}; waited {waited:.1f}s. A retry takes over once the lease expires."
        )


class Fenced(GuardError):
    """Completion refused: a newer attempt took the step over after this attempt's lease expired."""

    def __init__(self, found: StepRecord | None):
        self.found = found
        holder = f"attempt {found.attempt_id} ({found.status})" if found else "no record"
        super().__init__(f"step is now held by {holder}; this attempt's outcome was not recorded")


class StoreUnavailable(GuardError):
    """The store could not be reached or did not answer in time."""
