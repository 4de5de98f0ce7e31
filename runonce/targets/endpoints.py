"""Where runonce may send a Google API call, and with it the bearer token: one rule for a route's
`endpoint` (google_api) and every `RUNONCE_<NAME>_ENDPOINT` setting.

    https://HOST[:PORT]       HOST is googleapis.com or a name under it: regional hosts
                              (us-central1-aiplatform.googleapis.com), Private Service Connect
                              (*.p.googleapis.com), mTLS (*.mtls.googleapis.com)
    http://LOOPBACK[:PORT]    a local fake or emulator: 127.0.0.0/8, [::1] or localhost (plaintext)

The endpoint is a bare origin: no user or password, path, query or fragment (a lone trailing `/`
is the origin itself), and a port from 1 to 65535. Anything else would send the token to another
host, or the call to another path than the one the run records.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, urlsplit

GOOGLE_DOMAIN = "googleapis.com"
LOOPBACK_NAMES = ("localhost",)
RULE = (
    f"https://HOST[:PORT] with HOST under {GOOGLE_DOMAIN} (e.g. https://batch.googleapis.com, "
    f"https://us-central1-aiplatform.googleapis.com), or http://127.0.0.1:PORT (a loopback address: a local "
    "fake), with no user, path, query or fragment"
)
"""What an endpoint may be, in words (every refusal ends with it)."""

_HOST_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


def endpoint_problem(url: object) -> str | None:
    """Why `url` is not an endpoint runonce sends to (one line, never echoing a user or password),
    or None when it is one."""
    if not isinstance(url, str):
        return f"must be a URL (text), got {type(url).__name__}; use {RULE}"
    if any(char.isspace() or ord(char) < 0x20 or ord(char) == 0x7F for char in url) or "\\" in url:
        return f"holds a space, control character or backslash; use {RULE}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return f"has no valid port (1-65535) or host; use {RULE}"
    problem = _shape_problem(parts, url)
    if problem:
        return f"{problem}; use {RULE}"
    if port is not None and not 1 <= port <= 65535:  # urlsplit allows 0
        return f"port {port} is not from 1 to 65535; use {RULE}"
    host = (parts.hostname or "").lower()
    if url.lower().startswith("https://"):
        if not _google_host(host):
            return f"host {host!r} is not under {GOOGLE_DOMAIN}: the call carries a Google access token; use {RULE}"
        return None
    if not _loopback(host):
        return (
            f"http:// (plaintext) is only for a loopback address (a local fake), not {host!r}: the call carries "
            f"a Google access token; use {RULE}"
        )
    return None


def _shape_problem(parts: SplitResult, url: str) -> str | None:
    if f"{parts.scheme}://" not in ("https://", "http://"):
        return f"scheme {parts.scheme + '://' if parts.scheme else 'missing'}: only https:// (http:// to loopback)"
    if not url.lower().startswith(f"{parts.scheme}://"):
        return "must start with https:// or http://"
    if "@" in parts.netloc:
        return "holds a user or password (before '@'); credentials come from the service account"
    if not parts.hostname:
        return "has no host"
    if parts.path not in ("", "/"):
        return f"has a path ({parts.path!r}): the API's paths come from its description"
    if parts.query or url.rstrip("/").endswith("?"):
        return "has a query ('?…')"
    if parts.fragment or "#" in url:
        return "has a fragment ('#…')"
    if parts.netloc.endswith(":"):
        return "has an empty port"
    return None


def _google_host(host: str) -> bool:
    """`googleapis.com` or a DNS name under it, each label a valid host label (no trailing dot)."""
    if host != GOOGLE_DOMAIN and not host.endswith("." + GOOGLE_DOMAIN):
        return False
    return all(_HOST_LABEL.fullmatch(label) for label in host.split("."))


def _loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1 is 127.0.0.1
    return address.is_loopback or bool(mapped and mapped.is_loopback)


def check_endpoint(url: str | None) -> str | None:
    """`url` when it is an endpoint runonce sends to (None stays None: Google's), else ValueError."""
    if url is None:
        return None
    problem = endpoint_problem(url)
    if problem:
        raise ValueError(problem)
    return url
