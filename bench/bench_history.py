"""A delivery's and an audit's cost against the history a store keeps: 100 records of an `overlap`
route in the store, then 100,000.

    .venv/bin/python bench/bench_history.py              # every store (~10 min: seeding the emulators)
    .venv/bin/python bench/bench_history.py --smoke      # seconds: 100 against 1,000, SQLite and memory
    .venv/bin/python bench/bench_history.py --stores redis,sqlite --large 20000

Per store (memory, SQLite on local disk, the Firestore emulator, the Spanner emulator,
redis-server), at each history size:

- a fresh delivery on an `overlap: skip` route through the Runner (claim, the overlap guard's two
  lists of the route's newest runs, dispatch to a scripted target, finish): median latency, and CPU
  per delivery of runonce (this process) and of the store's server (redis-server's own count, in
  microseconds, from INFO; an emulator's process tree from /proc, in 10 ms clock ticks, fine for
  the emulators' tens of milliseconds a delivery);
- an audit of 60 fire times of the route (one get_many), five per round: median time;
- five times per round, the route-and-status list a delivery makes, for a route with no records: an
  index answers it at once; a server that scans the table (the emulators) takes longer the more
  the table holds, which tells the emulator's cost apart from runonce's reads.

Two stores of each kind side by side, one with each history; rounds of deliveries alternate between
them, so the shared machine's drift falls on both (medians: of every delivery for latency, of the
rounds' means for CPU, of the rounds' audits and lists). The history is written in bulk
(tests/support/history.py): completed runs, one a minute back from now, all live. The ratio
is large / small; the claim is <= 1.1 on every store. The seeded objects are frozen out of Python's
collector (`gc.freeze`): for the memory store they are in this process's heap. The web layer is
left out: its cost does not depend on the store's contents, and in-process the store's share is not
diluted by it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_stores import cpu_seconds  # noqa: E402
from runonce.missed.audit import missing, scheduled_runs  # noqa: E402
from runonce.run.delivery import Delivery  # noqa: E402
from runonce.run.guarantees import RouteGuard  # noqa: E402
from runonce.run.runner import Rules, Runner  # noqa: E402
from runonce.stores import RunStore, open_store  # noqa: E402
from runonce.stores.base import COMPLETED  # noqa: E402
from runonce.targets.scripted import ScriptedTarget  # noqa: E402
from tests.support.clock import Clock  # noqa: E402
from tests.support.history import LEASE, RETENTION, ROUTE, ROUTES, history, seed  # noqa: E402  # noqa: E402

STORES = ("memory", "sqlite", "firestore", "spanner", "redis")
AUDITS_PER_ROUND = 5  # the audit is one batch read: several per round, so its median is not of 7 samples
BODY = "0" * 64


class Servers:
    """The store servers, started on first use; `open(kind)` a new store (empty namespace) on one."""

    def __init__(self, stack: ExitStack, scratch: Path):
        self.stack, self.scratch = stack, scratch
        self.pids: dict[str, int] = {}
        self.cpu: dict[str, Callable[[], float]] = {}
        self._spanner_db: str | None = None
        self._redis_port: int | None = None
        self._redis_db = 0

    def _directory(self, name: str) -> Path:
        path = self.scratch / name
        path.mkdir(exist_ok=True)
        return path

    def open(self, kind: str) -> RunStore:
        import os

        if kind == "memory":
            from runonce.stores.memory import MemoryStore

            return MemoryStore()
        if kind == "sqlite":
            return open_store(f"sqlite:///{self.scratch / f'{uuid.uuid4().hex}.db'}", timeout_seconds=30)
        if kind == "firestore":
            if "firestore" not in self.pids:
                from tests.support.procs import start_firestore_emulator

                emulator = start_firestore_emulator(self._directory("firestore"))
                self.stack.callback(emulator.stop)
                os.environ["FIRESTORE_EMULATOR_HOST"] = emulator.host
                self.pids["firestore"] = pid = emulator.proc.pid
                self.cpu["firestore"] = lambda: cpu_seconds(pid)
            from tests.support.stores import firestore_store

            return firestore_store(timeout_seconds=60)
        if kind == "spanner":
            if self._spanner_db is None:
                from tests.support.backends import create_spanner_database, start_spanner_emulator

                emulator = start_spanner_emulator(self._directory("spanner"))
                self.stack.callback(emulator.stop)
                self.pids["spanner"] = pid = emulator.proc.pid
                self.cpu["spanner"] = lambda: cpu_seconds(pid)
                self._spanner_db = create_spanner_database("bench")
            from tests.support.stores import spanner_table_url

            return open_store(spanner_table_url(self._spanner_db), timeout_seconds=60)
        if kind == "redis":
            if self._redis_port is None:
                from tests.support.backends import start_redis

                server = start_redis(self._directory("redis"))
                self.stack.callback(server.stop)
                self.pids["redis"] = server.proc.pid
                self.cpu["redis"] = _redis_cpu(server.port)
                self._redis_port = server.port
            self._redis_db += 1  # a database each: the index sets are per database
            return open_store(f"redis://127.0.0.1:{self._redis_port}/{self._redis_db}", timeout_seconds=60)
        raise SystemExit(f"unknown store {kind!r}; one of {', '.join(STORES)}")


async def _idle(resource: str) -> bool:
    return False


def _runner(store: RunStore, clock: Clock) -> Runner:
    return Runner(
        store,
        {ROUTE: ScriptedTarget(running=_idle)},
        lease=LEASE,
        retention=RETENTION,
        dispatch_timeout=timedelta(seconds=30),
        clock=clock,
        routes={ROUTE: Rules(RouteGuard("skip"))},
    )


def _redis_cpu(port: int) -> Callable[[], float]:
    """redis-server's CPU seconds as it counts them (getrusage, in microseconds): a delivery costs
    it about half a millisecond, less than one of /proc's 10 ms clock ticks a round."""
    import redis

    client = redis.Redis(port=port)

    def cpu() -> float:
        info = client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    return cpu


