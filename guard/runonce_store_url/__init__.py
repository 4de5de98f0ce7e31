"""`RUNONCE_STORE` URLs read one way, by the server (`runonce`) and by the guard (`runonce-guard`).

One module that both distributions ship (the guard's `pyproject.toml` and the server's each
package it from this directory), so a URL the one accepts the other accepts, and a refusal has the
same words in both. Standard library only: the guard must not pull in the server, nor the server the
guard. Each side adds its own policy on top (the guard refuses SQLite: a job's retries run on other
machines; the Spanner table's default differs).

A refusal never quotes the URL's user-info, option values, host or path: only its scheme and the
rule it broke. The user-info is everything between the scheme and the *last* `@`, so a password
with an unescaped `/`, `?`, `#`, `@` or `%` is taken whole and none of it is read as host, port,
path or option.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = [
    "FORMS",
    "RedisURL",
    "SpannerURL",
    "StoreURLError",
    "check_store_url",
    "parse_redis_url",
    "parse_spanner_url",
    "redact_store_url",
    "scheme_of",
    "scrub",
    "secrets_of",
    "split_credentials",
]

PROJECT_ID = r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$"
"""runonce/names.py's PROJECT_ID (tests/test_architecture.py holds the copy equal)."""

MAX_URL_CHARS = 4096
"""A longer store URL is refused unread."""


class StoreURLError(ValueError):
    """A store URL that cannot be used; its message names the rule, never the URL's secrets."""


FORMS = {
    "sqlite": "sqlite:///PATH",
    "firestore": "firestore",
    "spanner": "spanner://projects/P/instances/I/databases/D",
    "redis": "redis://[:PASSWORD@]HOST:PORT/DB",
    "rediss": "rediss://[:PASSWORD@]HOST:PORT/DB?ca_file=PATH",
}
"""Every store scheme, as its URL is written."""


@dataclass(frozen=True)
class SpannerURL:
    """`spanner://projects/P/instances/I/databases/D[?table=T]`"""

    project: str
    instance: str
    database: str
    table: str


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


