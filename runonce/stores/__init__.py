"""Claim stores: one module each behind `RunStore` (see `base.py` for the rules they share).

The registry below is the one table of backends: `RUNONCE_STORE`'s scheme picks the row, settings
validation (`check_store_url`) and `open_store` both read it, and a backend's options live in its
URL. A backend's SDK is imported only by its own module, and that module only when it is configured.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from runonce import names
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


@dataclass(frozen=True)
class SpannerURL:
    """`spanner://projects/P/instances/I/databases/D[?table=runonce_runs]`"""

    project: str
    instance: str
    database: str
    table: str = "runonce_runs"


@dataclass(frozen=True)
class RedisURL:
    """`redis://[[user]:password@]HOST[:PORT][/DB][?wait_replicas=N]`, or `rediss://…[&ca_file=PATH]`."""

    host: str
    port: int = 6379
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False
    ca_file: str | None = None
    wait_replicas: int = 0


def _query(url: str, allowed: tuple[str, ...]) -> dict[str, str]:
    params = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        known = ", ".join(allowed) or "none"
        raise ValueError(f"unknown option {unknown[0]!r} in {url.split('://')[0]}:// URL (options: {known})")
    return params


_SPANNER_PATH = re.compile(
    rf"spanner://projects/({names.PROJECT_ID})/instances/([a-z][a-z0-9-]*[a-z0-9])"
    r"/databases/([a-z][a-z0-9_-]*[a-z0-9])(\?.*)?"
)
_TABLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")


def parse_spanner_url(url: str) -> SpannerURL:
    match = _SPANNER_PATH.fullmatch(url)
    if match is None:
        raise ValueError("must be spanner://projects/PROJECT/instances/INSTANCE/databases/DATABASE[?table=NAME]")
    table = _query(url, ("table",)).get("table", "runonce_runs")
    if not _TABLE_NAME.fullmatch(table):
        raise ValueError(f"table {table!r} is not a Spanner table name (letters, digits, _; a letter first)")
    return SpannerURL(match[1], match[2], match[3], table)


def parse_redis_url(url: str) -> RedisURL:
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError("must be redis://[:PASSWORD@]HOST:PORT/DB or rediss://… (a host is required)")
    try:
        port = parts.port or 6379
    except ValueError as exc:
        raise ValueError(f"bad port in {parts.scheme}:// URL: {exc}") from exc
    db_text = parts.path.strip("/") or "0"
    if not db_text.isdigit():
        raise ValueError(f"the database number must be an integer, got {db_text!r}")
    tls = parts.scheme == "rediss"
    params = _query(url, ("wait_replicas", "ca_file") if tls else ("wait_replicas",))
    wait = params.get("wait_replicas", "0")
    if not wait.isdigit() or int(wait) > 16:
        raise ValueError(f"wait_replicas must be an integer from 0 to 16, got {wait!r}")
    return RedisURL(
        host=parts.hostname,
        port=port,
        db=int(db_text),
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        tls=tls,
        ca_file=params.get("ca_file") or None,
        wait_replicas=int(wait),
    )


def _check_sqlite(url: str) -> None:
    if len(url) <= len("sqlite:///"):
        raise ValueError("must be sqlite:///PATH (e.g. sqlite:///runonce.db)")


def _check_firestore(url: str) -> None:
    if url != "firestore":
        raise ValueError("must be exactly 'firestore' (project, database and collection are RUNONCE_FIRESTORE_*)")


def _open_sqlite(url: str, timeout: float, options: dict[str, Any]) -> RunStore:
    from runonce.stores.sqlite import SQLiteStore

    return SQLiteStore.from_url(url, timeout)


def _open_firestore(url: str, timeout: float, options: dict[str, Any]) -> RunStore:
    from google.auth.exceptions import DefaultCredentialsError

    from runonce.stores.firestore import FirestoreStore  # imports grpc: only when configured

    try:
        return FirestoreStore(
            project=options.get("firestore_project"),
            database=options.get("firestore_database", "(default)"),
            collection=options.get("firestore_collection", "runonce_runs"),
            timeout_seconds=timeout,
        )
    except DefaultCredentialsError as exc:
        from runonce.settings import ConfigError

        raise ConfigError(
            "RUNONCE_STORE=firestore found no Google credentials: run `gcloud auth application-default "
            "login` (or set GOOGLE_APPLICATION_CREDENTIALS), or set FIRESTORE_EMULATOR_HOST to use an emulator"
        ) from exc


def _open_spanner(url: str, timeout: float, options: dict[str, Any]) -> RunStore:
    from runonce.stores.spanner import SpannerStore  # imports google-cloud-spanner: only when configured

    return SpannerStore(parse_spanner_url(url), timeout_seconds=timeout)


def _open_redis(url: str, timeout: float, options: dict[str, Any]) -> RunStore:
    from runonce.stores.redis import RedisStore  # imports redis-py: only when configured

    return RedisStore(parse_redis_url(url), timeout_seconds=timeout)


@dataclass(frozen=True)
class Backend:
    """One row of the registry: how `RUNONCE_STORE` names it, how its URL is checked and opened."""

    scheme: str
    form: str  # what the user writes, for error messages
    check: Callable[[str], Any]
    open: Callable[[str, float, dict[str, Any]], RunStore]
    extra: str | None = None  # `pip install 'runonce[EXTRA]'` installs its driver


BACKENDS: dict[str, Backend] = {
    b.scheme: b
    for b in (
        Backend("sqlite", "sqlite:///PATH", _check_sqlite, _open_sqlite),
        Backend("firestore", "firestore", _check_firestore, _open_firestore),
        Backend("spanner", "spanner://projects/P/instances/I/databases/D", parse_spanner_url, _open_spanner, "spanner"),
        Backend("redis", "redis://[:PASSWORD@]HOST:PORT/DB", parse_redis_url, _open_redis, "redis"),
        Backend("rediss", "rediss://[:PASSWORD@]HOST:PORT/DB?ca_file=PATH", parse_redis_url, _open_redis, "redis"),
    )
}


def backend_for(url: str) -> Backend:
    """The registry row for `url` (by scheme; `firestore` is a bare name)."""
    scheme = url.split("://", 1)[0] if "://" in url else url.split(":", 1)[0]
    backend = BACKENDS.get(scheme)
    if backend is None or ("://" in url) != ("://" in backend.form):
        forms = ", ".join(b.form for b in BACKENDS.values())
        raise ValueError(f"unknown store {url.split('?')[0]!r}: use one of {forms}")
    return backend


def check_store_url(url: str) -> str:
    """Validate `RUNONCE_STORE` without importing any driver (settings call this)."""
    backend_for(url).check(url)
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
    backend = backend_for(url)
    backend.check(url)
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
        from runonce.settings import ConfigError

        raise ConfigError(
            f"RUNONCE_STORE={backend.scheme}://… needs its driver: pip install 'runonce[{backend.extra}]' ({exc})"
        ) from exc


__all__ = [
    "BACKENDS",
    "Claim",
    "Decision",
    "Fenced",
    "Finish",
    "NewRun",
    "RunRecord",
    "RunStore",
    "StoreError",
    "StoreUnavailable",
    "check_store_url",
    "open_store",
    "parse_redis_url",
    "parse_spanner_url",
]
