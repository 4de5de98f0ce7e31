"""Google's token-signing certificates, cached in-process.

google-auth's `id_token.verify_token()` downloads the certificates on every call; at one delivery a
minute that is harmless, under a flood of forged tokens it turns runonce into an amplifier against
Google's endpoint (and makes every request wait for it). So runonce keeps one copy per process:

    fresh, kid known        -> no fetch
    expired / never fetched -> fetch (not within RETRY_AFTER_FAILURE of a failed attempt)
    fresh, kid unknown      -> fetch only if the last attempt is UNKNOWN_KID_INTERVAL old
                               (Google publishes a new key before signing with it, so a real
                               rotation is picked up within a minute; random kids cost nothing)

The copy lives as long as the response's `Cache-Control: max-age` (minus `Age`) says, clamped to
[MIN_LIFETIME, MAX_LIFETIME] so that a missing or zero max-age cannot make every request fetch.
When a refresh fails, the expired copy stays in use (Google keeps retired keys published for days)
and a warning is logged; with no copy at all, `get()` raises `CertsUnavailable` (runonce answers 503).

Fetches are async (httpx) and serialized by one lock: a thousand concurrent requests for an unknown
kid cause one fetch, not a thousand.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import httpx
from google.auth import crypt

from runonce.errors import RunonceError

logger = logging.getLogger("runonce.auth")

UNKNOWN_KID_INTERVAL = 60.0
"""Seconds between two fetches caused by tokens whose kid is not in the cached set."""

RETRY_AFTER_FAILURE = 10.0
"""Seconds to wait after a failed fetch before trying again."""

MIN_LIFETIME = 60.0
MAX_LIFETIME = 24 * 3600.0

FETCH_TIMEOUT_SECONDS = 5.0


class CertsUnavailable(RunonceError):
    """The certificates endpoint could not be read and no copy was ever fetched."""


class CertCache:
    """`{kid: PEM certificate}` from `url` (Google's: https://www.googleapis.com/oauth2/v1/certs).

    `clock` (monotonic seconds) is injectable so tests can move time without sleeping.
    `fetches` counts fetch attempts, successful or not.
    """

    def __init__(
        self,
        url: str,
        http: httpx.AsyncClient,
        *,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.url = url
        self._http = http
        self._clock = clock
        self._lock = asyncio.Lock()
        self._certs: dict[str, str] = {}
        self._expires_at = float("-inf")
        self._last_attempt = float("-inf")
        self._failed_at: float | None = None
        self._last_error = "not fetched yet"
        self.fetches = 0

    async def get(self, kid: str) -> str | None:
        """The PEM certificate for `kid`, or None if Google does not publish that key.

        Raises `CertsUnavailable` when no certificate set could ever be fetched.
        """
        if self._should_fetch(kid):
            async with self._lock:
                if self._should_fetch(kid):  # re-check: another request may have just fetched
                    await self._fetch()
        if not self._certs:
            raise CertsUnavailable(f"cannot read Google's signing certificates from {self.url}: {self._last_error}")
        return self._certs.get(kid)

    def _should_fetch(self, kid: str) -> bool:
        now = self._clock()
        if self._failed_at is not None and now - self._failed_at < RETRY_AFTER_FAILURE:
            return False
        if now >= self._expires_at:
            return True
        return kid not in self._certs and now - self._last_attempt >= UNKNOWN_KID_INTERVAL

    async def _fetch(self) -> None:
        now = self._clock()
        self._last_attempt = now
        self.fetches += 1
        try:
            response = await self._http.get(self.url, timeout=FETCH_TIMEOUT_SECONDS)
            response.raise_for_status()
            certs = _parse_certs(response.json())
        except (httpx.HTTPError, ValueError) as exc:
            self._failed_at = now
            self._last_error = f"{type(exc).__name__}: {exc}"
            kept = f"keeping the {len(self._certs)} expired certificate(s)" if self._certs else "no certificates yet"
            logger.warning("fetching signing certificates from %s failed (%s); %s", self.url, self._last_error, kept)
            return
        lifetime = _lifetime(response.headers)
        self._certs = certs
        self._expires_at = now + lifetime
        self._failed_at = None
        logger.info(
            "fetched %d signing certificate(s) from %s (kids %s), cached for %ds",
            len(certs),
            self.url,
            ", ".join(sorted(certs)),
            lifetime,
        )


def _parse_certs(data: object) -> dict[str, str]:
    """The `{kid: PEM}` object, keeping only certificates google-auth can load."""
    if not isinstance(data, dict) or not data:
        raise ValueError("expected a non-empty JSON object of {kid: PEM certificate}")
    certs = {}
    for kid, pem in data.items():
        try:
            if not isinstance(pem, str):
                raise ValueError("not a string")
            crypt.RSAVerifier.from_string(pem)
        except ValueError as exc:
            logger.warning("ignoring signing certificate %r from the certs endpoint: %s", kid, exc)
            continue
        certs[kid] = pem
    if not certs:
        raise ValueError("no usable certificate in the response")
    return certs


def _lifetime(headers: httpx.Headers) -> float:
    """Seconds the response may be cached: `max-age` minus `Age`, clamped to [MIN, MAX]_LIFETIME."""
    max_age = None
    for directive in headers.get("cache-control", "").split(","):
        name, _, value = directive.strip().partition("=")
        if name.lower() == "max-age" and value.strip().isdigit():
            max_age = int(value)
    if max_age is None:
        return MIN_LIFETIME
    age = headers.get("age", "0").strip()
    remaining = max_age - (int(age) if age.isdigit() else 0)
    return min(max(float(remaining), MIN_LIFETIME), MAX_LIFETIME)
