"""Store URLs parsed into their parts: what `check_store_url` validates and the drivers connect with.

Its own module, below the registry in `__init__.py`: a driver's module imports its URL type from
here, so no store module imports the registry that opens it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

from runonce import names


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
