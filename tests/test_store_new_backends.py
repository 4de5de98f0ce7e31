"""The Spanner and Redis stores beyond the conformance suite (tests/test_stores.py): the registry,
`runonce store init`, wait_replicas, TTL, and a backend that goes away."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from runonce.cli import main
from runonce.settings import ConfigError, load_settings
from runonce.stores import Fenced, Finish, StoreUnavailable, open_store, parse_redis_url, parse_spanner_url
from runonce.stores.base import COMPLETED
from tests.support.backends import run_store_init, start_redis
from tests.support.procs import REPO
from tests.support.runs import RETENTION, T0, claim
from tests.support.stores import redis_url, spanner_table_url

LOG_TARGET = {"type": "log", "resource": "x"}

# -- the registry ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "firestore",
        "sqlite:///x.db",
        "spanner://projects/my-proj/instances/main/databases/jobs",
        "spanner://projects/my-proj/instances/main/databases/jobs?table=runs_2",
        "redis://10.0.0.3:6379/0",
        "redis://:s3cret@10.0.0.3:6379/2?wait_replicas=1",
        "rediss://10.0.0.3:6378/0?ca_file=/etc/ca.pem",
    ],
)
def test_settings_accept_every_backend_url(url: str) -> None:
    assert load_settings(store=url).store == url


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("postgres://db/x", "unknown store 'postgres://…'"),  # the scheme alone: the rest may hold a password
        ("memory", "unknown store 'memory'"),
        ("sqlite:///", "must be sqlite:///PATH"),
        (
            "spanner://projects/p/instances/i",
            "must be spanner://projects/PROJECT/instances/INSTANCE/databases/DATABASE",
        ),
        ("spanner://projects/my-proj/instances/main/databases/jobs?table=1x", "is not a Spanner table name"),
        ("spanner://projects/my-proj/instances/main/databases/jobs?tabel=x", "unknown option 'tabel'"),
        ("redis://h:6379/0?ca_file=/x", "unknown option 'ca_file'"),  # plaintext: a CA file means nothing
        ("redis://h:6379/zero", "database number in a redis:// URL must be an integer"),
        ("redis://h:6379/0?wait_replicas=-1", "wait_replicas must be an integer from 0 to 16"),
        ("redis:///0", "a host is required"),
    ],
)
def test_settings_refuse_bad_store_urls_precisely(url: str, reason: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(store=url)
    assert "RUNONCE_STORE" in str(refused.value) and reason in str(refused.value)


def test_store_urls_carry_the_backend_options() -> None:
    assert parse_spanner_url("spanner://projects/my-proj/instances/main/databases/jobs?table=t1").table == "t1"
    parsed = parse_redis_url("rediss://user:p%40ss@h.example:6378/3?wait_replicas=2&ca_file=/ca.pem")
    assert (parsed.host, parsed.port, parsed.db, parsed.username, parsed.password) == (
        "h.example",
        6378,
        3,
        "user",
        "p@ss",
    )
    assert (parsed.tls, parsed.ca_file, parsed.wait_replicas) == (True, "/ca.pem", 2)


@pytest.mark.subprocess
def test_the_service_does_not_import_optional_drivers() -> None:
    """Cold start: a store never configured costs nothing."""
    code = (
        "import sys, runonce.api.main; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'redis' or 'spanner' in m))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- runonce store init ------------------------------------------------------------------------


def test_store_init_spanner_twice_changes_nothing(spanner_database: str) -> None:
    url = f"{spanner_database}?table=init_twice"
    first = run_store_init(url).stdout
    second = run_store_init(url).stdout
    assert "created" in first and "init_twice" in first
    assert "exists" in second and "OLDER_THAN(expire_at, INTERVAL 0 DAY)" in second


def test_store_init_sqlite_creates_then_says_it_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNONCE_STORE", f"sqlite:///{tmp_path / 'runs.db'}")
    first = CliRunner().invoke(main, ["store", "init"])
    assert first.exit_code == 0 and "created" in first.output
    assert (tmp_path / "runs.db").exists()
    second = CliRunner().invoke(main, ["store", "init"])
    assert second.exit_code == 0 and "exists" in second.output


def test_store_init_firestore_prints_the_ttl_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNONCE_STORE", "firestore")
    monkeypatch.setenv("RUNONCE_FIRESTORE_PROJECT", "my-proj")
    done = CliRunner().invoke(main, ["store", "init"])
    assert done.exit_code == 0
    assert "gcloud firestore fields ttls update expire_at --collection-group=runonce_runs --enable-ttl" in done.output


def test_store_init_redis_has_nothing_to_do(redis_server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNONCE_STORE", redis_url(redis_server))
    done = CliRunner().invoke(main, ["store", "init"])
    assert done.exit_code == 0 and "nothing else to create" in done.output
    assert "run record(s) were indexed already; nothing changed" in done.output


# -- Redis -------------------------------------------------------------------------------------


async def test_redis_key_has_the_prefix_and_expires_with_the_record(redis_server) -> None:
    import redis

    store = open_store(redis_url(redis_server))
    try:
        first = await claim(store)
        with redis.Redis(port=redis_server.port) as client:
            key = f"runonce:run:{first.record.run_id}"
            ttl_ms = client.pttl(key)
            assert RETENTION.total_seconds() * 1000 - 5000 < ttl_ms <= RETENTION.total_seconds() * 1000
            await store.finish(first, Finish(COMPLETED, target={"type": "log", "resource": "x"}), T0)
            assert 0 < client.pttl(key) <= ttl_ms  # finishing keeps the TTL
    finally:
        await store.close()


async def test_redis_wait_replicas_unmet_is_unavailable(redis_server) -> None:
    """No replica acknowledges (this server has none): the claim is not relied on, nothing dispatches."""
    store = open_store(redis_url(redis_server) + "?wait_replicas=1", timeout_seconds=0.5)
    try:
        with pytest.raises(StoreUnavailable) as refused:
            await claim(store)
        assert str(refused.value) == (
            "redis claim: only 0 of 1 replica(s) acknowledged the write (wait_replicas): a failover could lose "
            "it, so it is not relied on"
        )
    finally:
        await store.close()


@pytest.mark.services  # starts its own redis-server
async def test_redis_killed_is_unavailable_and_the_error_names_the_operation(tmp_path: Path) -> None:
    server = start_redis(tmp_path)
    store = open_store(f"redis://127.0.0.1:{server.port}/0", timeout_seconds=1)
    try:
        won = await claim(store)
        server.kill()
        for op, call in (
            ("claim", lambda: claim(store)),
            ("finish", lambda: store.finish(won, Finish(COMPLETED, target=LOG_TARGET), T0)),
            ("release", lambda: store.release(won.record.run_id, T0)),
            ("get", lambda: store.get(won.record.run_id, T0)),
            ("list", lambda: store.list(T0)),
            ("ping", store.ping),
        ):
            with pytest.raises(StoreUnavailable, match=f"^redis {op}: "):
                await call()
    finally:
        server.stop()
        await store.close()


@pytest.mark.services  # starts its own redis-server
async def test_redis_killed_under_wait_replicas_names_the_operation_too(tmp_path: Path) -> None:
    """The write and its WAIT go out in one pipeline; its failure still says which write it was."""
    server = start_redis(tmp_path)
    store = open_store(f"redis://127.0.0.1:{server.port}/0?wait_replicas=1", timeout_seconds=1)
    try:
        server.kill()
        with pytest.raises(StoreUnavailable, match=r"^redis claim: "):
            await claim(store)
    finally:
        server.stop()
        await store.close()


async def test_redis_fresh_run_is_two_round_trips(redis_server) -> None:
    store = open_store(redis_url(redis_server))
    try:
        won = await claim(store)
        await store.finish(won, Finish(COMPLETED, target=LOG_TARGET), T0)
        assert store.round_trips == 2  # type: ignore[attr-defined] - the claim script, the finish script
    finally:
        await store.close()


@pytest.mark.services  # starts its own redis-server
async def test_redis_wait_replicas_met_by_a_real_replica(tmp_path: Path) -> None:
    import redis

    primary, replica = start_redis(tmp_path), start_redis(tmp_path)
    store = open_store(f"redis://127.0.0.1:{primary.port}/0?wait_replicas=1", timeout_seconds=5)
    try:
        with redis.Redis(port=replica.port) as client:
            client.replicaof("127.0.0.1", primary.port)
            deadline = asyncio.get_running_loop().time() + 20
            while client.info("replication").get("master_link_status") != "up":
                assert asyncio.get_running_loop().time() < deadline, "the replica never synced"
                await asyncio.sleep(0.05)
            won = await claim(store)
            done = await store.finish(won, Finish(COMPLETED, target=LOG_TARGET), T0)
            assert won.won and done.status == COMPLETED
            assert client.get(f"runonce:run:{won.record.run_id}") is not None  # the replica has it
    finally:
        await store.close()
        replica.stop()
        primary.stop()


@pytest.mark.services  # starts its own redis-server
async def test_redis_url_user_password_and_database_are_used(tmp_path: Path) -> None:
    import redis

    server = start_redis(tmp_path)
    with redis.Redis(port=server.port) as admin:
        admin.acl_setuser("runonce", enabled=True, passwords=["+s3cret"], keys=["*"], commands=["+@all"])
        admin.acl_setuser("default", enabled=False)
    store = open_store(f"redis://runonce:s3cret@127.0.0.1:{server.port}/3", timeout_seconds=1)
    wrong = open_store(f"redis://runonce:wrong@127.0.0.1:{server.port}/3", timeout_seconds=1)
    try:
        won = await claim(store)
        with redis.Redis(port=server.port, db=3, username="runonce", password="s3cret") as client:
            assert client.exists(f"runonce:run:{won.record.run_id}")
            assert client.execute_command("SELECT", 0) and client.dbsize() == 0  # not in database 0
        with pytest.raises(StoreUnavailable):
            await wrong.ping()
    finally:
        await store.close()
        await wrong.close()
        server.stop()


async def test_redis_finish_of_a_vanished_record_is_fenced_and_other_keys_are_left_alone(redis_server) -> None:
    import redis

    store = open_store(redis_url(redis_server))
    try:
        with redis.Redis(port=redis_server.port) as client:
            client.set("someone-else:key", "not json")  # a shared instance
            won = await claim(store)
            assert [r.run_id for r in await store.list(T0)] == [won.record.run_id]
            client.delete(f"runonce:run:{won.record.run_id}")  # evicted, or flushed
        assert await store.get(won.record.run_id, T0) is None
        with pytest.raises(Fenced) as refused:
            await store.finish(won, Finish(COMPLETED, target=LOG_TARGET), T0)
        assert refused.value.found is None and str(refused.value) == "run is now held by no record"
    finally:
        await store.close()


@pytest.mark.services  # starts its own redis-server
async def test_redis_full_with_noeviction_refuses_the_claim(tmp_path: Path) -> None:
    """The README's advice for Memorystore: with `noeviction` a full instance refuses the write
    (503, nothing dispatched) instead of evicting another run's record."""
    import redis

    server = start_redis(tmp_path)
    store = open_store(f"redis://127.0.0.1:{server.port}/0", timeout_seconds=1)
    try:
        with redis.Redis(port=server.port) as client:
            client.config_set("maxmemory-policy", "noeviction")
            client.config_set("maxmemory", 1)  # already full
            with pytest.raises(StoreUnavailable, match="OutOfMemoryError"):
                await claim(store)
            assert client.dbsize() == 0
            client.config_set("maxmemory", 0)
        assert (await claim(store)).won
    finally:
        await store.close()
        server.stop()


