"""Claim stores: one module each behind `RunStore` (see `base.py` for the rules they share).

The registry below is the one table of backends: `RUNONCE_STORE`'s scheme picks the row, settings
validation (`check_store_url`) and `open_store` both read it, and a backend's options live in its
URL. A backend's SDK is imported only by its own module, and that module only when it is configured.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
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
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    ca_file: str | None = None
    wait_replicas: int = 0


def _query(url: str, allowed: tuple[str, ...]) -> dict[str, str]:
    """The URL's options. An unknown one is named, never its value (it may be a token)."""
    params = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        known = ", ".join(allowed) or "none"
        raise ValueError(f"unknown option {unknown[0]!r} in {url.split('://')[0]}:// URL (options: {known})")
    return params


def split_credentials(url: str) -> tuple[str, str | None]:
    """(`url` without its `user:password@`, that user-info or None).

    The user-info is everything between `://` and the *last* `@`, so a password with an unescaped
    `/`, `?`, `#` or `@` is still taken whole: no part of it is ever parsed as host, port, path or
    option, and so none can reach an error message.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url, None
    userinfo, _, host = rest.rpartition("@")
    return f"{scheme}://{host}", userinfo


_KNOWN_OPTIONS = ("table", "wait_replicas", "ca_file")
"""Store URL options that are settings, not secrets: shown as they are."""


def redact_store_url(url: str) -> str:
    """`url` as it may be shown in a log line, an error or a command's output: `user:password@`
    becomes `***@`, and the value of every option but runonce's own becomes `***`."""
    bare, userinfo = split_credentials(url)
    if userinfo is not None:
        scheme, _, host = bare.partition("://")
        bare = f"{scheme}://***@{host}"
    base, sep, query = bare.partition("?")
    if not sep:
        return bare
    shown = []
    for item in query.split("&"):
        name, eq, _ = item.partition("=")
        shown.append(item if name in _KNOWN_OPTIONS else f"{name}{eq}***" if eq else "***")
    return f"{base}?{'&'.join(shown)}"


def secrets_of(url: str) -> list[str]:
    """The parts of a store URL that must never be shown, as written and percent-decoded (what
    `redact_store_url` hides): the user-info and its parts, and every unknown option's value."""
    bare, userinfo = split_credentials(url)
    found: list[str] = []
    if userinfo:
        user, _, password = userinfo.partition(":")
        found += [userinfo, user, password, unquote(user), unquote(password)]
    _, sep, query = bare.partition("?")
    if sep:
        for item in query.split("&"):
            name, eq, value = item.partition("=")
            if name not in _KNOWN_OPTIONS:
                found += [value, unquote(value)] if eq else [item, unquote(item)]
    return sorted({secret for secret in found if secret}, key=len, reverse=True)


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
        raise ValueError("the table option is not a Spanner table name (letters, digits, _; a letter first)")
    return SpannerURL(match[1], match[2], match[3], table)


_PORT = re.compile(r"[0-9]{1,5}")
_DB = re.compile(r"[0-9]{1,5}")


def parse_redis_url(url: str) -> RedisURL:
    """The URL's parts. Messages never quote its user-info or option values (see `split_credentials`)."""
    bare, userinfo = split_credentials(url)
    parts = urlsplit(bare)
    netloc = parts.netloc
    closing = netloc.rfind("]")  # an IPv6 host, `[::1]:6379`, has colons of its own
    host, colon, port_text = netloc.rpartition(":") if ":" in netloc[closing + 1 :] else (netloc, "", "")
    if not host or not parts.hostname:
        raise ValueError("must be redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] or rediss://… (a host is required)")
    if colon and not (_PORT.fullmatch(port_text) and 0 < int(port_text) <= 65535):
        raise ValueError(f"the port in a {parts.scheme}:// URL must be a number from 1 to 65535 (ASCII digits)")
    db_text = parts.path.removeprefix("/") or "0"
    if not _DB.fullmatch(db_text):
        raise ValueError(f"the database number in a {parts.scheme}:// URL must be an integer (ASCII digits), as in /0")
    tls = parts.scheme == "rediss"
    params = _query(bare, ("wait_replicas", "ca_file") if tls else ("wait_replicas",))
    wait = params.get("wait_replicas", "0")
    if not (re.fullmatch(r"[0-9]{1,2}", wait) and int(wait) <= 16):
        raise ValueError("wait_replicas must be an integer from 0 to 16 (ASCII digits)")
    username, password = None, None
    if userinfo is not None:
        user, has_password, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if has_password else None
    return RedisURL(
        host=parts.hostname,
        port=int(port_text) if colon else 6379,
        db=int(db_text),
        username=username,
        password=password,
        tls=tls,
        ca_file=params.get("ca_file") or None,
        wait_replicas=int(wait),
    )


def _check_sqlite(url: str) -> None:
    if not url.startswith("sqlite:///") or len(url) == len("sqlite:///"):
        raise ValueError(
            "must be sqlite:///PATH: sqlite:///runonce.db is runonce.db in the working directory, "
            "sqlite:////var/lib/runonce.db an absolute path (four slashes)"
        )
    if "?" in url or "#" in url:
        raise ValueError("sqlite:///PATH takes no options: a path with ? or # is not supported")


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
        raise _no_credentials("firestore", "FIRESTORE_EMULATOR_HOST") from exc


def _no_credentials(store: str, emulator: str) -> Exception:
    from runonce.settings import ConfigError

    return ConfigError(
        f"RUNONCE_STORE={store}… found no Google credentials: run `gcloud auth application-default "
        f"login` (or set GOOGLE_APPLICATION_CREDENTIALS), or set {emulator} to use an emulator"
    )


def _open_spanner(url: str, timeout: float, options: dict[str, Any]) -> RunStore:
    from google.auth.exceptions import DefaultCredentialsError

    from runonce.stores.spanner import SpannerStore  # imports google-cloud-spanner: only when configured

    try:
        return SpannerStore(parse_spanner_url(url), timeout_seconds=timeout)
    except DefaultCredentialsError as exc:
        raise _no_credentials("spanner://", "SPANNER_EMULATOR_HOST") from exc


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
        raise ValueError(f"unknown store {redact_store_url(url).split('?')[0]!r}: use one of {forms}")
    return backend


def scrub(message: str, url: str) -> str:
    """`message` with every secret of `url` (`secrets_of`) replaced by `***`: a second guard, as
    messages are written never to quote them. (Secrets under 4 characters are left: replacing a
    one-letter user name everywhere would garble the message and hide nothing worth hiding.)"""
    for secret in secrets_of(url):
        if len(secret) >= 4:
            message = message.replace(secret, "***")
    return message


def check_store_url(url: str) -> str:
    """Validate `RUNONCE_STORE` without importing any driver (settings call this). The error never
    quotes the URL's credentials or option values."""
    try:
        backend_for(url).check(url)
    except ValueError as exc:
        raise ValueError(scrub(str(exc), url)) from None
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
        from runonce.settings import ConfigError

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
    "RunRecord",
    "RunStore",
    "StoreError",
    "StoreUnavailable",
    "check_store_url",
    "open_store",
    "parse_redis_url",
    "parse_spanner_url",
    "redact_store_url",
    "scrub",
    "secrets_of",
]
