"""End to end: the real `runonce serve` process, over HTTP like Cloud Scheduler, against each real
store (SQLite, the Firestore and Spanner emulators, redis-server), calling a real local downstream
that counts what it receives."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.backends import start_redis
from tests.support.downstream import Downstream
from tests.support.procs import ServerProcess, start_firestore_emulator, start_server
from tests.support.stores import FIRESTORE_PROJECT, redis_url, spanner_table_url

pytestmark = pytest.mark.e2e

LEASE_SECONDS = 6  # at least DISPATCH_TIMEOUT_SECONDS + 2 x the store timeout (2 s on Firestore) + 1 s
DISPATCH_TIMEOUT_SECONDS = 1


def headers(job: str, when: str = "2026-10-16T12:00:00Z") -> dict[str, str]:
    return {"X-CloudScheduler-JobName": job, "X-CloudScheduler-ScheduleTime": when}


def server_env(downstream: Downstream, store_env: dict[str, str]) -> dict[str, str]:
    routes = {
        "routes": {
            name: {
                "target": {"type": "http", "url": f"{downstream.url}/{name}"},
                "namespace": {"project": "e2e-project", "location": "us-central1"},
            }
            for name in ("ok", "flaky", "hang", "locked")
        }
    }
    return {
        "RUNONCE_AUTH": "none",
        "RUNONCE_ROUTES": json.dumps(routes),
        "RUNONCE_LEASE_SECONDS": str(LEASE_SECONDS),
        "RUNONCE_DISPATCH_TIMEOUT_SECONDS": str(DISPATCH_TIMEOUT_SECONDS),
        "RUNONCE_LOG_FORMAT": "text",
        **store_env,
    }


@pytest.fixture(scope="module")
def downstream() -> Iterator[Downstream]:
    with Downstream() as service:
        yield service


@pytest.fixture(scope="module", params=["sqlite", "firestore", "spanner", "redis"])
def server(
    request: pytest.FixtureRequest, downstream: Downstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    logs = tmp_path_factory.mktemp(f"e2e-{request.param}")
    if request.param == "sqlite":
        store_env = {"RUNONCE_STORE": f"sqlite:///{logs / 'runs.db'}", "RUNONCE_STORE_TIMEOUT_SECONDS": "0.5"}
    elif request.param == "spanner":
        store_env = {
            "RUNONCE_STORE": spanner_table_url(request.getfixturevalue("spanner_database")),
            # The emulator runs one transaction at a time: 64 racing claims queue for seconds.
            "RUNONCE_STORE_TIMEOUT_SECONDS": "5",
            "RUNONCE_LEASE_SECONDS": str(DISPATCH_TIMEOUT_SECONDS + 2 * 5 + 1),
            "SPANNER_EMULATOR_HOST": os.environ["SPANNER_EMULATOR_HOST"],
        }
    elif request.param == "redis":
        store_env = {
            "RUNONCE_STORE": redis_url(request.getfixturevalue("redis_server")),
            "RUNONCE_STORE_TIMEOUT_SECONDS": "0.5",
        }
    else:
        emulator = request.getfixturevalue("firestore_emulator")
        store_env = {
            "RUNONCE_STORE": "firestore",
            "RUNONCE_FIRESTORE_PROJECT": FIRESTORE_PROJECT,
            "RUNONCE_FIRESTORE_COLLECTION": f"e2e_{uuid.uuid4().hex[:8]}",
            "RUNONCE_STORE_TIMEOUT_SECONDS": "2",  # 64 concurrent claims on the emulator need more than 0.5 s
            "FIRESTORE_EMULATOR_HOST": emulator.host,
        }
    proc = start_server(server_env(downstream, store_env), logs)
    proc.store_env = store_env  # type: ignore[attr-defined]
    yield proc
    proc.stop()


async def deliver_many(
    url: str, route: str, job: str, count: int, body: dict | None = None
) -> Counter[tuple[int, str]]:
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=count)) as client:
        responses = await asyncio.gather(
            *(client.post(f"{url}/v1/routes/{route}:run", headers=headers(job), json=body) for _ in range(count))
        )
    return Counter((r.status_code, r.json()["status"]) for r in responses)


async def test_64_concurrent_duplicates_call_the_downstream_once(server: ServerProcess, downstream: Downstream) -> None:
    job = f"storm-{uuid.uuid4().hex[:6]}"
    before = downstream.calls["/ok"]

    outcomes = await deliver_many(server.url, "ok", job, 64, {"n": 1})

    assert downstream.calls["/ok"] - before == 1
    assert outcomes[(200, "processed")] == 1
    assert sum(outcomes.values()) == 64
    assert set(outcomes) <= {(200, "processed"), (200, "duplicate"), (409, "in_progress")}


async def test_delivery_after_completion_is_a_duplicate_without_a_call(
    server: ServerProcess, downstream: Downstream
) -> None:
    job = f"replay-{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(base_url=server.url) as client:
        first = await client.post("/v1/routes/ok:run", headers=headers(job))
        calls = downstream.calls["/ok"]
        again = await client.post("/v1/routes/ok:run", headers=headers(job))

    assert first.json()["status"] == "processed"
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    assert again.headers["runonce-replayed"] == "true"
    assert again.json()["target"] == first.json()["target"]
    assert downstream.calls["/ok"] == calls
    sent = downstream.bodies["/ok"][-1]
    assert sent["run_id"] == first.json()["run_id"] and sent["job"] == job
    assert sent["schedule_time"] == "2026-10-16T12:00:00Z" and sent["source"] == "scheduler"
    assert downstream.keys["/ok"][-1] == first.json()["run_id"]


async def test_downstream_500_is_502_and_the_next_delivery_dispatches_again(
    server: ServerProcess, downstream: Downstream
) -> None:
    job = f"flaky-{uuid.uuid4().hex[:6]}"
    downstream.set("/flaky", 500)
    before = downstream.calls["/flaky"]
    async with httpx.AsyncClient(base_url=server.url) as client:
        failed = await client.post("/v1/routes/flaky:run", headers=headers(job))
        downstream.set("/flaky", 200)
        retried = await client.post("/v1/routes/flaky:run", headers=headers(job))

    assert failed.status_code == 502 and failed.json()["status"] == "failed"
    assert "HTTP 500" in failed.json()["error"]["message"]
    assert retried.status_code == 200 and retried.json()["status"] == "processed"
    assert downstream.calls["/flaky"] - before == 2
    assert downstream.keys["/flaky"][-1] == downstream.keys["/flaky"][-2]  # same token both times


async def test_hang_past_the_timeout_is_504_keeps_the_claim_then_redispatches_after_the_lease(
    server: ServerProcess, downstream: Downstream
) -> None:
    job = f"hang-{uuid.uuid4().hex[:6]}"
    downstream.set("/hang", 200, delay=DISPATCH_TIMEOUT_SECONDS + 1.5)
    before = downstream.calls["/hang"]
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        started = time.monotonic()
        unknown = await client.post("/v1/routes/hang:run", headers=headers(job))
        busy = await client.post("/v1/routes/hang:run", headers=headers(job))
        downstream.set("/hang", 200)
        lease = float(server.env["RUNONCE_LEASE_SECONDS"])
        await asyncio.sleep(max(0.0, lease + 0.3 - (time.monotonic() - started)))
        after_lease = await client.post("/v1/routes/hang:run", headers=headers(job))

    assert unknown.status_code == 504 and unknown.json()["status"] == "unknown"
    assert 1 <= int(unknown.headers["retry-after"]) <= lease
    assert busy.status_code == 409 and busy.json()["status"] == "in_progress"
    # the http target cannot reconcile: it re-sends with the same key and the downstream dedupes
    assert after_lease.status_code == 200 and after_lease.json()["status"] == "processed"
    assert downstream.calls["/hang"] - before == 2
    assert len(set(downstream.keys["/hang"][-2:])) == 1


async def test_kill_9_mid_dispatch_then_the_next_delivery_after_the_lease_completes_the_run(
    server: ServerProcess, downstream: Downstream, tmp_path: Path
) -> None:
    """A crash between claim and finish: the claim stays, retries get 409 until the lease ends, then
    one takes over and re-sends the same token (the http target cannot reconcile; its downstream dedupes)."""
    job = f"crash-{uuid.uuid4().hex[:6]}"
    victim = start_server(server_env(downstream, server.store_env), tmp_path)  # type: ignore[attr-defined]
    downstream.set("/hang", 200, delay=30)
    before = downstream.calls["/hang"]
    async with httpx.AsyncClient(timeout=30) as client:
        started = time.monotonic()
        in_flight = asyncio.ensure_future(client.post(f"{victim.url}/v1/routes/hang:run", headers=headers(job)))
        while downstream.calls["/hang"] == before and time.monotonic() - started < 10:
            await asyncio.sleep(0.02)
        victim.kill()
        with pytest.raises(httpx.HTTPError):
            await in_flight
        downstream.set("/hang", 200)
        busy = await client.post(f"{server.url}/v1/routes/hang:run", headers=headers(job))
        lease = float(server.env["RUNONCE_LEASE_SECONDS"])
        await asyncio.sleep(max(0.0, lease + 0.3 - (time.monotonic() - started)))
        after_lease = await client.post(f"{server.url}/v1/routes/hang:run", headers=headers(job))

    assert busy.status_code == 409 and busy.json()["status"] == "in_progress"
    assert after_lease.status_code == 200 and after_lease.json()["status"] == "processed"
    assert downstream.calls["/hang"] - before == 2
    assert len(set(downstream.keys["/hang"][-2:])) == 1


async def test_same_run_with_another_body_is_422_without_a_call(server: ServerProcess, downstream: Downstream) -> None:
    job = f"mismatch-{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(base_url=server.url) as client:
        first = await client.post("/v1/routes/ok:run", headers=headers(job), json={"n": 1})
        calls = downstream.calls["/ok"]
        other = await client.post("/v1/routes/ok:run", headers=headers(job), json={"n": 2})
    assert first.json()["status"] == "processed"
    assert other.status_code == 422
    assert downstream.calls["/ok"] == calls


async def test_run_record_is_readable_over_http(server: ServerProcess) -> None:
    job = f"record-{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(base_url=server.url) as client:
        run_id = (await client.post("/v1/routes/ok:run", headers=headers(job))).json()["run_id"]
        record = (await client.get(f"/v1/runs/{run_id}")).json()
    assert record["status"] == "completed" and record["attempts"] == 1 and record["job"] == job
    assert record["target"]["type"] == "http"


async def test_sqlite_store_locked_is_503_and_no_downstream_call(downstream: Downstream, tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    server = start_server(
        server_env(downstream, {"RUNONCE_STORE": f"sqlite:///{db}", "RUNONCE_STORE_TIMEOUT_SECONDS": "0.5"}), tmp_path
    )
    try:
        async with httpx.AsyncClient(base_url=server.url) as client:
            assert (await client.get("/readyz")).status_code == 200  # schema created
            blocker = sqlite3.connect(db, isolation_level=None)
            blocker.execute("BEGIN EXCLUSIVE")  # the store stops answering
            before = downstream.calls["/locked"]
            try:
                response = await client.post("/v1/routes/locked:run", headers=headers("locked-job"))
                ready = await client.get("/readyz")
            finally:
                blocker.execute("ROLLBACK")
                blocker.close()
            recovered = await client.post("/v1/routes/locked:run", headers=headers("locked-job"))
    finally:
        server.stop()
    assert response.status_code == 503 and response.json()["status"] == "unavailable"
    assert ready.status_code == 503
    assert downstream.calls["/locked"] - before == 1  # only the delivery after recovery
    assert recovered.json()["status"] == "processed"


async def test_firestore_stopped_is_503_and_no_downstream_call(downstream: Downstream, tmp_path: Path) -> None:
    emulator = start_firestore_emulator(tmp_path)  # our own: this test stops it
    server = start_server(
        server_env(
            downstream,
            {
                "RUNONCE_STORE": "firestore",
                "RUNONCE_FIRESTORE_PROJECT": FIRESTORE_PROJECT,
                "RUNONCE_STORE_TIMEOUT_SECONDS": "2",
                "FIRESTORE_EMULATOR_HOST": emulator.host,
            },
        ),
        tmp_path,
    )
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            for _ in range(50):  # a fresh emulator's first answers are slow: wait until it is ready
                if (await client.get("/readyz")).status_code == 200:
                    break
            assert (await client.post("/v1/routes/locked:run", headers=headers("fs-up"))).status_code == 200
            emulator.stop()
            before = downstream.calls["/locked"]
            response = await client.post("/v1/routes/locked:run", headers=headers("fs-down"))
            ready = await client.get("/readyz")
    finally:
        server.stop()
        emulator.stop()
    assert response.status_code == 503 and response.json()["status"] == "unavailable"
    assert ready.status_code == 503
    assert downstream.calls["/locked"] == before


async def test_sqlite_with_several_worker_processes_calls_once(downstream: Downstream, tmp_path: Path) -> None:
    store_env = {"RUNONCE_STORE": f"sqlite:///{tmp_path / 'runs.db'}", "RUNONCE_STORE_TIMEOUT_SECONDS": "2"}
    server = start_server(server_env(downstream, store_env), tmp_path, workers=3)
    try:
        before = downstream.calls["/ok"]
        outcomes = await deliver_many(server.url, "ok", f"workers-{uuid.uuid4().hex[:6]}", 64)
    finally:
        server.stop()
    assert downstream.calls["/ok"] - before == 1
    assert outcomes[(200, "processed")] == 1


async def test_redis_killed_is_503_and_no_downstream_call(downstream: Downstream, tmp_path: Path) -> None:
    redis = start_redis(tmp_path)  # our own: this test kills it
    store_env = {"RUNONCE_STORE": f"redis://127.0.0.1:{redis.port}/0", "RUNONCE_STORE_TIMEOUT_SECONDS": "0.5"}
    server = start_server(server_env(downstream, store_env), tmp_path)
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            assert (await client.post("/v1/routes/locked:run", headers=headers("redis-up"))).status_code == 200
            redis.kill()
            before = downstream.calls["/locked"]
            response = await client.post("/v1/routes/locked:run", headers=headers("redis-down"))
            ready = await client.get("/readyz")
            redis = start_redis(tmp_path, port=redis.port)  # back, empty (no persistence)
            recovered = await client.post("/v1/routes/locked:run", headers=headers("redis-down"))
    finally:
        server.stop()
        redis.stop()
    assert response.status_code == 503 and response.json()["status"] == "unavailable"
    assert ready.status_code == 503
    assert downstream.calls["/locked"] - before == 1  # only the delivery after recovery
    assert recovered.json()["status"] == "processed"