@pytest.mark.parametrize(
    ("policy", "limit", "warned"),
    [
        ("volatile-lru", 100 * 2**20, True),  # Memorystore's default
        ("allkeys-lru", 100 * 2**20, True),
        ("noeviction", 100 * 2**20, False),
        ("volatile-lru", 0, False),  # no memory limit: nothing is ever evicted
    ],
)
@pytest.mark.services  # starts its own redis-server
async def test_redis_that_would_evict_run_keys_is_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, policy: str, limit: int, warned: bool
) -> None:
    import redis

    server = start_redis(tmp_path)
    store = open_store(f"redis://127.0.0.1:{server.port}/0", timeout_seconds=1)
    try:
        with redis.Redis(port=server.port) as client:
            client.config_set("maxmemory-policy", policy)
            client.config_set("maxmemory", limit)
        with caplog.at_level("WARNING", logger="runonce.stores.redis"):
            await store.ping()
            await store.ping()
        warnings = [r.getMessage() for r in caplog.records if r.name == "runonce.stores.redis"]
        assert warnings == (
            [
                f"redis maxmemory-policy is {policy}: when the instance is full it evicts run records and a retry "
                "then dispatches the run again; set maxmemory-policy noeviction (a full instance then refuses "
                "claims with 503)"
            ]
            if warned
            else []
        )
    finally:
        await store.close()
        server.stop()


