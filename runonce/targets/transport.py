"""The HTTP client every target sends through: httpx's API over aiohttp's connection pool.

Why (cold start and CPU per delivery, bench/PROFILE.md): an httpx POST over its own transport
(httpcore, anyio streams, h11) cost about 1.1 ms of CPU; over aiohttp's C-accelerated pool it costs
about 0.2 ms (`bench/bench_transport.py`).
Targets, their tests and their error handling keep speaking httpx; only the wire changes.

Why not the `httpx-aiohttp` package: it maps `aiohttp.ClientConnectionError`, which covers a reset
after the request was sent and a read timeout, to `httpx.ConnectTimeout`, i.e. "nothing was sent"
(`NOTHING_SENT`), so a request that may have reached the target would release its claim and be
sent again. Here the rule is the one `targets/base.py` states: only an error raised before a byte
of the request left is a connect error; every other failure leaves the outcome unknown.

    aiohttp raised                                        httpx raised here      the claim
    ConnectionTimeoutError (connect, or waiting for a     ConnectTimeout         released
      pooled connection)
    ClientConnectorError (refused, DNS, TLS handshake)    ConnectError           released
    InvalidURL, NonHttpUrlClientError (not http(s))       UnsupportedProtocol    released
    SocketTimeoutError, any other ServerTimeoutError      ReadTimeout            kept
    any other ClientError (reset, disconnect, bad HTTP)   RemoteProtocolError    kept

httpx's timeouts map to aiohttp's: `pool` + `connect` -> `connect` (aiohttp counts the wait for a
pooled connection and the connecting together), `read` -> `sock_read`. aiohttp has no write
timeout; the Runner's dispatch deadline bounds every call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from urllib.request import getproxies as proxies_from_environment

import aiohttp
import httpx

from runonce.tls import client_context

USER_AGENT = "runonce/0.1"
MAX_HEADER_BYTES = 100 * 1024
MAX_HEADERS = 1024

_NOT_SENT_BY_HTTPX = frozenset({"Accept", "Accept-Encoding", "Content-Type", "User-Agent"})
"""Headers aiohttp would add by itself: httpx's request already says all it means to send."""


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    """aiohttp's errors as the httpx errors that mean the same for the claim (table above). The
    httpx client attaches the request to each."""
    try:
        yield
    except aiohttp.ConnectionTimeoutError as exc:
        raise httpx.ConnectTimeout(str(exc) or "timed out connecting") from exc
    except aiohttp.ServerTimeoutError as exc:
        raise httpx.ReadTimeout(str(exc) or "timed out reading the answer") from exc
    except aiohttp.ClientConnectorError as exc:
        raise httpx.ConnectError(str(exc)) from exc
    except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError) as exc:
        raise httpx.UnsupportedProtocol(f"cannot send to {exc}") from exc
    except aiohttp.ClientError as exc:
        raise httpx.RemoteProtocolError(f"{type(exc).__name__}: {exc}") from exc


def _timeout(timeouts: Mapping[str, float | None]) -> aiohttp.ClientTimeout:
    """httpx's timeouts in aiohttp's terms (table above); unbounded where httpx's are."""
    connect, pool = timeouts.get("connect"), timeouts.get("pool")
    bound = None if connect is None or pool is None else connect + pool
    return aiohttp.ClientTimeout(connect=bound, sock_read=timeouts.get("read"))


_HTTPX_DEFAULT_LIMITS = httpx.Limits()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """An httpx transport on one `aiohttp.ClientSession`, opened on first use (it needs the event
    loop) and closed with the client. Pool limits and keep-alive expiry are httpx's defaults."""

    def __init__(self, limits: httpx.Limits = _HTTPX_DEFAULT_LIMITS) -> None:
        self._limits = limits
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self._limits.max_connections or 0,
            keepalive_timeout=self._limits.keepalive_expiry,
            ssl=client_context(),  # httpx's trust store (certifi), as before; loaded once per process
        )
        # HTTP(S)_PROXY / NO_PROXY are honoured, as by httpx's own transport. Only when one is set:
        # aiohttp's trust_env looks the proxy (and ~/.netrc) up again on a thread for every request.
        self._session = aiohttp.ClientSession(
            connector=connector,
            trust_env=bool(proxies_from_environment()),
            # httpx decodes, as with its own transport
            auto_decompress=False,  # pragma: no mutate - aiohttp's parsers read None as false too
            # httpx keeps the client's cookies; a second jar only holds memory
            cookie_jar=aiohttp.DummyCookieJar(),  # pragma: no mutate
            # httpcore read header lines up to 100 KiB; aiohttp's default stops at 8 KiB
            max_field_size=MAX_HEADER_BYTES,
            max_headers=MAX_HEADERS,
        )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._session or self._open()
        content = await request.aread()
        with _mapped():
            async with session.request(
                request.method,
                str(request.url),
                headers=[
                    (name.decode("latin-1"), value.decode("latin-1"))  # pragma: no mutate - codec names ignore case
                    for name, value in request.headers.raw
                ],
                data=content or None,
                skip_auto_headers=_NOT_SENT_BY_HTTPX,
                allow_redirects=False,  # pragma: no mutate - aiohttp follows redirects only if true; None is not
                timeout=_timeout(request.extensions.get("timeout", {})),
            ) as answer:
                body = await answer.read()
        return httpx.Response(
            status_code=answer.status,
            headers=answer.raw_headers,
            stream=httpx.ByteStream(body),
            extensions={
                "reason_phrase": answer.reason.encode("latin-1")  # pragma: no mutate - codec names ignore case
            }
            if answer.reason
            else {},
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def target_client(timeout_seconds: float) -> httpx.AsyncClient:
    """The client the targets share: every request bounded by `timeout_seconds` (connect, read,
    pool), sent over aiohttp."""
    return httpx.AsyncClient(
        transport=AiohttpTransport(),
        timeout=httpx.Timeout(timeout_seconds),
        headers={"User-Agent": USER_AGENT},
    )
