"""A store that restarts, or stops answering for a while, fails no delivery once it is back: a real
redis-server restarted with its data kept, the real Spanner emulator paused (SIGSTOP) and resumed."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from runonce.stores import Decision, Finish, StoreUnavailable, open_store
from runonce.stores.base import COMPLETED
from tests.support.backends import Server, start_redis
from tests.support.runs import T0, claim, new_run
from tests.support.stores import spanner_table_url

pytestmark = pytest.mark.services  # a real redis-server restarted, the Spanner emulator paused

LOG_TARGET = {"type": "log", "resource": "x"}
BURST = 40  # more than the Redis pool's connections: every pooled connection is used after the restart


async def test_redis_restarted_with_its_data_serves_every_delivery_on_the_connections_it_had(tmp_path: Path) -> None:
    """Every pooled connection went stale in the restart: the pool reconnects each before sending on
    it, so none of a burst fails, and the records written before the restart are all there."""
    server = start_redis(tmp_path, persist=True)
    store = open_store(f"redis://127.0.0.1:{server.port}/0", timeout_seconds=2)
    try:
        before = await asyncio.gather(*(claim(store, run=new_run(run_id=f"{i:064x}")) for i in range(BURST)))
        await store.finish(before[0], Finish(COMPLETED, target=LOG_TARGET), T0)
        await asyncio.to_thread(server.stop)  # SIGTERM: redis-server exits cleanly; the AOF is synced
        server = await asyncio.to_thread(start_redis, tmp_path, server.port, persist=True)
        await asyncio.sleep(0.2)  # the loop sees the server's closes of the old connections

        await store.ping()  # what /readyz asks
        after = await asyncio.gather(
            *(claim(store, run=new_run(run_id=f"{i + 100:064x}")) for i in range(BURST)), return_exceptions=True
        )
        failed = [r for r in after if isinstance(r, BaseException)]
        assert failed == [], f"{len(failed)} of {BURST} claims failed after the restart: {failed[0]}"
        assert all(r.decision is Decision.CREATE for r in after)
        assert (await claim(store, run=new_run(run_id=f"{0:064x}"))).decision is Decision.REPLAY  # data kept
        assert len(await store.get_many([f"{i:064x}" for i in range(BURST)], T0)) == BURST
        assert len(await store.list(T0, route="etl", limit=2 * BURST)) == 2 * BURST
    finally:
        server.stop()
        await store.close()


async def test_redis_down_is_unavailable_and_serves_again_once_back(tmp_path: Path) -> None:
    server = start_redis(tmp_path, persist=True)
    store = open_store(f"redis://127.0.0.1:{server.port}/0", timeout_seconds=1)
    try:
        await asyncio.gather(*(claim(store, run=new_run(run_id=f"{i:064x}")) for i in range(8)))
        await asyncio.to_thread(server.stop)
        with pytest.raises(StoreUnavailable, match=r"^redis claim: "):
            await claim(store, run=new_run(run_id="d" * 64))
        with pytest.raises(StoreUnavailable, match=r"^redis ping: "):
            await store.ping()
        server = await asyncio.to_thread(start_redis, tmp_path, server.port, persist=True)
        await store.ping()
        fresh = await asyncio.gather(*(claim(store, run=new_run(run_id=f"{i + 50:064x}")) for i in range(8)))
        assert all(r.decision is Decision.CREATE for r in fresh)
        # The claim refused while the server was down wrote nothing: it is created now.
        assert (await claim(store, run=new_run(run_id="d" * 64))).decision is Decision.CREATE
    finally:
        server.stop()
        await store.close()


def _signal(server: Server, sig: signal.Signals) -> None:
    """Send `sig` to the server's process group; return once every process in it shows the change."""
    os.killpg(server.proc.pid, sig)
    want_stopped = sig == signal.SIGSTOP
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        states = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                fields = stat[stat.rindex(")") + 2 :].split()  # state ppid pgrp ...
                if int(fields[2]) == server.proc.pid:
                    states.append(fields[0])
        if states and all((state == "T") == want_stopped for state in states):
            return
        time.sleep(0.01)
    raise AssertionError(f"the server's processes did not take {sig.name}: {states}")


async def test_spanner_paused_is_unavailable_within_the_timeout_and_serves_again_once_resumed(
    spanner_emulator: Server, spanner_database: str
) -> None:
    """A paused emulator answers nothing: each call gives up at the store timeout (503, the claim
    not relied on). Resumed, every delivery is served: none fails on what the pause left behind,
    and a claim whose answer was lost in the pause is found, never reported as another's."""
    url = spanner_table_url(spanner_database)
    # The emulator alone stalls a burst of concurrent commits for up to ~3 s at times (seen with
    # no pause at all): the warm-up and the deliveries after the pause get room for that; only
    # the deliveries into the pause get the short timeout whose bound the test holds.
    store = open_store(url, timeout_seconds=30)
    try:
        warm = await asyncio.gather(*(claim(store, run=new_run(run_id=f"{i:064x}")) for i in range(8)))
        store._timeout = 2  # type: ignore[attr-defined]
        _signal(spanner_emulator, signal.SIGSTOP)
        try:
            began = time.monotonic()
            paused = await asyncio.gather(
                *(claim(store, run=new_run(run_id=f"{i + 50:064x}")) for i in range(4)), return_exceptions=True
            )
            assert all(isinstance(r, StoreUnavailable) for r in paused), paused
            assert time.monotonic() - began < 4
        finally:
            _signal(spanner_emulator, signal.SIGCONT)

        store._timeout = 30  # type: ignore[attr-defined]
        after = await asyncio.gather(
            *(claim(store, run=new_run(run_id=f"{i + 100:064x}")) for i in range(16)), return_exceptions=True
        )
        failed = [r for r in after if isinstance(r, BaseException)]
        assert failed == [], f"{len(failed)} of 16 claims failed after the resume: {failed[0]}"
        done = await store.finish(warm[0], Finish(COMPLETED, target=LOG_TARGET), T0)
        assert done.status == COMPLETED
        # The claims sent into the pause may have landed after it (their answers lost): a retry
        # finds its run created or busy (the lease holds it until it expires), never a mismatch.
        for i in range(4):
            retried = await claim(store, run=new_run(run_id=f"{i + 50:064x}"))
            assert retried.decision in (Decision.CREATE, Decision.BUSY)
    finally:
        await store.close()
