"""Fresh deliveries through a real `runonce serve` on each claim store, at loopback and with a fixed
round-trip time added between runonce and the store.

    .venv/bin/python bench/bench_stores.py             # the README's table (~6 min)
    .venv/bin/python bench/bench_stores.py --smoke     # seconds: proves it still runs

Stores: SQLite (a file on local disk, the baseline of the ratios), the Firestore emulator, the
Spanner emulator, redis-server. Every server posts to the same downstream (bench/downstream_app.py,
an `http` route), one delivery at a time, each a run never seen before. Per store and RTT:

- median and p99 latency of a fresh delivery (client side), medians over rounds;
- store round trips per fresh delivery: counted in-process on the store's client through the same
  Runner (claim, the force run's record read beside it, finish);
- server CPU per delivery: utime+stime of the `runonce serve` process tree from /proc, over the
  round's deliveries;
- ratios to SQLite at loopback in the same run (the machine is shared: absolute figures drift).

RTT: bench/latency_proxy.py sits between runonce and the store's TCP port (gRPC for the Firestore
and Spanner emulators, RESP for redis). It delays each direction by half the RTT, so every request
the client waits on costs the RTT once. SQLite is a file: no proxy, its rows repeat the loopback run.
Rounds are interleaved (store order rotates each round) so noise falls on every store alike.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_delivery import Uvicorn, p99, sequential  # noqa: E402
from tests.support.backends import create_spanner_database, start_redis, start_spanner_emulator  # noqa: E402
from tests.support.procs import free_port, start_firestore_emulator, start_server  # noqa: E402

PROJECT = "runonce-bench"
STORES = ("sqlite", "firestore", "spanner", "redis")
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- the servers ------------------------------------------------------------------------------


class Backends:
    """The store servers (started once) and, per store, the env a runonce process needs to reach
    it at `host` (the server itself or a proxy in front of it)."""

    def __init__(self, logs: Path, stack: ExitStack):
        self.logs = logs
        firestore = start_firestore_emulator(logs)
        stack.callback(firestore.stop)
        spanner = start_spanner_emulator(logs)
        stack.callback(spanner.stop)
        redis = start_redis(logs)
        stack.callback(redis.stop)
        os.environ["SPANNER_EMULATOR_HOST"] = spanner.host
        os.environ["FIRESTORE_EMULATOR_HOST"] = firestore.host
        self.spanner_url = create_spanner_database("bench")
        self.hosts = {"firestore": firestore.host, "spanner": spanner.host, "redis": f"127.0.0.1:{redis.port}"}

    def env(self, store: str, host: str | None, tag: str) -> dict[str, str]:
        if store == "sqlite":
            return {"RUNONCE_STORE": f"sqlite:///{self.logs / f'runs-{tag}.db'}"}
        if store == "firestore":
            return {
                "RUNONCE_STORE": "firestore",
                "RUNONCE_FIRESTORE_PROJECT": PROJECT,
                "RUNONCE_FIRESTORE_COLLECTION": f"bench_{tag}",
                "FIRESTORE_EMULATOR_HOST": host or "",
            }
        if store == "spanner":
            return {"RUNONCE_STORE": self.spanner_url, "SPANNER_EMULATOR_HOST": host or ""}
        return {"RUNONCE_STORE": f"redis://{host}/0"}


@contextmanager
def proxied(host: str | None, rtt_ms: float) -> Iterator[str | None]:
    """`host`, or a latency proxy in front of it adding `rtt_ms` per round trip."""
    if host is None or rtt_ms == 0:
        yield host
        return
    port = free_port()
    proxy = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "bench" / "latency_proxy.py"),
            "--listen",
            f"127.0.0.1:{port}",
            "--target",
            host,
            "--rtt-ms",
            str(rtt_ms),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert proxy.stdout is not None and proxy.stdout.readline().strip() == b"ready"
        yield f"127.0.0.1:{port}"
    finally:
        proxy.terminate()
        proxy.wait(10)


# -- what is measured -------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime+stime of `pid` and every process descended from it (workers, if any)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "(comm)": state ppid ... utime stime
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent and p not in tree]
        tree.update(children)
        frontier.extend(children)
    return sum(times.get(p, 0.0) for p in tree)


def one_round(url: str, pid: int, deliveries: int) -> tuple[list[float], float]:
    """(latencies in ms, server CPU ms per delivery) of `deliveries` fresh runs in a row."""
    before = cpu_seconds(pid)
    latencies = asyncio.run(sequential(url, deliveries))
    return latencies, (cpu_seconds(pid) - before) * 1000 / deliveries


async def count_round_trips(store_kind: str, backends: Backends) -> dict[str, int]:
    """Store requests of one fresh scheduled delivery through the Runner (as `runonce serve` runs
    it), counted on the store's client after a warm-up run: {"claim+finish": n, "delivery": n}."""
    from runonce.run.delivery import Delivery
    from runonce.run.runner import Runner
    from runonce.stores import Finish, NewRun, open_store
    from runonce.targets.scripted import ScriptedTarget

    env = backends.env(store_kind, backends.hosts.get(store_kind), f"count_{uuid.uuid4().hex[:8]}")
    url = env["RUNONCE_STORE"]
    store = open_store(
        url, firestore_project=PROJECT, firestore_collection=env.get("RUNONCE_FIRESTORE_COLLECTION", "x")
    )
    count = counter(store_kind, store)
    await count.arm()
    now = datetime.now(UTC)
    lease, retention = timedelta(seconds=300), timedelta(days=1)
    runner = Runner(
        store,
        {"bench": ScriptedTarget()},
        lease=lease,
        retention=retention,
        dispatch_timeout=timedelta(seconds=30),
        clock=lambda: now,
    )

    def delivery() -> Delivery:
        return Delivery(
            source="scheduler",
            project="p",
            location="l",
            route="bench",
            job=f"job-{uuid.uuid4().hex}",
            schedule_time=now,
            may_be_forced_retry=True,
        )

    try:
        await runner.run(delivery(), {}, "0" * 64)  # warm: connections, sessions, scripts
        count.reset()
        await runner.run(delivery(), {}, "0" * 64)
        whole = count.total()
        count.reset()
        new = NewRun(uuid.uuid4().hex, "bench", "scheduler", "p", "l", "job", None, None, "0" * 64)
        claim = await store.claim(new, now, lease, retention)
        await store.finish(claim, Finish("completed", target={"type": "scripted", "resource": "x"}), now)
        return {"claim+finish": count.total(), "delivery": whole}
    finally:
        await store.close()


