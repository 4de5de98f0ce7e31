"""The targets' HTTP transport (httpx over aiohttp) against real sockets: what arrives, what comes
back, and which failures say "nothing was sent" (claim released) or "it may have arrived" (claim
kept). The last is the rule a duplicate depends on, so each fault is provoked for real."""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import json
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from runonce import tls
from runonce.targets import DispatchRequest, TargetFailed, TargetOutcomeUnknown
from runonce.targets.base import NOTHING_SENT
from runonce.targets.http import HttpTarget, HttpTargetConfig
from runonce.targets.transport import AiohttpTransport, target_client

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Server:
    """A loopback TCP server whose handler decides what each connection gets."""

    def __init__(self, handle: Handler, ssl: ssl.SSLContext | None = None):
        self.handle = handle
        self.ssl = ssl
        self.connections = 0
        self.requests: list[tuple[str, dict[str, str], bytes]] = []

    async def __aenter__(self) -> Server:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await self.handle(self, reader, writer)
            finally:
                writer.close()

        self._server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=self.ssl)
        scheme = "https" if self.ssl else "http"
        self.url = f"{scheme}://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bool:
        """Read one whole request (False: the client closed the connection)."""
        head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
        if not head:
            return False
        line, *fields = head.decode("latin-1").split("\r\n")
        headers = dict(field.split(": ", 1) for field in fields if field)
        length = int({k.lower(): v for k, v in headers.items()}.get("content-length", 0))
        body = await reader.readexactly(length) if length else b""
        self.requests.append((line, headers, body))
        return True


