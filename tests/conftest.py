"""Session-wide fixtures: the real Firestore and Spanner emulators, redis-server, stores, a controllable clock.

Fixtures only: the helpers they use, and that test modules import, live in tests/support/."""

from __future__ import annotations

import os
import ssl
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx._transports.default as httpx_transports
import pytest

from runonce.stores import RunStore, open_store
from runonce.stores.memory import MemoryStore
from runonce.stores.sqlite import SQLiteStore
from tests.fakes.google_api import LIVE_FAKES
from tests.support import oidc
from tests.support.backends import Server, create_spanner_database, start_redis, start_spanner_emulator
from tests.support.clock import Clock
from tests.support.procs import IN_PROCESS_ONLY, FirestoreEmulator, start_firestore_emulator
from tests.support.stores import STORE_KINDS, STORE_SERVERS, firestore_store, redis_url, spanner_table_url, with_server

if TYPE_CHECKING:
    from tests.support.api import Harness


SERVICE_FIXTURES = {"firestore_emulator", "redis_server", "spanner_database", "tasks_emulator"}
"""Fixtures that start a process outside the venv: a test that uses one is marked `services`."""


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `services` every test that needs an emulator or redis-server, through a fixture or a
    store parameter (any fixture's param named like a served store: `firestore`, `spanner`, `redis`),
    so `make test-fast` (`-m "not services"`) leaves it out. A test that starts one some other way
    fails under test-fast until it is marked (tests/support/procs.py)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec else ()
        served = any(isinstance(value, str) and value in STORE_SERVERS for value in params)
        if served or SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.services)


@pytest.fixture(autouse=True)
def in_process_only(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under `make test-fast`, a test that runs a command as a child process (runonce's CLI, the
    guard, git, make, a reference parser) and is not marked `subprocess` fails, naming the marker:
    the fast subset stays in-process as tests are added, and mutation testing (which cannot see into
    a child) leaves out the same tests."""
    if not os.environ.get(IN_PROCESS_ONLY) or request.node.get_closest_marker("subprocess"):
        return

    def refuse(self: subprocess.Popen[bytes], args: object, *rest: object, **options: object) -> None:
        raise RuntimeError(
            f"this test runs {args!r} as a child process, and `make test-fast` runs in-process tests only: "
            "mark it @pytest.mark.subprocess"
        )

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


@pytest.fixture(autouse=True, scope="session")
def one_tls_context() -> Iterator[None]:
    """Clients the tests build with httpx's default trust (most speak plain HTTP to a fake) share one
    TLS context, as the service's own clients do (runonce/tls.py): each would otherwise load the CA
    bundle anew, about 30 ms of CPU a client. One context per trust store the environment names
    (SSL_CERT_FILE, SSL_CERT_DIR: a test may point them elsewhere); a client given its own trust (a
    context, a client certificate) builds it as before."""
    real = httpx_transports.create_ssl_context
    shared: dict[tuple[str | None, str | None], ssl.SSLContext] = {}

    def create(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
        if verify is not True or cert is not None or not trust_env:
            return real(verify=verify, cert=cert, trust_env=trust_env)
        store = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        if store not in shared:
            shared[store] = real()
        return shared[store]

    httpx_transports.create_ssl_context = create
    yield
    httpx_transports.create_ssl_context = real


def recorded_violations() -> list[str]:
    return [f"{type(fake).__name__}: {v}" for fake in list(LIVE_FAKES) for v in list(fake.violations)]


@pytest.fixture(autouse=True)
def strict_fakes() -> Iterator[None]:
    """A request Google would refuse fails the test that sent it, whichever fake saw it; and every
    test starts with clean (session-scoped) fakes, so no test inherits another's violations."""
    for fake in list(LIVE_FAKES):
        fake.reset()
    yield
    found = recorded_violations()
    if found:
        pytest.fail("requests Google's API would reject:\n  " + "\n  ".join(found), pytrace=False)


@pytest.fixture(scope="session")
def firestore_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FirestoreEmulator]:
    """One real emulator per test session. google-cloud-firestore finds it via FIRESTORE_EMULATOR_HOST."""
    emulator = start_firestore_emulator(tmp_path_factory.mktemp("firestore"))
    previous = os.environ.get("FIRESTORE_EMULATOR_HOST")
    os.environ["FIRESTORE_EMULATOR_HOST"] = emulator.host
    yield emulator
    emulator.stop()
    if previous is None:
        os.environ.pop("FIRESTORE_EMULATOR_HOST", None)
    else:
        os.environ["FIRESTORE_EMULATOR_HOST"] = previous


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One real redis-server per session (no persistence); tests flush it before use."""
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spanner_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The real Spanner emulator, with its instance (SPANNER_EMULATOR_HOST names it)."""
    previous = os.environ.get("SPANNER_EMULATOR_HOST")
    emulator = start_spanner_emulator(tmp_path_factory.mktemp("spanner"))
    yield emulator
    emulator.stop()
    if previous is None:
        os.environ.pop("SPANNER_EMULATOR_HOST", None)
    else:
        os.environ["SPANNER_EMULATOR_HOST"] = previous