class counter:
    """Requests a store's client sends, by backend (each counted where it leaves the process)."""

    def __init__(self, kind: str, store: object):
        self.kind, self.store = kind, store
        self.statements = 0

    async def arm(self) -> None:
        if self.kind == "sqlite":

            def trace(statement: str) -> None:
                self.statements += 1

            await self.store._run(lambda conn: conn.set_trace_callback(trace))  # type: ignore[attr-defined]
        elif self.kind == "spanner":
            _count_grpc_calls()

    def reset(self) -> None:
        self.statements = 0
        GRPC_CALLS.clear()
        if self.kind == "firestore":
            self.store.round_trips.clear()  # type: ignore[attr-defined]
        if self.kind == "redis":
            self.store.round_trips = 0  # type: ignore[attr-defined]

    def total(self) -> int:
        if self.kind == "sqlite":
            return self.statements
        if self.kind == "spanner":
            return sum(GRPC_CALLS.values())
        if self.kind == "firestore":
            return sum(self.store.round_trips.values())  # type: ignore[attr-defined]
        return self.store.round_trips  # type: ignore[attr-defined]


GRPC_CALLS: collections.Counter[str] = collections.Counter()


def _count_grpc_calls() -> None:
    """Count every synchronous gRPC call (the Spanner client's) at the channel, by method."""
    import grpc._channel as channel

    for cls in (channel._UnaryUnaryMultiCallable, channel._UnaryStreamMultiCallable):
        for name in ("__call__", "with_call", "future"):
            original = getattr(cls, name, None)
            if original is None or getattr(original, "counted", False):
                continue

            def wrapped(self, *args, _original=original, **kwargs):  # type: ignore[no-untyped-def]
                method = self._method.decode() if isinstance(self._method, bytes) else self._method
                GRPC_CALLS[method.rsplit("/", 1)[-1]] += 1
                return _original(self, *args, **kwargs)

            wrapped.counted = True  # type: ignore[attr-defined]
            setattr(cls, name, wrapped)


# -- the run ----------------------------------------------------------------------------------


