"""The Redis store against a real redis-server, beyond the conformance suite (tests/test_stores.py):
what `runonce store init` does to records written before the index sets, what `list` and
`get_many` read and answer, what the store says when the server refuses a step, and how its
connections behave: TLS, the URL's host, the pool's bound, the store timeout, a reply lost on the
way, a replica that lags.

The network between the store and the server is a `Link` the test shapes (late replies, replies
held back, a connection that drops with the reply); the server is always a real redis-server."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import shutil
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from runonce.cli import main
from runonce.stores import RunRecord, RunStore, StoreUnavailable, open_store
from runonce.stores import redis as redis_store
from runonce.stores.base import COMPLETED, FAILED, IN_PROGRESS, Decision, Finish
from tests.support.backends import Server, start_redis
from tests.support.procs import require_services, wait_for
from tests.support.runs import LEASE, RETENTION, T0, claim, new_run
from tests.support.stores import redis_url

LOG_TARGET = {"type": "log", "resource": "x"}


def _record(run_id: str, route: str, status: str, created: datetime) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        status=status,  # type: ignore[arg-type]
        attempt_id="0" * 32,
        attempts=1,
        lease_expires=created + LEASE,
        expire_at=created + RETENTION,
        created_at=created,
        updated_at=created,
        route=route,
        source="scheduler",
        project="proj-1",
        location="us-central1",
        job="nightly",
        schedule_time=None,
        task=None,
        body_sha256="b" * 64,
        target=LOG_TARGET if status == COMPLETED else None,
    )


def _write_unindexed(client: redis.Redis, records: list[RunRecord], now: datetime) -> None:
    """Write `records` as a store from before the index sets did: each run key with its TTL, and
    no index entry."""
    with client.pipeline(transaction=False) as pipe:
        for record in records:
            ttl_ms = int((record.expire_at - now).total_seconds() * 1000)
            pipe.set(redis_store.KEY_PREFIX + record.run_id, redis_store._to_json(record), px=ttl_ms)
        pipe.execute()


def _url_of(server: Server) -> str:
    """The session's redis-server as a store URL, left as it is (not emptied)."""
    return f"redis://127.0.0.1:{server.port}/0"


def _ids(records: list[RunRecord]) -> list[str]:
    return [record.run_id for record in records]


@pytest.fixture
def admin(redis_server: Server) -> Iterator[redis.Redis]:
    """A client of the session's redis-server, emptied."""
    redis_url(redis_server)
    with redis.Redis(host="127.0.0.1", port=redis_server.port) as client:
        yield client


@pytest.fixture
def denied(redis_server: Server) -> Iterator[Callable[[str], str]]:
    """`denied(command)`: a store URL whose Redis user may run every command but `command` (an ACL)."""
    users: list[str] = []

    def url(command: str) -> str:
        user = f"runonce-no-{command}"
        with redis.Redis(host="127.0.0.1", port=redis_server.port) as client:
            client.acl_setuser(
                user,
                enabled=True,
                reset=True,
                passwords=["+pw"],
                keys=["*"],
                channels=["*"],
                commands=["+@all", f"-{command}"],
            )
        users.append(user)
        return f"redis://{user}:pw@127.0.0.1:{redis_server.port}/0"

    yield url
    with redis.Redis(host="127.0.0.1", port=redis_server.port) as client:
        for user in users:
            client.acl_deluser(user)


# -- `runonce store init` -------------------------------------------------------------------------


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def _listed(*args: str) -> list[str]:
    done = _cli("runs", "list", "--json", *args)
    assert done.exit_code == 0, done.output
    return [json.loads(line)["run_id"] for line in done.output.splitlines()]


