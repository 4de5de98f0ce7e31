"""The guard's settings: the server's `RUNONCE_*` names and defaults for what both share (store,
lease, retention), plus where step records live. Read once from the environment; a bad value
raises `GuardConfigError` naming the variable.

A conformance test holds the shared names and defaults to the server's `runonce/settings.py`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from .errors import GuardConfigError

MAX_DURATION_SECONDS = 10 * 365 * 86400
"""Ten years, the server's bound: a longer duration is a typo (and would overflow date arithmetic)."""

SECONDS = re.compile(r"[0-9]{1,12}(\.[0-9]{1,9})?")
"""A number of seconds as people write it: ASCII digits, an optional fraction (no `inf`, `1e300`, `1_0`)."""

PROJECT_ID = re.compile(r"^(?:[a-z][a-z0-9.-]{0,62}:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")
"""A project ID, optionally domain-scoped: the server's `runonce/names.py` rule (a test holds the two equal)."""

COLLECTION_ID = re.compile(r"[^/]{1,1500}")
"""A Firestore collection ID: no `/`, at most 1,500 bytes, not `.`, `..` or `__…__` (checked below)."""


def shown(raw: str) -> str:
    """`raw` as an error quotes it: whole when short, else only its length (a value of thousands of
    characters would drown the message)."""
    return repr(raw) if len(raw) <= 300 else f"a value of {len(raw)} characters"


def parse_seconds(name: str, raw: str) -> float:
    """`raw` as seconds for setting or flag `name`: above 0 and at most ten years; GuardConfigError
    otherwise. The pattern bounds the digits before `float()` reads them."""
    if not SECONDS.fullmatch(raw):
        raise GuardConfigError(
            f"{name}: {shown(raw)} is not a number of seconds (digits, e.g. 300 or 0.5; at most {MAX_DURATION_SECONDS})"
        )
    value = float(raw)
    if not 0 < value <= MAX_DURATION_SECONDS:
        raise GuardConfigError(
            f"{name}: must be above 0 and at most {MAX_DURATION_SECONDS} (ten years), got {shown(raw)}"
        )
    return value


def check_seconds(name: str, value: float) -> float:
    """A duration given as a number (library arguments, parsed flags): the same bounds as the settings."""
    if not 0 < value <= MAX_DURATION_SECONDS:  # also refuses nan (every comparison with nan is false)
        raise GuardConfigError(f"{name} {value!r}: must be above 0 and at most {MAX_DURATION_SECONDS} (ten years)")
    return value


def check_store_url(store: str) -> None:
    """`RUNONCE_STORE` in a form the guard opens: the server's forms and words (`runonce_store_url`,
    which both ship), less SQLite (a job's retries run on other machines, where a local file cannot
    guard them)."""
    from runonce_store_url import StoreURLError
    from runonce_store_url import check_store_url as check

    try:
        scheme = check(store)
    except StoreURLError as exc:
        raise GuardConfigError(f"RUNONCE_STORE: {exc}") from None
    if scheme == "sqlite":
        raise GuardConfigError(
            "RUNONCE_STORE: sqlite://… is not a store the guard can use: set 'firestore', "
            "spanner://projects/P/instances/I/databases/D or redis://HOST:PORT/DB. A job's retries run on "
            "other machines, so a local SQLite file cannot guard them."
        )


def _collection_id(name: str, value: str) -> str:
    if (
        not COLLECTION_ID.fullmatch(value)
        or len(value.encode()) > 1500
        or value in (".", "..")
        or (value.startswith("__") and value.endswith("__"))
    ):
        raise GuardConfigError(
            f"{name}: {shown(value)} is not a Firestore collection ID (no '/', not '.', '..' or '__name__', "
            "at most 1,500 bytes)"
        )
    return value


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
            return parse_seconds(f"RUNONCE_{name.upper()}", raw)

        project = env.get("RUNONCE_FIRESTORE_PROJECT") or None
        if project is not None and not PROJECT_ID.fullmatch(project):
            raise GuardConfigError(
                f"RUNONCE_FIRESTORE_PROJECT: {shown(project)} is not a project ID (6 to 30 lower-case letters, digits "
                "and hyphens, starting with a letter; a project number is not accepted: use the project ID)"
            )

        store = env.get("RUNONCE_STORE") or defaults.store
        check_store_url(store)
        return cls(
            store=store,
            store_timeout_seconds=seconds("store_timeout_seconds", defaults.store_timeout_seconds),
            firestore_project=project,
            firestore_database=env.get("RUNONCE_FIRESTORE_DATABASE") or defaults.firestore_database,
            firestore_steps_collection=_collection_id(
                "RUNONCE_FIRESTORE_STEPS_COLLECTION",
                env.get("RUNONCE_FIRESTORE_STEPS_COLLECTION") or defaults.firestore_steps_collection,
            ),
            lease_seconds=seconds("lease_seconds", defaults.lease_seconds),
            retention_seconds=seconds("retention_seconds", defaults.retention_seconds),
        )
