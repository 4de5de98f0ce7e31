"""Deliveries per second with 1, 2 and 4 `runonce serve` instances on one store.

    .venv/bin/python bench/bench_instances.py              # the capacity page's table (~10 min)
    .venv/bin/python bench/bench_instances.py --smoke      # seconds: proves it still runs

Stores: the Firestore emulator, redis-server, the Spanner emulator, each started once. Per store and
instance count: N processes (`--workers 1` each) on one fresh namespace of that store, driven by the
burst of tests/support/burst.py: distinct Cloud Tasks runs, each delivered 2 or 3 times concurrently
to different instances, every copy retried (409 in progress) until it gets a 200. A round is one
burst; the figure is the median over rounds of copies answered 200 per second, with runs per second
beside it. Each round also checks what the e2e test asserts (one downstream execution per run).

The driver, the downstream and every server share the machine's cores: with more instances than
cores the figures measure the machine as much as runonce. Quote ratios within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import uuid
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.backends import Server, create_spanner_database, start_redis, start_spanner_emulator  # noqa: E402
from tests.support.burst import Burst, calls_so_far, executions, server_env, start_instances  # noqa: E402
from tests.support.downstream import Downstream  # noqa: E402
from tests.support.procs import start_firestore_emulator  # noqa: E402
from tests.support.stores import redis_url, spanner_table_url  # noqa: E402

PROJECT = "runonce-bench"
STORES = ("firestore", "redis", "spanner")


class Backends:
    """The three store servers, started once; `env(store)` is a fresh namespace on one of them."""

    def __init__(self, logs: Path, stack: ExitStack, stores: tuple[str, ...]) -> None:
        self.logs = logs
        self.redis: Server | None = None
        self.spanner_url = ""
        if "firestore" in stores:
            firestore = start_firestore_emulator(logs)
            stack.callback(firestore.stop)
            os.environ["FIRESTORE_EMULATOR_HOST"] = firestore.host
        if "spanner" in stores:
            spanner = start_spanner_emulator(logs)
            stack.callback(spanner.stop)
            os.environ["SPANNER_EMULATOR_HOST"] = spanner.host
            self.spanner_url = create_spanner_database("bench")
        if "redis" in stores:
            redis = start_redis(logs)
            stack.callback(redis.stop)
            self.redis = redis

    def env(self, store: str) -> dict[str, str]:
        tag = uuid.uuid4().hex[:10]
        if store == "firestore":
            return {
                "RUNONCE_STORE": "firestore",
                "RUNONCE_FIRESTORE_PROJECT": PROJECT,
                "RUNONCE_FIRESTORE_COLLECTION": f"bench_{tag}",
            }
        if store == "redis":
            assert self.redis is not None
            return {"RUNONCE_STORE": redis_url(self.redis)}  # emptied first
        return {"RUNONCE_STORE": spanner_table_url(self.spanner_url)}


def measure(backends: Backends, store: str, instances: int, args: argparse.Namespace, seed: int) -> dict[str, float]:
    """Median copies/s and runs/s over `args.bursts` bursts against `instances` servers."""
    rates: list[float] = []
    run_rates: list[float] = []
    with Downstream() as downstream:
        env = server_env(backends.env(store), downstream, args.lease)
        servers = start_instances(env, backends.logs, instances)
        try:
            for round_ in range(args.bursts + 1):  # round 0 warms connections and sessions
                burst = Burst(servers, args.runs, seed + round_, concurrency=args.concurrency, prefix=f"r{round_}")
                before = calls_so_far(downstream)
                outcome = asyncio.run(burst.run())
                calls, keys = executions(downstream, before)
                unknown = outcome.answers[(504, "unknown")]  # a finish that timed out: dispatched again after the lease
                if outcome.outside_table or len(keys) != args.runs or not args.runs <= calls <= args.runs + unknown:
                    raise SystemExit(
                        f"{store} x{instances}: {calls} calls, {len(keys)} executions for {args.runs} runs; "
                        f"outside the table: {outcome.outside_table[:3]}"
                    )
                if round_:
                    rates.append(outcome.rate)
                    run_rates.append(args.runs / outcome.seconds)
        finally:
            for server in servers:
                server.stop()
    return {"deliveries_per_s": statistics.median(rates), "runs_per_s": statistics.median(run_rates)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300, help="distinct runs per burst (each sent 2-3 times)")
    parser.add_argument("--bursts", type=int, default=3, help="measured bursts per cell, after one warm-up")
    parser.add_argument("--concurrency", type=int, default=48, help="copies in flight at once")
    parser.add_argument("--instances", default="1,2,4", help="instance counts, comma-separated")
    parser.add_argument("--stores", default=",".join(STORES), help="stores, comma-separated")
    parser.add_argument(
        "--lease",
        type=float,
        default=15.0,
        help="RUNONCE_LEASE_SECONDS: how long a run a timed-out store left claimed waits",
    )
    parser.add_argument("--seed", type=int, default=None, help="the burst plan's seed (printed)")
    parser.add_argument("--smoke", action="store_true", help="tiny numbers: proves the benchmark runs")
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.bursts, args.instances = 20, 1, "1,2"
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    counts = [int(n) for n in args.instances.split(",")]
    stores = tuple(args.stores.split(","))
    print(f"seed {seed}; {args.runs} runs per burst, {args.bursts} bursts, concurrency {args.concurrency}")
    with tempfile.TemporaryDirectory(prefix="bench-instances-") as tmp, ExitStack() as stack:
        backends = Backends(Path(tmp), stack, stores)
        print(f"{'store':<10} {'instances':>9} {'deliveries/s':>13} {'runs/s':>8} {'vs 1':>6}")
        for store in stores:
            first = 0.0
            for count in counts:
                figures = measure(backends, store, count, args, seed)
                first = first or figures["deliveries_per_s"]
                ratio = figures["deliveries_per_s"] / first
                print(
                    f"{store:<10} {count:>9} {figures['deliveries_per_s']:>13.1f} "
                    f"{figures['runs_per_s']:>8.1f} {ratio:>5.2f}x",
                    flush=True,
                )


if __name__ == "__main__":
    main()