def test_store_init_indexes_old_records_so_every_list_finds_them(
    admin: redis.Redis, redis_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records written before the index sets: `store init` puts each in the sets of its route and
    status, says so, and from then on `runs list` reads the sets (by route, by status, by both)
    and finds every run, newest first. A second `store init` finds nothing to do."""
    now = datetime.now(UTC)
    records = [
        _record("1" * 64, "etl", COMPLETED, now - timedelta(minutes=4)),
        _record("2" * 64, "etl", FAILED, now - timedelta(minutes=3)),
        _record("3" * 64, "report", COMPLETED, now - timedelta(minutes=2)),
        _record("4" * 64, "etl", COMPLETED, now - timedelta(minutes=1)),
    ]
    _write_unindexed(admin, records, now)
    monkeypatch.setenv("RUNONCE_STORE", _url_of(redis_server))

    first = _cli("store", "init")
    assert first.exit_code == 0, first.output
    assert "redis: indexed 4 run record(s) by route and status; lists read the index from now on\n" in first.output
    assert admin.exists(redis_store.INDEXED)

    assert _listed() == ["4" * 64, "3" * 64, "2" * 64, "1" * 64]
    assert _listed("--route", "etl") == ["4" * 64, "2" * 64, "1" * 64]
    assert _listed("--status", "completed") == ["4" * 64, "3" * 64, "1" * 64]
    assert _listed("--route", "etl", "--status", "completed") == ["4" * 64, "1" * 64]
    assert _listed("--route", "etl", "--status", "failed") == ["2" * 64]
    assert _listed("--route", "report", "--status", "failed") == []

    second = _cli("store", "init")
    assert second.exit_code == 0, second.output
    assert "redis: all 4 run record(s) were indexed already; nothing changed\n" in second.output
    assert _listed("--route", "etl") == ["4" * 64, "2" * 64, "1" * 64]


@pytest.mark.parametrize(
    "command",
    [
        "scan",  # reading the run keys
        "zmscore",  # asking which are indexed already
        "set",  # marking the store indexed, after the index entries
    ],
)
def test_store_init_the_server_refuses_is_an_error_naming_init(
    admin: redis.Redis, denied: Callable[[str], str], monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    now = datetime.now(UTC)
    _write_unindexed(admin, [_record("1" * 64, "etl", COMPLETED, now)], now)
    monkeypatch.setenv("RUNONCE_STORE", denied(command))
    done = _cli("store", "init")
    assert done.exit_code == 1
    assert done.output.startswith("Error: claim store unavailable: redis init: NoPermissionError: "), done.output
    assert command in done.output
    assert not admin.exists(redis_store.INDEXED)  # lists still scan: nothing relies on a half-built index


# -- list and get_many --------------------------------------------------------------------------


async def test_an_unindexed_store_is_warned_about_once(
    admin: redis.Redis, redis_server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """Records from before the index sets: every list still finds them (by scanning), and the
    operator is told once per process to run `runonce store init`."""
    _write_unindexed(admin, [_record("1" * 64, "etl", COMPLETED, T0 - timedelta(minutes=1))], T0)
    store = open_store(_url_of(redis_server))
    try:
        with caplog.at_level(logging.WARNING, logger="runonce.stores.redis"):
            assert _ids(await store.list(T0)) == ["1" * 64]
            assert _ids(await store.list(T0, route="etl")) == ["1" * 64]
    finally:
        await store.close()
    warnings = [r.getMessage() for r in caplog.records if r.name == "runonce.stores.redis"]
    assert warnings == ["redis run records are not indexed yet: listing runs scans every key; run `runonce store init`"]


async def test_a_routes_runs_stay_listed_as_it_claims_more(redis_server: Server) -> None:
    """Once lists read the index, each new claim's clean-up of expired entries leaves the route's
    live runs listed: every run of the day, newest first."""
    store = open_store(redis_url(redis_server))
    try:
        await claim(store, T0, new_run(run_id="1" * 64))
        assert _ids(await store.list(T0, route="etl")) == ["1" * 64]  # all indexed: lists read the sets now
        await claim(store, T0 + timedelta(hours=1), new_run(run_id="2" * 64))
        await claim(store, T0 + timedelta(hours=2), new_run(run_id="3" * 64))
        later = T0 + timedelta(hours=3)
        assert _ids(await store.list(later, route="etl")) == ["3" * 64, "2" * 64, "1" * 64]
        assert _ids(await store.list(later)) == ["3" * 64, "2" * 64, "1" * 64]
        assert _ids(await store.list(later, route="etl", status=IN_PROGRESS)) == ["3" * 64, "2" * 64, "1" * 64]
    finally:
        await store.close()


async def test_list_answers_as_many_runs_as_the_limit(redis_server: Server) -> None:
    """`limit=1` (the route status's last success) is the newest run; a limit of 0 is no runs,
    and asks the server nothing."""
    store = open_store(redis_url(redis_server))
    try:
        for i in range(3):
            await claim(store, T0 + timedelta(minutes=i), new_run(run_id=f"{i}" * 64))
        for _ in range(2):  # the first list marks the store indexed, the second reads the sets
            assert _ids(await store.list(T0, route="etl", limit=1)) == ["2" * 64]
            assert _ids(await store.list(T0, limit=2)) == ["2" * 64, "1" * 64]
        sent = store.round_trips  # type: ignore[attr-defined]
        assert await store.list(T0, limit=0) == []
        assert store.round_trips == sent  # type: ignore[attr-defined]
    finally:
        await store.close()


def _commands(client: redis.Redis) -> int:
    """Commands the server has run, its scripts' included (INFO itself left out)."""
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


async def test_a_routes_list_costs_the_same_however_busy_other_routes_are(
    admin: redis.Redis, redis_server: Server
) -> None:
    """A route's list (the overlap guard's, `runs list --route`) reads that route's index set:
    another route's newer runs add nothing to what the server does for it."""
    store = open_store(_url_of(redis_server))
    try:
        await claim(store, T0, new_run(run_id="e" * 64))
        assert _ids(await store.list(T0)) == ["e" * 64]  # all indexed: lists read the sets now

        async def cost() -> list[int]:
            spent = []
            for status in (None, IN_PROGRESS):
                before = _commands(admin)
                assert _ids(await store.list(T0, route="etl", status=status, limit=5)) == ["e" * 64]
                spent.append(_commands(admin) - before)
            return spent

        quiet = await cost()
        for i in range(30):
            await claim(store, T0 + timedelta(seconds=i + 1), new_run(run_id=f"{i:064x}", route="busy"))
        assert await cost() == quiet
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("command", "read"),
    [
        ("mget", "get_many"),  # the audit's batch read
        ("scan", "list"),  # a list of a store not indexed yet: reading the run keys
        ("zmscore", "list"),  # ... asking which are indexed already
        ("set", "list"),  # ... marking the store indexed, when they all are
    ],
)
async def test_a_read_the_server_refuses_is_unavailable_naming_the_read(
    admin: redis.Redis, redis_server: Server, denied: Callable[[str], str], command: str, read: str
) -> None:
    writer = open_store(_url_of(redis_server))
    if command == "set":
        await claim(writer, T0, new_run(run_id="1" * 64))  # indexed as it is written
    else:
        _write_unindexed(admin, [_record("1" * 64, "etl", COMPLETED, T0)], T0)
    store = open_store(denied(command))
    try:
        with pytest.raises(StoreUnavailable, match=f"^redis {read}: NoPermissionError: .*'{command}'"):
            if read == "get_many":
                await store.get_many(["1" * 64], T0)
            else:
                await store.list(T0)
    finally:
        await store.close()
        await writer.close()


# -- the network between the store and the server ------------------------------------------------


class Link:
    """A TCP link from the store to redis-server, shaped as a network can be. It forwards every
    byte as is until told otherwise: `slow(commands, seconds, piece)` makes the replies to
    `commands` arrive late, each piece of at most `piece` bytes `seconds` after the last;
    `stall()` holds every reply back until `resume()`; `lose_reply(command)` drops the connection
    instead of delivering the reply to the next `command` (the server ran it); `lag(marker,
    seconds)` holds replies back until one carries `marker`, then `seconds` longer. `accepted`
    counts the connections the store opened."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._slow: tuple[tuple[bytes, ...], float, int] | None = None
        self._lose: bytes | None = None
        self._lag: tuple[bytes, float] | None = None
        self._counted = asyncio.Condition()
        self._writers: list[asyncio.StreamWriter] = []
        self._serving: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Link:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close every connection, both ends, and return once they are closed."""
        self._flowing.set()
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        await asyncio.gather(*self._serving, return_exceptions=True)
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def slow(self, commands: tuple[bytes, ...], seconds: float, piece: int = 1 << 16) -> None:
        self._slow = (tuple(_marker(c) for c in commands), seconds, piece)

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def lose_reply(self, command: bytes) -> None:
        self._lose = _marker(command)

    def lag(self, marker: bytes, seconds: float) -> None:
        self._lag = (marker, seconds)
        self._flowing.clear()

    async def wait_accepted(self, count: int) -> None:
        async with self._counted:
            await self._counted.wait_for(lambda: self.accepted >= count)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        serving = asyncio.current_task()
        assert serving is not None
        self._serving.add(serving)
        async with self._counted:
            self.accepted += 1
            self._counted.notify_all()
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._writers += [writer, up_writer]
        state = {"slow": False, "lose": False}
        replies: asyncio.Queue[bytes | None] = asyncio.Queue()

        async def requests() -> None:
            while data := await reader.read(1 << 16):
                if self._slow is not None and any(m in data for m in self._slow[0]):
                    state["slow"] = True  # for the reply to come (a long command may span chunks)
                if self._lose is not None and self._lose in data:
                    self._lose, state["lose"] = None, True
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        async def receive() -> None:
            while data := await up_reader.read(1 << 16):
                if self._lag is not None and self._lag[0] in data:
                    asyncio.get_running_loop().call_later(self._lag[1], self._flowing.set)
                    self._lag = None
                replies.put_nowait(data)
            replies.put_nowait(None)

        async def deliver() -> None:
            while (data := await replies.get()) is not None:
                if state["lose"]:
                    writer.transport.abort()
                    up_writer.transport.abort()
                    return
                await self._flowing.wait()
                if state["slow"] and self._slow is not None:
                    state["slow"] = False
                    for piece in _pieces(data, self._slow[2]):
                        await asyncio.sleep(self._slow[1])
                        writer.write(piece)
                else:
                    writer.write(data)
                await writer.drain()
            writer.close()

        try:
            with contextlib.suppress(ConnectionError, OSError):
                await asyncio.gather(requests(), receive(), deliver())
        finally:
            writer.transport.abort()
            up_writer.transport.abort()
            await asyncio.sleep(0)  # the aborted sockets close on the loop's next turn


def _marker(command: bytes) -> bytes:
    return b"\r\n" + command.upper() + b"\r\n"  # a command's name as RESP sends it


def _pieces(data: bytes, size: int) -> Iterator[bytes]:
    """`data` in pieces of about `size` bytes, each cut just after a CRLF (a simple reply's end)."""
    start = 0
    while start < len(data):
        end = data.find(b"\r\n", start + size - 2)
        end = len(data) if end < 0 else end + 2
        yield data[start:end]
        start = end


@pytest.fixture
async def link(admin: redis.Redis, redis_server: Server) -> AsyncIterator[Link]:
    async with Link(redis_server.port) as shaped:
        yield shaped


async def test_a_read_whose_connection_drops_is_made_again_on_a_new_one(link: Link) -> None:
    """A read has nothing to lose by being sent again: when the connection drops before its reply
    (a server restarted, a failover), the store asks once more and answers."""
    store = open_store(link.url)
    try:
        won = await claim(store)
        link.lose_reply(b"GET")
        assert await store.get(won.record.run_id, T0) == won.record
        link.lose_reply(b"MGET")
        assert await store.get_many([won.record.run_id], T0) == {won.record.run_id: won.record}
        assert link.accepted == 3
    finally:
        await store.close()


async def test_a_claim_whose_reply_is_lost_is_unavailable_and_never_sent_again(link: Link, admin: redis.Redis) -> None:
    """A claim the server ran but whose reply was lost is a 503 (Scheduler retries): sent again
    by the client, it would find its own write and answer busy for a run nobody dispatches."""
    store = open_store(link.url)
    try:
        await claim(store, T0, new_run(run_id="1" * 64))  # the claim script is on the server now
        link.lose_reply(b"EVALSHA")
        with pytest.raises(StoreUnavailable, match=r"^redis claim: ConnectionError: "):
            await claim(store, T0, new_run(run_id="2" * 64))
        written = json.loads(admin.get(redis_store.KEY_PREFIX + "2" * 64))
        assert (written["status"], written["attempts"]) == (IN_PROGRESS, 1)  # the server ran it once
        assert (await claim(store, T0, new_run(run_id="2" * 64))).decision == Decision.BUSY  # the retry
    finally:
        await store.close()


STORE_TIMEOUT = 1.0
LATE = 0.4
"""How late the slow replies are: well within the store timeout (0.6 s to spare on a loaded machine), so
that no single reply times out, while three of them together outlast it."""


@pytest.mark.parametrize(
    ("command", "records", "piece", "again"),
    [
        (b"GET", 3, 1 << 16, False),  # reading each record: 3 late replies
        (b"ZMSCORE", 1001, 1 << 16, True),  # checking each is indexed, 500 at a time: 3 late replies
        (b"ZADD", 3, 16, False),  # the index entries, one pipeline whose replies arrive in late pieces
    ],
)
async def test_store_init_takes_as_long_as_the_store_needs_not_the_store_timeout(
    link: Link, admin: redis.Redis, command: bytes, records: int, piece: int, again: bool
) -> None:
    """Indexing a large store takes minutes, far longer than one request may (the store timeout):
    each step of `store init` (a first one, or `again` on a store indexed already) is bounded by
    its own, longer limit, and completes."""
    _write_unindexed(admin, [_record(f"{i:064x}", "etl", COMPLETED, T0) for i in range(records)], T0)
    store = open_store(link.url, timeout_seconds=STORE_TIMEOUT)
    said: list[str] = []
    try:
        if again:
            await store.reindex(lambda line: None)  # type: ignore[attr-defined]
        else:
            await store.ping()
        link.slow((command,), LATE, piece)  # connected: from here on the replies to `command` are late
        await store.reindex(said.append)  # type: ignore[attr-defined]
    finally:
        await store.close()
    assert said == [
        f"redis: all {records} run record(s) were indexed already; nothing changed"
        if again
        else f"redis: indexed {records} run record(s) by route and status; lists read the index from now on"
    ]


async def test_store_init_against_a_server_that_stopped_answering_fails_after_the_store_timeout(
    link: Link, admin: redis.Redis
) -> None:
    """Each request of `store init` still waits no longer than the store timeout for its reply: a
    server that stopped answering is an error, not ten minutes of silence."""
    _write_unindexed(admin, [_record("1" * 64, "etl", COMPLETED, T0)], T0)
    store = open_store(link.url, timeout_seconds=STORE_TIMEOUT)
    try:
        await store.ping()
        link.stall()
        async with asyncio.timeout(30):  # far beyond the store timeout: only a hang reaches it
            with pytest.raises(StoreUnavailable, match=r"^redis init: TimeoutError: Timeout reading from"):
                await store.reindex(lambda line: None)  # type: ignore[attr-defined]
    finally:
        link.resume()
        await store.close()


async def test_a_storm_of_claims_shares_32_connections(link: Link) -> None:
    """40 deliveries at once while the server is slow to answer: the store opens at most 32
    connections (Memorystore counts its clients) and the others wait their turn; all 40 claims win."""
    store = open_store(link.url)
    try:
        link.stall()
        claims = [asyncio.ensure_future(claim(store, T0, new_run(run_id=f"{i:064x}"))) for i in range(40)]
        await link.wait_accepted(redis_store.MAX_CONNECTIONS)
        link.resume()
        assert all(c.won for c in await asyncio.gather(*claims))
        assert link.accepted == redis_store.MAX_CONNECTIONS
    finally:
        link.resume()
        await store.close()


# -- rediss://, the URL's host --------------------------------------------------------------------

HOST = "127.0.0.2"
"""A loopback address that is not `localhost`: a client that ignores the URL's host cannot reach it."""


def _self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A certificate for HOST, signed by its own key: (certificate, key) PEM files."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / f"{name}.pem", directory / f"{name}.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _answers(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


class TLSRedis:
    """A redis-server on HOST only: plaintext on `port`, TLS on `tls_port` with the certificate `ca`
    (self-signed); `other_ca` signed nothing the server shows."""

    def __init__(self, directory: Path) -> None:
        require_services("redis-server")
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is required: apt-get install -y redis-server"
        self.ca, key = _self_signed(directory, "server")
        self.other_ca, _ = _self_signed(directory, "other")
        self.port, self.tls_port = _free_port(HOST), _free_port(HOST)
        log = directory / "redis-tls.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    *(binary, "--bind", HOST, "--port", str(self.port), "--tls-port", str(self.tls_port)),
                    *("--tls-cert-file", str(self.ca), "--tls-key-file", str(key), "--tls-ca-cert-file", str(self.ca)),
                    *("--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--dir", str(directory)),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.server = Server(proc, self.port, log)
        try:
            wait_for(lambda: _answers(HOST, self.tls_port), 20, "redis-server (TLS)", proc, log)
        except Exception:
            self.server.stop()
            raise


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSRedis]:
    server = TLSRedis(tmp_path_factory.mktemp("redis-tls"))
    yield server
    server.server.stop()


async def _round_trip(store: RunStore) -> None:
    try:
        won = await claim(store, T0, new_run(run_id=uuid.uuid4().hex * 2))
        done = await store.finish(won, Finish(COMPLETED, target=LOG_TARGET), T0)
        assert await store.get(won.record.run_id, T0) == done
    finally:
        await store.close()


@pytest.mark.services  # starts its own redis-server
async def test_rediss_url_talks_tls_verified_with_its_ca_file(tls_redis: TLSRedis) -> None:
    """`rediss://…?ca_file=` (Memorystore's in-transit encryption): the store talks TLS and trusts
    the server only when its certificate is signed by that CA."""
    await _round_trip(open_store(f"rediss://{HOST}:{tls_redis.tls_port}/0?ca_file={tls_redis.ca}", timeout_seconds=2))
    untrusted = open_store(f"rediss://{HOST}:{tls_redis.tls_port}/0?ca_file={tls_redis.other_ca}", timeout_seconds=2)
    try:
        with pytest.raises(StoreUnavailable, match="certificate verify failed"):
            await untrusted.ping()
    finally:
        await untrusted.close()


@pytest.mark.services  # starts its own redis-server
async def test_the_url_host_is_the_one_connected_to(tls_redis: TLSRedis) -> None:
    await _round_trip(open_store(f"redis://{HOST}:{tls_redis.port}/0", timeout_seconds=2))


# -- wait_replicas ---------------------------------------------------------------------------------


@pytest.mark.services  # starts its own redis-servers
async def test_wait_replicas_waits_for_a_replica_that_lags_behind(tmp_path: Path) -> None:
    """With `?wait_replicas=1` a claim waits (up to half the store timeout) for the replica to
    acknowledge the write: a replica 300 ms behind still confirms it, and the claim wins."""
    primary, replica = start_redis(tmp_path), start_redis(tmp_path)
    try:
        async with Link(primary.port) as link:
            with redis.Redis(host="127.0.0.1", port=primary.port) as client:
                client.config_set("repl-diskless-sync-delay", 0)  # sync the replica now, not in 5 s
            with redis.Redis(host="127.0.0.1", port=replica.port) as client:
                client.replicaof("127.0.0.1", link.port)  # the replication stream runs through the link
                async with asyncio.timeout(20):
                    while client.info("replication").get("master_link_status") != "up":
                        await asyncio.sleep(0.05)
                store = open_store(f"redis://127.0.0.1:{primary.port}/0?wait_replicas=1", timeout_seconds=5)
                try:
                    link.lag(b"GETACK", 0.3)  # the replica sees the write once the primary asks it, 300 ms late
                    won = await claim(store)
                    assert won.won
                    assert client.get(redis_store.KEY_PREFIX + won.record.run_id) is not None
                finally:
                    await store.close()
    finally:
        replica.stop()
        primary.stop()