# -- Spanner -----------------------------------------------------------------------------------


async def test_spanner_fresh_run_is_one_insert_and_one_replace(spanner_database: str) -> None:
    """The claim is a mutation-only commit, the finish one read-write transaction on the claim's
    version: no read before either (bench/store_rpcs.py counts the gRPC calls: 1 + 2)."""
    store = open_store(spanner_table_url(spanner_database))
    try:
        first = await claim(store)
        await store.finish(first, Finish(COMPLETED, target={"type": "log", "resource": "x"}), T0)
        assert dict(store.calls) == {"insert": 1, "replace": 1}  # type: ignore[attr-defined]
    finally:
        await store.close()


async def test_spanner_unreachable_is_unavailable_within_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.procs import free_port

    monkeypatch.setenv("SPANNER_EMULATOR_HOST", f"127.0.0.1:{free_port()}")  # nothing listens
    store = open_store("spanner://projects/runonce-test/instances/none/databases/none", timeout_seconds=1)
    try:
        with pytest.raises(StoreUnavailable):
            await claim(store)
    finally:
        await store.close()


def test_missing_driver_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis.asyncio", None)  # as if runonce[redis] were not installed
    monkeypatch.delitem(sys.modules, "runonce.stores.redis", raising=False)
    with pytest.raises(ConfigError, match=r"pip install 'runonce\[redis\]'"):
        open_store("redis://127.0.0.1:1/0")
