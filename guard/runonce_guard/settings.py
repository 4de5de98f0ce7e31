"""The guard's settings: the server's `RUNONCE_*` names and defaults for what both share (store,
lease, retention), plus where step records live. Read once from the environment; a bad value
raises `GuardConfigError` naming the variable.

A conformance test holds the shared names and defaults to the server's `runonce/settings.py`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from .errors import GuardConfigError


@dataclass(frozen=True)
class GuardSettings:
    store: str = "firestore"
    store_timeout_seconds: float = 5.0
    firestore_project: str | None = None
    firestore_database: str = "(default)"
    firestore_steps_collection: str = "runonce_steps"  # apart from delivery records (runonce_runs)
    lease_seconds: float = 300
    retention_seconds: float = 86400

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=self.lease_seconds)

    @property
    def retention(self) -> timedelta:
        return timedelta(seconds=self.retention_seconds)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> GuardSettings:
        env = os.environ if environ is None else environ
        defaults = cls()

        def seconds(name: str, default: float) -> float:
            raw = env.get(f"RUNONCE_{name.upper()}")
            if raw is None or raw == "":
                return default
            try:
                value = float(raw)
            except ValueError:
                raise GuardConfigError(f"RUNONCE_{name.upper()}: {raw!r} is not a number of seconds") from None
            if not value > 0:
                raise GuardConfigError(f"RUNONCE_{name.upper()}: must be greater than 0, got {raw!r}")
            return value

        store = env.get("RUNONCE_STORE") or defaults.store
        if store != "firestore":
            raise GuardConfigError(
                f"RUNONCE_STORE: {store!r} is not a store the guard can use: set 'firestore'. A job's "
                "retries run on other machines, so a local SQLite file cannot guard them."
            )
        return cls(
            store=store,
            store_timeout_seconds=seconds("store_timeout_seconds", defaults.store_timeout_seconds),
            firestore_project=env.get("RUNONCE_FIRESTORE_PROJECT") or None,
            firestore_database=env.get("RUNONCE_FIRESTORE_DATABASE") or defaults.firestore_database,
            firestore_steps_collection=env.get("RUNONCE_FIRESTORE_STEPS_COLLECTION")
            or defaults.firestore_steps_collection,
            lease_seconds=seconds("lease_seconds", defaults.lease_seconds),
            retention_seconds=seconds("retention_seconds", defaults.retention_seconds),
        )
