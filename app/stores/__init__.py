"""Claim stores: one module each behind `RunStore` (see `base.py` for the rules they share)."""

from __future__ import annotations

from .base import (
    Claim,
    Decision,
    Fenced,
    Finish,
    NewRun,
    RunRecord,
    RunStore,
    StoreError,
    StoreUnavailable,
)


def open_store(
    url: str,
    *,
    timeout_seconds: float = 5.0,
    firestore_project: str | None = None,
    firestore_database: str = "(default)",
    firestore_collection: str = "runonce_runs",
) -> RunStore:
    """The store named by `RUNONCE_STORE`: `sqlite:///PATH`, `firestore`, or `memory` (tests)."""
    if url.startswith("sqlite:///"):
        from .sqlite import SQLiteStore

        return SQLiteStore.from_url(url, timeout_seconds)
    if url == "firestore":
        from google.auth.exceptions import DefaultCredentialsError

        from .firestore import FirestoreStore  # imports grpc: only when configured

        try:
            return FirestoreStore(
                project=firestore_project,
                database=firestore_database,
                collection=firestore_collection,
                timeout_seconds=timeout_seconds,
            )
        except DefaultCredentialsError as exc:
            from ..settings import ConfigError

            raise ConfigError(
                "RUNONCE_STORE=firestore found no Google credentials: run `gcloud auth application-default "
                "login` (or set GOOGLE_APPLICATION_CREDENTIALS), or set FIRESTORE_EMULATOR_HOST to use an emulator"
            ) from exc
    if url == "memory":
        from .memory import MemoryStore

        return MemoryStore()
    raise ValueError(f"unknown store {url!r}: use sqlite:///PATH or firestore")


__all__ = [
    "Claim",
    "Decision",
    "Fenced",
    "Finish",
    "NewRun",
    "RunRecord",
    "RunStore",
    "StoreError",
    "StoreUnavailable",
    "open_store",
]