_SCHEME_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,30}:/*")


def split_credentials(url: str) -> tuple[str, str | None]:
    """(`url` without its `user:password@`, that user-info or None).

    The user-info is everything between the scheme (with however many slashes follow it: a
    mistyped `redis:/:PASSWORD@host` too) and the *last* `@`."""
    prefix = _SCHEME_PREFIX.match(url)
    start = prefix.end() if prefix else 0
    rest = url[start:]
    if "@" not in rest:
        return url, None
    userinfo, _, host = rest.rpartition("@")
    return url[:start] + host, userinfo


KNOWN_OPTIONS = ("table", "wait_replicas", "ca_file")
"""Store URL options that are settings, not secrets: shown as they are."""


def redact_store_url(url: str) -> str:
    """`url` as it may be shown in a log line or a command's output: `user:password@` becomes
    `***@`, and the value of every option but the stores' own becomes `***`."""
    bare, userinfo = split_credentials(url)
    if userinfo is not None:
        prefix = _SCHEME_PREFIX.match(bare)
        start = prefix.end() if prefix else 0
        bare = f"{bare[:start]}***@{bare[start:]}"
    base, sep, query = bare.partition("?")
    if not sep:
        return bare
    shown = []
    for item in query.split("&"):
        name, eq, _ = item.partition("=")
        shown.append(item if name in KNOWN_OPTIONS else f"{name}{eq}***" if eq else "***")
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
            if name not in KNOWN_OPTIONS:
                found += [value, unquote(value)] if eq else [item, unquote(item)]
    return sorted({secret for secret in found if secret}, key=len, reverse=True)


def scrub(message: str, url: str) -> str:
    """`message` with every secret of `url` replaced by `***`: a second guard, as messages are
    written never to quote them. (Secrets under 4 characters are left: replacing a one-letter user
    name everywhere would garble the message and hide nothing worth hiding.)"""
    for secret in secrets_of(url):
        if len(secret) >= 4:
            message = message.replace(secret, "***")
    return message


def scheme_of(url: str) -> str:
    """The store `url` names, by its scheme (`firestore` is a bare word). StoreURLError when there
    is none, quoting the scheme alone (the rest may hold a password)."""
    forms = ", ".join(FORMS.values())
    if len(url) > MAX_URL_CHARS:
        raise StoreURLError(f"a store URL of {len(url)} characters: at most {MAX_URL_CHARS}; use one of {forms}")
    scheme, sep, _ = url.partition("://")
    if sep and scheme in FORMS and scheme != "firestore":
        return scheme
    if url == "firestore":
        return url
    word = re.match(r"[A-Za-z][A-Za-z0-9+.-]{0,30}", url)
    if word and word[0].lower() in FORMS and url != word[0]:  # redis:/…, redis:…, firestore://…
        name = word[0].lower()
        how = " (its scheme, then ://)" if "://" in FORMS[name] else ", that word alone"
        raise StoreURLError(f"a {name} store is written {FORMS[name]}{how}")
    if sep and word and word.end() == len(scheme):
        shown = f"{scheme}://…"
    elif re.fullmatch(r"[a-z]{1,20}", url):
        shown = url  # a bare word such as `memory`: nothing in it to hide
    else:
        shown = "…"
    raise StoreURLError(f"unknown store {shown!r}: use one of {forms}")


def _query(url: str, scheme: str, allowed: tuple[str, ...]) -> dict[str, str]:
    """The URL's options. An unknown one is named (when it is a name), never its value."""
    params = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        known = ", ".join(allowed) or "none"
        name = unknown[0]
        named = f"option {name!r}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,30}", name) and name in url else "option"
        raise StoreURLError(f"unknown {named} in {scheme}:// URL (options: {known})")
    return params


_SPANNER_PATH = re.compile(
    rf"spanner://projects/({PROJECT_ID[1:-1]})/instances/([a-z][a-z0-9-]*[a-z0-9])"
    r"/databases/([a-z][a-z0-9_-]*[a-z0-9])(\?[^#]*)?"
)
_TABLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")


def parse_spanner_url(url: str, default_table: str) -> SpannerURL:
    match = _SPANNER_PATH.fullmatch(url)
    if match is None:
        raise StoreURLError("must be spanner://projects/PROJECT/instances/INSTANCE/databases/DATABASE[?table=NAME]")
    table = _query(url, "spanner", ("table",)).get("table", default_table)
    if not _TABLE_NAME.fullmatch(table):
        raise StoreURLError("the table option is not a Spanner table name (letters, digits, _; a letter first)")
    return SpannerURL(match[1], match[2], match[3], table)


_PORT = re.compile(r"[0-9]{1,5}")
_DB = re.compile(r"[0-9]{1,5}")
_WAIT = re.compile(r"[0-9]{1,2}")


def parse_redis_url(url: str) -> RedisURL:
    """The URL's parts. Every number is matched by its pattern before `int()` reads it."""
    bare, userinfo = split_credentials(url)
    try:
        parts = urlsplit(bare)
    except ValueError:  # an unbalanced [ or ] around an IPv6 host
        raise StoreURLError("an IPv6 host is written in brackets, as in redis://[::1]:6379/0") from None
    scheme = parts.scheme
    if parts.fragment or "#" in bare:
        raise StoreURLError(f"a {scheme}:// URL takes no #fragment (a # in the password is fine: it is read whole)")
    netloc = parts.netloc
    closing = netloc.rfind("]")  # an IPv6 host, `[::1]:6379`, has colons of its own
    host, colon, port_text = netloc.rpartition(":") if ":" in netloc[closing + 1 :] else (netloc, "", "")
    try:
        hostname = parts.hostname
    except ValueError:  # an unclosed `[` of an IPv6 host
        hostname = None
    if not host or not hostname:
        raise StoreURLError("must be redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] or rediss://… (a host is required)")
    if colon and not (_PORT.fullmatch(port_text) and 0 < int(port_text) <= 65535):
        raise StoreURLError(f"the port in a {scheme}:// URL must be a number from 1 to 65535 (ASCII digits)")
    db_text = parts.path.removeprefix("/") or "0"
    if not _DB.fullmatch(db_text):
        raise StoreURLError(f"the database number in a {scheme}:// URL must be an integer (ASCII digits), as in /0")
    tls = scheme == "rediss"
    params = _query(bare, scheme, ("wait_replicas", "ca_file") if tls else ("wait_replicas",))
    wait = params.get("wait_replicas", "0")
    if not (_WAIT.fullmatch(wait) and int(wait) <= 16):
        raise StoreURLError("wait_replicas must be an integer from 0 to 16 (ASCII digits)")
    username, password = None, None
    if userinfo is not None:
        user, has_password, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if has_password else None
    return RedisURL(
        host=hostname,
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
        raise StoreURLError(
            "must be sqlite:///PATH: sqlite:///runonce.db is runonce.db in the working directory, "
            "sqlite:////var/lib/runonce.db an absolute path (four slashes)"
        )
    if "?" in url or "#" in url:
        raise StoreURLError("sqlite:///PATH takes no options: a path with ? or # is not supported")


def check_store_url(url: str) -> str:
    """`url`'s scheme when it is a store URL of a form the stores take; StoreURLError (its message
    scrubbed of the URL's secrets) otherwise. Imports no driver."""
    try:
        scheme = scheme_of(url)
        if scheme == "sqlite":
            _check_sqlite(url)
        elif scheme == "spanner":
            parse_spanner_url(url, "runonce_runs")
        elif scheme in ("redis", "rediss"):
            parse_redis_url(url)
    except StoreURLError as exc:
        raise StoreURLError(scrub(str(exc), url)) from None
    return scheme
