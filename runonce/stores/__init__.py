"""Claim stores: one module each behind `RunStore` (see `base.py` for the rules they share).

The registry below is the one table of backends: `RUNONCE_STORE`'s scheme picks the row, settings
validation (`check_store_url`) and `open_store` both read it, and a backend's options live in its
URL. A backend's SDK is imported only by its own module, and that module only when it is configured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runonce.errors import ConfigError
from runonce.stores.base import (
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
from runonce.stores.sqlite import SQLiteStore
from runonce.stores.urls import RedisURL, SpannerURL, parse_redis_url, parse_spanner_url
from runonce_store_url import FORMS, redact_store_url, scheme_of, scrub, secrets_of, split_credentials
from runonce_store_url import check_store_url as _check_store_url


def _open_sqlite(url: str, timeout: float, options: dict[str, Any]) -> RunStore:
    return SQLiteStore.from_url(url, timeout)


def _open_firestore(url: str, timeout: float, options: dict[str, Any]) -> RunStore:
    # Deferred: a SQLite start imports neither google.cloud.firestore nor grpc (tests/test_cold_start.py).
    from google.auth.exceptions import DefaultCredentialsError  # deferred, measured: see above

    from runonce.stores.firestore import FirestoreStore  # deferred, measured: see above

    try:
        return FirestoreStore(
            project=options.get("firestore_project"),
            database=options.get("firestore_database", "(default)"),
            collection=options.get("firestore_collection", "runonce_runs"),
            timeout_seconds=timeout,
        )
    except DefaultCredentialsError as exc:
        raise _no_credentials("firestore", "FIRESTORE_EMULATOR_HOST") from exc


def _no_credentials(store: str, emulator: str) -> ConfigError:
    return ConfigError(
        f"RUNONCE_STORE={store}… found no Google credentials: run `gcloud auth application-default "
        f"login` (or set GOOGLE_APPLICATION_CREDENTIALS), or set {emulator} to use an emulator"
    )


def _open_spanner(url: str, timeout: float, options: dict[str, Any]) -> RunStore:
    # Deferred: only a spanner:// start imports google-cloud-spanner (tests/test_store_new_backends.py).
    from google.auth.exceptions import DefaultCredentialsError  # deferred, measured: see above

    from runonce.stores.spanner import SpannerStore  # deferred, measured: see above

    try:
        return SpannerStore(parse_spanner_url(url), timeout_seconds=timeout)
    except DefaultCredentialsError as exc:
        raise _no_credentials("spanner://", "SPANNER_EMULATOR_HOST") from exc


def _open_redis(url: str, timeout: float, options: dict[str, Any]) -> RunStore:
    # Deferred: only a redis:// start imports redis-py (tests/test_store_new_backends.py).
    from runonce.stores.redis import RedisStore  # deferred, measured: see above

    return RedisStore(parse_redis_url(url), timeout_seconds=timeout)


@dataclass(frozen=True)
class Backend:
    """One row of the registry: how `RUNONCE_STORE` names it, how its URL is checked and opened."""

    scheme: str
    form: str  # what the user writes, for error messages
    open: Callable[[str, float, dict[str, Any]], RunStore]
    extra: str | None = None  # `pip install 'runonce[EXTRA]'` installs its driver


BACKENDS: dict[str, Backend] = {
    b.scheme: b
    for b in (
        Backend("sqlite", FORMS["sqlite"], _open_sqlite),
        Backend("firestore", FORMS["firestore"], _open_firestore),
        Backend("spanner", FORMS["spanner"], _open_spanner, "spanner"),
        Backend("redis", FORMS["redis"], _open_redis, "redis"),
        Backend("rediss", FORMS["rediss"], _open_redis, "redis"),
    )
}


def backend_for(url: str) -> Backend:
    """The registry row for `url` (by scheme; `firestore` is a bare name)."""
    return BACKENDS[scheme_of(url)]


def check_store_url(url: str) -> str:
    """Validate `RUNONCE_STORE` without importing any driver (settings call this), with the reading
    `runonce-guard` shares (`runonce_store_url`). The error (a ValueError) never quotes the URL's
    credentials or option values."""
    _check_store_url(url)
    return url


def open_store(
    url: str,
    *,
    timeout_seconds: float = 5.0,
    firestore_project: str | None = None,
    firestore_database: str = "(default)",
    firestore_collection: str = "runonce_runs",
) -> RunStore:
    """The store named by `RUNONCE_STORE` (see `BACKENDS`). Tests that want the in-memory store
    build `runonce.stores.memory.MemoryStore` themselves."""
    backend = backend_for(check_store_url(url))
    options = {
        "firestore_project": firestore_project,
        "firestore_database": firestore_database,
        "firestore_collection": firestore_collection,
    }
    try:
        return backend.open(url, timeout_seconds, options)
    except ModuleNotFoundError as exc:
        if backend.extra is None:
            raise
        raise ConfigError(
            f"RUNONCE_STORE={backend.scheme}://… needs its driver: pip install 'runonce[{backend.extra}]' ({exc})"
        ) from exc
    except StoreUnavailable as exc:
        raise StoreUnavailable(scrub(str(exc), url)) from exc


__all__ = [
    "BACKENDS",
    "Claim",
    "Decision",
    "Fenced",
    "Finish",
    "NewRun",
    "RedisURL",
    "RunRecord",
    "RunStore",
    "SpannerURL",
    "StoreError",
    "StoreUnavailable",
    "check_store_url",
    "open_store",
    "parse_redis_url",
    "parse_spanner_url",
    "redact_store_url",
    "scrub",
    "secrets_of",
    "split_credentials",
]
