"""runonce-guard: exactly-once steps inside jobs that runonce starts. See `once`."""

from .errors import Fenced, GuardConfigError, GuardError, NotStartedByRunonce, StepInProgress, StoreUnavailable
from .once import Guard, Once, ResultNotStored, Step, UnguardedStep, default_guard, once
from .rules import StepKey, StepRecord
from .settings import GuardSettings

__version__ = "0.2.0.dev0"

__all__ = [
    "Fenced",
    "Guard",
    "GuardConfigError",
    "GuardError",
    "GuardSettings",
    "NotStartedByRunonce",
    "Once",
    "ResultNotStored",
    "Step",
    "StepInProgress",
    "StepKey",
    "StepRecord",
    "StoreUnavailable",
    "UnguardedStep",
    "default_guard",
    "once",
]
