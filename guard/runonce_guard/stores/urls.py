"""`RUNONCE_STORE` URLs for Spanner and Redis, in the server's forms and with its options.

The guard is a distribution of its own (job images install it without the server), so these
parsers repeat the server's `runonce/stores/__init__.py`; a test parses one corpus of URLs with
both and holds them to the same answers. The one difference is the default Spanner table:
steps live apart from delivery records (`runonce_steps`, not `runonce_runs`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

from ..errors import GuardConfigError

PROJECT_ID = r"[a-z][a-z0-9-]{4,28}[a-z0-9]"
DEFAULT_SPANNER_TABLE = "runonce_steps"


@dataclass(frozen=True)
class SpannerURL:
    """`spanner://projects/P/instances/I/databases/D[?table=runonce_steps]`"""

    project: str
    instance: str
    database: str
    table: str = DEFAULT_SPANNER_TABLE


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
        raise GuardConfigError(f"unknown option {unknown[0]!r} in {url.split('://')[0]}:// URL (options: {known})")
    return params


_SPANNER_PATH = re.compile(
    rf"spanner://projects/({PROJECT_ID})/instances/([a-z][a-z0-9-]*[a-z0-9])"
    r"/databases/([a-z][a-z0-9_-]*[a-z0-9])(\?.*)?"
)
_TABLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")


def parse_spanner_url(url: str) -> SpannerURL:
    match = _SPANNER_PATH.fullmatch(url)
    if match is None:
        raise GuardConfigError("must be spanner://projects/PROJECT/instances/INSTANCE/databases/DATABASE[?table=NAME]")
    table = _query(url, ("table",)).get("table", DEFAULT_SPANNER_TABLE)
    if not _TABLE_NAME.fullmatch(table):
        raise GuardConfigError(f"table {table!r} is not a Spanner table name (letters, digits, _; a letter first)")
    return SpannerURL(match[1], match[2], match[3], table)


def parse_redis_url(url: str) -> RedisURL:
    parts = urlsplit(url)
    if not parts.hostname:
        raise GuardConfigError("must be redis://[:PASSWORD@]HOST:PORT/DB or rediss://… (a host is required)")
    try:
        port = parts.port or 6379
    except ValueError as exc:
        raise GuardConfigError(f"bad port in {parts.scheme}:// URL: {exc}") from exc
    db_text = parts.path.strip("/") or "0"
    if not re.fullmatch(r"[0-9]{1,5}", db_text):
        raise GuardConfigError(f"the database number must be an integer, got {db_text!r}")
    tls = parts.scheme == "rediss"
    params = _query(url, ("wait_replicas", "ca_file") if tls else ("wait_replicas",))
    wait = params.get("wait_replicas", "0")
    if not re.fullmatch(r"[0-9]{1,2}", wait) or int(wait) > 16:
        raise GuardConfigError(f"wait_replicas must be an integer from 0 to 16, got {wait!r}")
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