@pytest.fixture(scope="session")
def spanner_database(spanner_emulator: Server) -> str:
    """A database on the emulator set up by `runonce store init`: its RUNONCE_STORE URL. Tests
    take a table each (`?table=`)."""
    return create_spanner_database("runonce")


@pytest.fixture(params=STORE_KINDS, ids=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return with_server(request)


@pytest.fixture
def make_store(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest):
    """A factory: every call opens another handle on the SAME underlying store (a new SQLite
    connection on the same file, a new Firestore client on the same collection), as separate
    processes would."""
    opened: list[RunStore] = []
    shared = MemoryStore()
    collection = f"runs_{uuid.uuid4().hex[:12]}"
    url = None
    if store_kind == "spanner":
        url = spanner_table_url(request.getfixturevalue("spanner_database"))
    elif store_kind == "redis":
        url = redis_url(request.getfixturevalue("redis_server"))

    def make() -> RunStore:
        if store_kind == "memory":
            store: RunStore = shared
        elif store_kind == "sqlite":
            store = SQLiteStore(str(tmp_path / "runs.db"))
        elif url is not None:
            # Spanner: the emulator runs one transaction at a time, so 100 racing claims queue longer.
            store = open_store(url, timeout_seconds=60 if store_kind == "spanner" else 5)
        else:
            store = firestore_store(collection)
        opened.append(store)
        return store

    make.kind = store_kind  # type: ignore[attr-defined]
    make.opened = opened  # type: ignore[attr-defined]
    return make


@pytest.fixture
async def store(make_store) -> AsyncIterator[RunStore]:
    handle = make_store()
    yield handle
    for opened in {id(s): s for s in make_store.opened}.values():
        await opened.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def api(clock: Clock) -> AsyncIterator[Harness]:
    """The delivery endpoint in-process (tests/support/api.py); some modules define an `api` of their own."""
    from tests.support.api import open_api

    async with open_api(clock) as harness:
        yield harness


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`runonce ...` through click's CliRunner, on a SQLite store of the test's own (`cli.db`)."""
    from click.testing import CliRunner

    from runonce.cli import main

    db = tmp_path / "runs.db"
    monkeypatch.setenv("RUNONCE_STORE", f"sqlite:///{db}")
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(main, list(args), catch_exceptions=False)

    invoke.db = db  # type: ignore[attr-defined]
    return invoke


@pytest.fixture(scope="module")
def google_key() -> oidc.SigningKey:
    """The key Google signs ID tokens with, in the auth suites (tests/support/auth_cases.py)."""
    return oidc.make_key()


@pytest.fixture(scope="module")
def rogue_key(google_key: oidc.SigningKey) -> oidc.SigningKey:
    """Someone else's key that claims Google's kid."""
    return oidc.make_key(google_key.kid)


@pytest.fixture(scope="module")
def certs(google_key: oidc.SigningKey) -> Iterator[oidc.CertsServer]:
    """Google's certificates endpoint, serving `google_key`."""
    with oidc.CertsServer([google_key]) as server:
        yield server