def measure(
    backends: Backends, downstream: Uvicorn, rtt_ms: float, args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    """Every store at one RTT: one server each, rounds interleaved."""
    routes = {"routes": {"bench": {"target": {"type": "http", "url": f"{downstream.url}/ok"}}}}
    with ExitStack() as stack:
        servers = {}
        for store in args.stores:
            host = stack.enter_context(proxied(backends.hosts.get(store), rtt_ms))
            env = {
                "RUNONCE_AUTH": "none",
                "RUNONCE_ROUTES": json.dumps(routes),
                "RUNONCE_LOG_FORMAT": "text",
                **backends.env(store, host, f"{store}_{rtt_ms:g}_{uuid.uuid4().hex[:6]}"),
            }
            server = start_server(env, backends.logs)
            stack.callback(server.stop)
            servers[store] = server
            asyncio.run(sequential(f"{server.url}/v1/routes/bench:run", args.warmup))
        latencies: dict[str, list[list[float]]] = {s: [] for s in servers}
        cpu: dict[str, list[float]] = {s: [] for s in servers}
        order = list(servers)
        for round_no in range(args.rounds):
            for store in order[round_no % len(order) :] + order[: round_no % len(order)]:
                server = servers[store]
                lat, cpu_ms = one_round(f"{server.url}/v1/routes/bench:run", server.proc.pid, args.deliveries)
                latencies[store].append(lat)
                cpu[store].append(cpu_ms)
    return {
        store: {
            "median_ms": statistics.median(statistics.median(r) for r in latencies[store]),
            "p99_ms": statistics.median(p99(r) for r in latencies[store]),
            "cpu_ms": statistics.median(cpu[store]),
        }
        for store in latencies
    }


def table(
    results: dict[float, dict[str, dict[str, float]]], trips: dict[str, dict[str, int]], args: argparse.Namespace
) -> list[str]:
    base_rtt = min(results)
    base = results[base_rtt]["sqlite"] if "sqlite" in results[base_rtt] else next(iter(results[base_rtt].values()))
    lines = [
        "| store | store RTT | median ms | p99 ms | median / SQLite | CPU ms per delivery | CPU / SQLite "
        "| store requests per fresh delivery (claim+finish) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rtt, figures in results.items():
        for store, fig in figures.items():
            t = trips.get(store, {})
            lines.append(
                f"| {store} | {'loopback' if rtt == 0 else f'{rtt:g} ms'} | {fig['median_ms']:.1f} | "
                f"{fig['p99_ms']:.1f} "
                f"| {fig['median_ms'] / base['median_ms']:.2f}x | {fig['cpu_ms']:.2f} | "
                f"{fig['cpu_ms'] / base['cpu_ms']:.2f}x "
                f"| {t.get('delivery', '?')} ({t.get('claim+finish', '?')}) |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--deliveries", type=int, default=150, help="sequential fresh deliveries per store per round")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument(
        "--rtt-ms", default="0,5", help="comma-separated RTTs added in front of the store (0 = loopback)"
    )
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--smoke", action="store_true", help="tiny numbers: proves the benchmark runs")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    args.stores = [s for s in args.stores.split(",") if s]
    unknown = sorted(set(args.stores) - set(STORES))
    if unknown:
        parser.error(f"unknown store {unknown[0]!r} (choose from {', '.join(STORES)})")
    if args.smoke:
        args.rounds, args.deliveries, args.warmup = 1, 5, 2
    rtts = [float(v) for v in args.rtt_ms.split(",")]

    logs = Path(tempfile.mkdtemp(prefix="runonce-bench-stores-"))
    started = time.monotonic()
    with ExitStack() as stack:
        backends = Backends(logs, stack)
        downstream = Uvicorn("bench.downstream_app:app", {}, logs)
        stack.callback(downstream.stop)
        trips = {store: asyncio.run(count_round_trips(store, backends)) for store in args.stores}
        results = {rtt: measure(backends, downstream, rtt, args) for rtt in rtts}

    print(
        f"fresh deliveries through runonce serve, http downstream; {args.rounds} round(s) x {args.deliveries}, "
        f"interleaved, medians over rounds; {time.monotonic() - started:.0f}s"
    )
    print("\n".join(table(results, trips, args)))
    if args.json:
        args.json.write_text(
            json.dumps({"results": {str(k): v for k, v in results.items()}, "round_trips": trips}, indent=2)
        )


if __name__ == "__main__":
    main()