async def one_round(
    runner: Runner, clock: Clock, server_cpu: Callable[[], float] | None, deliveries: int
) -> dict[str, list[float]]:
    """`deliveries` fresh deliveries, then audits of 60 fire times: latencies, CPU per delivery."""
    latencies = []
    cpu0, server0 = time.process_time(), server_cpu() if server_cpu else 0.0
    for _ in range(deliveries):
        clock.advance(60)  # each delivery a new fire time, as a minutely route
        delivery = Delivery(
            source="scheduler",
            project="proj-1",
            location="us-central1",
            route=ROUTE,
            job="nightly",  # type: ignore[arg-type]
            schedule_time=clock(),  # type: ignore[arg-type]
        )
        start = time.perf_counter()
        result = await runner.run(delivery, {}, BODY)
        latencies.append(time.perf_counter() - start)
        assert result.status == "processed", result.body()
    cpu = (time.process_time() - cpu0) / deliveries
    server = (server_cpu() - server0) / deliveries if server_cpu else 0.0
    now = clock()
    runs = scheduled_runs(ROUTES, now - LEASE - timedelta(minutes=60), now - LEASE)  # type: ignore[operator]
    audits = []
    for _ in range(AUDITS_PER_ROUND):
        start = time.perf_counter()
        await missing(runner.store, runs, now)  # type: ignore[arg-type]
        audits.append(time.perf_counter() - start)
    return {"delivery_ms": latencies, "runonce_cpu_ms": [cpu], "server_cpu_ms": [server], "audit_ms": audits}


async def bench_store(
    servers: Servers, kind: str, small: int, large: int, rounds: int, per_round: int
) -> dict[str, Any]:
    """Two stores of `kind` side by side, one holding `small` records of the route and one `large`;
    rounds alternate between them (and which goes first), so the machine's drift falls on both."""
    stores = {"small": servers.open(kind), "large": servers.open(kind)}
    clocks = {"small": Clock(), "large": Clock()}
    server_cpu = servers.cpu.get(kind)
    samples: dict[str, dict[str, list[float]]] = {size: {} for size in stores}
    try:
        began = time.monotonic()
        for size, count in (("small", small), ("large", large)):
            await seed(stores[size], history(count, clocks[size](), RETENTION))  # type: ignore[arg-type]
        seeded = time.monotonic() - began
        # The memory store's history lives in this process's heap: exempt it from the collector, so
        # a full collection's pass over 100,000 records is not timed as the delivery's read.
        gc.collect()
        gc.freeze()
        runners = {size: _runner(stores[size], clocks[size]) for size in stores}
        for size in stores:  # warm up: connections, caches, the JIT of an emulator
            await one_round(runners[size], clocks[size], server_cpu, 5)
        for i in range(rounds):
            for size in ("small", "large") if i % 2 == 0 else ("large", "small"):
                measured = await one_round(runners[size], clocks[size], server_cpu, per_round)
                for name, values in measured.items():
                    samples[size].setdefault(name, []).extend(values)
                for _ in range(AUDITS_PER_ROUND):
                    samples[size].setdefault("no_route_list_ms", []).append(
                        await _list_of_no_route(stores[size], clocks[size])
                    )
    finally:
        gc.unfreeze()
        for store in stores.values():
            await store.close()
    medians = {size: {name: statistics.median(v) * 1000 for name, v in samples[size].items()} for size in stores}
    at_small, at_large = medians["small"], medians["large"]
    ratios = {name: at_large[name] / at_small[name] if at_small[name] else None for name in at_small}
    return {"store": kind, "small": at_small, "large": at_large, "ratio": ratios, "seed_seconds": round(seeded, 1)}


async def _list_of_no_route(store: RunStore, clock: Clock) -> float:
    """The route-and-status list a delivery makes, for a route with no records at all. Read through
    an index it finds nothing at once, whatever the table holds; its time growing with the table is
    the server scanning the table (both emulators do, index or not)."""
    start = time.perf_counter()
    await store.list(clock(), route="no-such-route", status=COMPLETED, limit=20)
    return time.perf_counter() - start


def _row(result: dict[str, Any]) -> str:
    cells = []
    for name in ("delivery_ms", "runonce_cpu_ms", "server_cpu_ms", "audit_ms", "no_route_list_ms"):
        ratio = result["ratio"][name]
        cells.append(
            f"{result['small'][name]:7.2f} {result['large'][name]:7.2f} {'  -  ' if ratio is None else f'{ratio:5.2f}'}"
        )
    return f"{result['store']:<9} " + "   ".join(cells)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--per-round", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="100 against 1,000 on memory and SQLite, 2 short rounds")
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = parser.parse_args()
    if args.smoke:
        args.stores, args.large, args.rounds, args.per_round = "memory,sqlite", 1000, 2, 5
    results = []
    with ExitStack() as stack, tempfile.TemporaryDirectory() as scratch:
        servers = Servers(stack, Path(scratch))
        for kind in args.stores.split(","):
            results.append(await bench_store(servers, kind, args.small, args.large, args.rounds, args.per_round))
            print(f"{_row(results[-1])}   (seeding took {results[-1]['seed_seconds']} s)", file=sys.stderr)
    print(f"history {args.small} -> {args.large} records of one overlap route; medians; ratio = large / small")
    header = "   ".join(
        f"{name:^21}"
        for name in ("delivery ms", "runonce CPU ms", "server CPU ms", "audit ms (60)", "list, no such route")
    )
    print(f"{'store':<9} {header}")
    for result in results:
        print(_row(result))
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
