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
        from .firestore import FirestoreStore  # imports grpc: only when configured

        return FirestoreStore(
            project=firestore_project,
            database=firestore_database,
            collection=firestore_collection,
            timeout_seconds=timeout_seconds,
        )
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
