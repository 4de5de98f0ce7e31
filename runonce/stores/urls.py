"""Store URLs parsed into their parts: what `check_store_url` validates and the drivers connect with.

Its own module, below the registry in `__init__.py`: a driver's module imports its URL type from
here, so no store module imports the registry that opens it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
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