def answering(status: int = 200, body: bytes = b'{"ok":true}', headers: str = "", reason: str = "Whatever") -> Handler:
    async def handle(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await server.read_request(reader):
                writer.write(
                    f"HTTP/1.1 {status} {reason}\r\nContent-Length: {len(body)}\r\n{headers}\r\n".encode() + body
                )
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass

    return handle


async def reset_after_reading(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await server.read_request(reader)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # close -> RST
    writer.transport.abort()


async def close_after_reading(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await server.read_request(reader)


async def never_answer(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await server.read_request(reader)
    await asyncio.sleep(30)


async def garbage(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await server.read_request(reader)
    writer.write(b"this is not HTTP\r\n\r\n")
    await writer.drain()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    http = target_client(2.0)
    yield http
    await http.aclose()


async def test_the_request_arrives_as_httpx_built_it(client: httpx.AsyncClient) -> None:
    async with Server(answering()) as server:
        answer = await client.post(
            f"{server.url}/run?x=1",
            content=b'{"a":1}',
            headers={"Idempotency-Key": "k" * 64, "Content-Type": "application/json"},
        )
        await client.get(f"{server.url}/state")
    assert answer.status_code == 200 and answer.json() == {"ok": True} and answer.reason_phrase == "Whatever"
    assert answer.http_version == "HTTP/1.1"
    (post_line, post, body), (get_line, get, get_body) = server.requests
    assert post_line == "POST /run?x=1 HTTP/1.1" and body == b'{"a":1}'
    assert post["Idempotency-Key"] == "k" * 64 and post["Content-Type"] == "application/json"
    assert post["User-Agent"] == "runonce/0.1" and post["Content-Length"] == "7"
    assert get_line == "GET /state HTTP/1.1" and get_body == b""
    assert "Content-Type" not in get and "Content-Length" not in get  # nothing aiohttp made up
    assert [k for k in post if k.lower() == "content-type"] == ["Content-Type"]  # once, as given


async def test_a_body_without_a_content_type_goes_without_one(client: httpx.AsyncClient) -> None:
    async with Server(answering()) as server:
        await client.post(server.url, content=b"raw")
    [(_, headers, body)] = server.requests
    assert body == b"raw" and "Content-Type" not in headers  # aiohttp would say application/octet-stream


async def test_a_redirect_is_answered_not_followed(client: httpx.AsyncClient) -> None:
    async with Server(answering(302, b"", "Location: /elsewhere\r\n")) as server:
        answer = await client.post(f"{server.url}/run", content=b"{}")
    assert answer.status_code == 302 and answer.headers["location"] == "/elsewhere"
    assert len(server.requests) == 1  # a POST is sent once, wherever the target points


async def test_answers_keep_their_status_headers_and_encoded_body(client: httpx.AsyncClient) -> None:
    packed = gzip.compress(json.dumps({"error": "busy"}).encode())
    async with Server(answering(503, packed, "Content-Encoding: gzip\r\nRetry-After: 7\r\n")) as server:
        answer = await client.post(server.url, content=b"{}")
    assert answer.status_code == 503 and answer.headers["retry-after"] == "7"
    assert answer.json() == {"error": "busy"}  # httpx decodes, as with its own transport


async def test_an_answer_without_a_reason_phrase_gets_its_statuss_own(client: httpx.AsyncClient) -> None:
    """As with httpx's own transport; a Google target's error message falls back to it."""
    async with Server(answering(503, b"", reason="")) as server:
        answer = await client.post(server.url, content=b"{}")
    assert (answer.status_code, answer.reason_phrase) == (503, "Service Unavailable")


async def test_a_pool_without_a_connection_limit_opens_as_many_as_requests_in_flight() -> None:
    """httpx.Limits(max_connections=None) means no limit, not one connection."""
    both_arrived = asyncio.Event()

    async def answer_once_both_arrived(
        server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await server.read_request(reader)
        if server.connections == 2:
            both_arrived.set()
        await both_arrived.wait()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    http = httpx.AsyncClient(transport=AiohttpTransport(httpx.Limits(max_connections=None)), timeout=5)
    async with Server(answer_once_both_arrived) as server:
        answers = await asyncio.gather(http.post(server.url, content=b"{}"), http.post(server.url, content=b"{}"))
    await http.aclose()
    assert [a.status_code for a in answers] == [200, 200]


def _certificate_authority(tmp_path: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA of our own (its certificate written to a file) and a server context for 127.0.0.1 it signed."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.now(UTC)

    def issue(subject: str, key, issuer: x509.Name, signer, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1))
            .not_valid_after(now + timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ca:
            builder = builder.add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
        else:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
            )
        return builder.sign(signer, hashes.SHA256())

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "runonce test CA")])
    ca_cert = issue("runonce test CA", ca_key, ca_name, ca_key, ca=True)
    server_cert = issue("127.0.0.1", server_key, ca_name, ca_key, ca=False)
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "server.pem", tmp_path / "server.key"
    ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_file, key_file)
    return ca_file, server


async def test_https_trusts_what_httpx_trusts_including_ssl_cert_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CA named by SSL_CERT_FILE (a company's own, say) is trusted as by httpx's own transport:
    the transport verifies with the process's one client context (runonce/tls.py)."""
    ca_file, server_context = _certificate_authority(tmp_path)
    async with Server(answering(), ssl=server_context) as server:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):  # not trusted by default
            await _post_with_a_fresh_trust_store(server.url)
        monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
        answer = await _post_with_a_fresh_trust_store(server.url)
    assert answer.status_code == 200 and answer.json() == {"ok": True}


async def _post_with_a_fresh_trust_store(url: str) -> httpx.Response:
    """A POST from a new target client, whose TLS context is built anew from the environment."""
    tls.client_context.cache_clear()
    http = target_client(5.0)
    try:
        return await http.post(url, content=b"{}")
    finally:
        await http.aclose()
        tls.client_context.cache_clear()


async def test_big_headers_are_read_and_cookies_are_sent_back_once(client: httpx.AsyncClient) -> None:
    big = "x" * 40_000
    many = "".join(f"X-Many-{i}: {i}\r\n" for i in range(200))  # aiohttp's default stops at 128
    async with Server(answering(headers=f"X-Big: {big}\r\n{many}Set-Cookie: session=abc; Path=/\r\n")) as server:
        first = await client.post(server.url, content=b"{}")
        await client.post(server.url, content=b"{}")
    assert first.headers["x-big"] == big and first.headers["x-many-199"] == "199"
    (_, sent_first, _), (_, sent_second, _) = server.requests
    assert "Cookie" not in sent_first and sent_second["Cookie"] == "session=abc"  # httpx's cookie, once


async def test_connections_are_kept_alive_and_reused(client: httpx.AsyncClient) -> None:
    async with Server(answering()) as server:
        for _ in range(5):
            assert (await client.post(server.url, content=b"{}")).status_code == 200
    assert (len(server.requests), server.connections) == (5, 1)


async def test_an_idle_connection_is_not_reused_past_the_keep_alive_expiry() -> None:
    http = httpx.AsyncClient(transport=AiohttpTransport(httpx.Limits(keepalive_expiry=0.2)))
    async with Server(answering()) as server:
        await http.post(server.url, content=b"{}")
        await asyncio.sleep(1.0)  # a server may close an idle connection as the client reuses it
        await http.post(server.url, content=b"{}")
    await http.aclose()
    assert (len(server.requests), server.connections) == (2, 2)


async def test_the_clients_timeout_bounds_a_request_that_gets_no_answer() -> None:
    http = target_client(0.3)
    async with Server(never_answer) as server:
        with pytest.raises(httpx.ReadTimeout):
            await asyncio.wait_for(http.post(server.url, content=b"{}"), 10)  # not httpx's default 5 s per read
    await http.aclose()


async def test_a_connect_that_times_out_sent_nothing() -> None:
    """A listener whose backlog is full drops new SYNs: the connect hangs until its timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        filled = []
        for _ in range(4):  # the kernel admits backlog + 1 before dropping
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            filled.append(sock)
        await asyncio.sleep(0.1)
        http = target_client(0.3)
        try:
            with pytest.raises(httpx.ConnectTimeout) as raised:
                await asyncio.wait_for(http.post(f"http://127.0.0.1:{port}/", content=b"{}"), 10)
        finally:
            await http.aclose()
            for sock in filled:
                sock.close()
    assert isinstance(raised.value, NOTHING_SENT)


async def test_a_proxy_in_the_environment_is_used_as_httpx_would(monkeypatch: pytest.MonkeyPatch) -> None:
    async with Server(answering()) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        http = target_client(2.0)
        assert (await http.post("http://downstream.invalid/run", content=b"{}")).status_code == 200
        await http.aclose()
    [(line, _headers, body)] = proxy.requests
    assert line == "POST http://downstream.invalid/run HTTP/1.1" and body == b"{}"


async def test_a_refused_connection_sent_nothing() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: refused
        http = target_client(2.0)
        with pytest.raises(httpx.ConnectError) as raised:
            await http.post(f"http://127.0.0.1:{port}/", content=b"{}")
        await http.aclose()
    assert isinstance(raised.value, NOTHING_SENT)


async def test_a_wait_for_a_pooled_connection_that_times_out_sent_nothing() -> None:
    http = httpx.AsyncClient(
        transport=AiohttpTransport(httpx.Limits(max_connections=1)), timeout=httpx.Timeout(5.0, connect=0.2, pool=0.2)
    )
    async with Server(never_answer) as server:
        hanging = asyncio.ensure_future(http.post(server.url, content=b"first"))
        while not server.requests:
            await asyncio.sleep(0.01)
        with pytest.raises(httpx.ConnectTimeout) as raised:
            await http.post(server.url, content=b"second")
        hanging.cancel()
    await http.aclose()
    assert isinstance(raised.value, NOTHING_SENT)
    assert [body for _, _, body in server.requests] == [b"first"]


@pytest.mark.parametrize(
    ("handle", "error"),
    [
        (reset_after_reading, httpx.RemoteProtocolError),
        (close_after_reading, httpx.RemoteProtocolError),
        (garbage, httpx.RemoteProtocolError),
        (never_answer, httpx.ReadTimeout),
    ],
    ids=["reset", "closed", "not-http", "no-answer"],
)
async def test_a_failure_after_the_request_left_may_have_reached_it(handle: Handler, error: type) -> None:
    http = target_client(0.5)
    async with Server(handle) as server:
        with pytest.raises(httpx.TransportError) as raised:
            await http.post(server.url, content=b"{}")
    await http.aclose()
    assert type(raised.value) is error and not isinstance(raised.value, NOTHING_SENT)
    assert len(server.requests) == 1  # it did arrive
    assert raised.value.request.url == httpx.URL(server.url)


async def test_a_url_it_cannot_send_to_sent_nothing() -> None:
    transport = AiohttpTransport()
    with pytest.raises(httpx.UnsupportedProtocol) as raised:
        await transport.handle_async_request(httpx.Request("POST", "ftp://example.invalid/x", content=b"{}"))
    await transport.aclose()
    assert isinstance(raised.value, NOTHING_SENT)


REQUEST = DispatchRequest(run_id="0" * 64, route="r", job="j", schedule_time="2026-10-16T12:00:00Z", source="scheduler")


@pytest.mark.parametrize(
    ("handle", "outcome"),
    [
        (reset_after_reading, TargetOutcomeUnknown),
        (never_answer, TargetOutcomeUnknown),
        (answering(500), TargetFailed),
        (answering(504), TargetOutcomeUnknown),
    ],
    ids=["reset", "no-answer", "500", "504"],
)
async def test_the_http_target_over_it_keeps_the_claim_only_when_the_run_may_exist(
    handle: Handler, outcome: type
) -> None:
    http = target_client(0.5)
    async with Server(handle) as server:
        target = HttpTarget(HttpTargetConfig(type="http", url=server.url), http)
        with pytest.raises(outcome):
            await target.dispatch(REQUEST)
    await http.aclose()
    assert len(server.requests) == 1


@pytest.mark.parametrize("timeout", [httpx.Timeout(2.0, pool=None), httpx.Timeout(2.0, connect=None)])
async def test_a_timeout_bounding_only_one_of_connect_and_pool_leaves_the_connect_unbounded(
    client: httpx.AsyncClient, timeout: httpx.Timeout
) -> None:
    """aiohttp bounds the wait for a pooled connection and the connect together: when httpx bounds
    only one of them, the request still goes, with that wait unbounded."""
    async with Server(answering()) as server:
        answer = await client.post(server.url, content=b"{}", timeout=timeout)
    assert answer.status_code == 200 and len(server.requests) == 1
