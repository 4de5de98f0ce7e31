"""Step stores. `build_store(settings)` picks one from `RUNONCE_STORE`; backends import their SDK
in their own module only, so an unused backend's client need not be installed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Claim, Conflict, StepStore

if TYPE_CHECKING:
    from ..settings import GuardSettings

__all__ = ["Claim", "Conflict", "StepStore", "build_store"]


def build_store(settings: GuardSettings) -> StepStore:
    if settings.store == "firestore":
        from .firestore import FirestoreStepStore

        return FirestoreStepStore(
            project=settings.firestore_project,
            database=settings.firestore_database,
            collection=settings.firestore_steps_collection,
            timeout_seconds=settings.store_timeout_seconds,
        )
    raise AssertionError(f"unvalidated store {settings.store!r}")  # settings.py validates
