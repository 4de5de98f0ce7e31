"""Fresh-delivery latency and throughput: runonce versus the textbook transaction pattern.

One run, one Firestore emulator, one downstream, both contenders served by uvicorn in their own
process and driven over HTTP the way Cloud Scheduler would. Rounds alternate between the two so
that machine noise falls on both; figures are medians over rounds.

    .venv/bin/python bench/bench_delivery.py            # full run (~3 min)
    .venv/bin/python bench/bench_delivery.py --smoke    # seconds: CI checks that it still works

Reports: median and p99 latency of a fresh delivery (one at a time), deliveries/s at concurrency 16,
Firestore RPCs per fresh run (counted on the client), and runonce's resident memory over 10,000
deliveries.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.procs import free_port, start_firestore_emulator, start_server, wait_for  # noqa: E402

PROJECT = "runonce-bench"


class Uvicorn:
    """A uvicorn process serving `target` (module:app), for the baseline and the downstream."""

    def __init__(self, target: str, env: dict[str, str], logs: Path):
        self.port = free_port()
        self.log = logs / f"{target.replace(':', '_')}-{self.port}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", target, "--port", str(self.port), "--log-level", "info"],
                cwd=REPO,
                env={**os.environ, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_for(
            lambda: httpx.get(f"{self.url}/healthz", timeout=1).status_code in (200, 404),
            30,
            target,
            self.proc,
            self.log,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def schedule_headers(job: str) -> dict[str, str]:
    return {"X-CloudScheduler-JobName": job, "X-CloudScheduler-ScheduleTime": "2026-10-16T12:00:00Z"}


async def deliver(client: httpx.AsyncClient, url: str) -> float:
    """One fresh run (a job name never used before); its latency in ms."""
    started = time.perf_counter()
    response = await client.post(url, headers=schedule_headers(f"job-{uuid.uuid4().hex}"))
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"{url}: HTTP {response.status_code}: {response.text[:200]}")
    return elapsed


async def sequential(url: str, count: int) -> list[float]:
    async with httpx.AsyncClient(timeout=60) as client:
        return [await deliver(client, url) for _ in range(count)]


async def concurrent(url: str, count: int, concurrency: int) -> tuple[float, list[float]]:
    """(deliveries per second, latencies) for `count` fresh runs, `concurrency` in flight."""
    latencies: list[float] = []
    queue = iter(range(count))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def worker() -> None:
            for _ in queue:
                latencies.append(await deliver(client, url))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    return count / wall, latencies


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) >= 2 else values[0]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def count_rpcs() -> dict[str, Counter[str]]:
    """Firestore RPCs of one fresh run, counted on the GAPIC client both contenders go through."""
    from bench import baseline_app
    from runonce.stores import Finish, NewRun
    from runonce.stores.base import COMPLETED
    from runonce.stores.firestore import FirestoreStore

    def counted(client) -> Counter[str]:
        calls: Counter[str] = Counter()
        api = client._firestore_api
        for name in ("commit", "batch_get_documents", "begin_transaction", "rollback", "run_query", "get_document"):
            method = getattr(api, name)

            def wrapper(*args, _method=method, _name=name, **kwargs):
                calls[_name] += 1
                return _method(*args, **kwargs)

            setattr(api, name, wrapper)
        return calls

    store = FirestoreStore(project=PROJECT, collection="rpc_runonce")
    runonce_calls = counted(store._client)
    now = datetime.now(UTC)
    run = NewRun(uuid.uuid4().hex, "bench", "scheduler", "p", "l", "job", "2026-10-16T12:00:00Z", None, "0" * 64)
    claim = await store.claim(run, now, timedelta(seconds=300), timedelta(days=1))
    await store.finish(claim, Finish(COMPLETED, target={"type": "http", "resource": "x"}), now)
    await store.close()

    baseline_calls = counted(baseline_app.db)
    ref = baseline_app.collection.document(uuid.uuid4().hex)
    attempt = uuid.uuid4().hex
    assert await baseline_app.claim_run(baseline_app.db.transaction(), ref, attempt, now) == "claimed"
    await baseline_app.finish_run(baseline_app.db.transaction(), ref, attempt, True)
    return {"runonce": runonce_calls, "baseline": baseline_calls}


def start_contenders(firestore_host: str, downstream: Uvicorn, logs: Path, tag: str):
    routes = {"routes": {"bench": {"target": {"type": "http", "url": f"{downstream.url}/ok"}}}}
    runonce = start_server(
        {
            "RUNONCE_AUTH": "none",
            "RUNONCE_ROUTES": json.dumps(routes),
            "RUNONCE_STORE": "firestore",
            "RUNONCE_FIRESTORE_PROJECT": PROJECT,
            "RUNONCE_FIRESTORE_COLLECTION": f"bench_runonce_{tag}",
            "FIRESTORE_EMULATOR_HOST": firestore_host,
            "RUNONCE_LOG_FORMAT": "text",
        },
        logs,
    )
    baseline = Uvicorn(
        "bench.baseline_app:app",
        {
            "BENCH_COLLECTION": f"bench_baseline_{tag}",
            "FIRESTORE_EMULATOR_HOST": firestore_host,
            "BENCH_DOWNSTREAM_URL": f"{downstream.url}/ok",
            "BENCH_FIRESTORE_PROJECT": PROJECT,
        },
        logs,
    )
    return runonce, baseline


def compare(runonce_url: str, baseline_url: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    contenders = {"runonce": runonce_url, "baseline": baseline_url}
    for url in contenders.values():  # warm up: connections, JIT in the emulator
        asyncio.run(concurrent(url, 64, args.concurrency))
    seq: dict[str, list[list[float]]] = {name: [] for name in contenders}
    thr: dict[str, list[float]] = {name: [] for name in contenders}
    for round_no in range(args.rounds):
        order = list(contenders) if round_no % 2 == 0 else list(reversed(contenders))
        for name in order:
            seq[name].append(asyncio.run(sequential(contenders[name], args.latency_requests)))
            rate, _ = asyncio.run(concurrent(contenders[name], args.throughput_requests, args.concurrency))
            thr[name].append(rate)
    return {
        name: {
            "median_ms": statistics.median(statistics.median(r) for r in seq[name]),
            "p99_ms": statistics.median(p99(r) for r in seq[name]),
            "deliveries_per_s": statistics.median(thr[name]),
        }
        for name in contenders
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-requests", type=int, default=200, help="sequential fresh deliveries per round")
    parser.add_argument(
        "--throughput-requests", type=int, default=800, help="fresh deliveries per round at --concurrency"
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--memory-deliveries", type=int, default=10_000)
    parser.add_argument(
        "--firestore-rtt-ms",
        default="0,5,20",
        help="comma-separated round-trip times added between the contenders and the emulator "
        "(0 = loopback; Cloud Run to Firestore in one region is a few ms)",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny numbers: proves the benchmark runs")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.latency_requests, args.throughput_requests, args.memory_deliveries = 1, 10, 32, 200
    rtts = [float(value) for value in args.firestore_rtt_ms.split(",")]

    logs = Path(tempfile.mkdtemp(prefix="runonce-bench-"))
    emulator = start_firestore_emulator(logs)
    os.environ["FIRESTORE_EMULATOR_HOST"] = emulator.host
    os.environ["BENCH_FIRESTORE_PROJECT"] = PROJECT
    downstream = Uvicorn("bench.downstream_app:app", {}, logs)
    os.environ["BENCH_DOWNSTREAM_URL"] = f"{downstream.url}/ok"
    results: dict[float, dict[str, dict[str, float]]] = {}
    memory: list[tuple[int, float]] = []
    try:
        rpcs = asyncio.run(count_rpcs())
        for rtt in rtts:
            proxy = None
            host = emulator.host
            if rtt > 0:
                port = free_port()
                proxy = subprocess.Popen(
                    [
                        sys.executable,
                        str(REPO / "bench" / "latency_proxy.py"),
                        "--listen",
                        f"127.0.0.1:{port}",
                        "--target",
                        emulator.host,
                        "--rtt-ms",
                        str(rtt),
                    ],
                    stdout=subprocess.PIPE,
                )
                assert proxy.stdout is not None and proxy.stdout.readline().strip() == b"ready"
                host = f"127.0.0.1:{port}"
            runonce, baseline = start_contenders(host, downstream, logs, f"rtt{rtt:g}")
            try:
                results[rtt] = compare(
                    f"{runonce.url}/v1/routes/bench:run", f"{baseline.url}/v1/routes/bench:run", args
                )
                if rtt == rtts[0]:
                    url = f"{runonce.url}/v1/routes/bench:run"
                    memory.append((0, rss_mb(runonce.proc.pid)))
                    step = max(1, args.memory_deliveries // 5)
                    for done in range(step, args.memory_deliveries + 1, step):
                        asyncio.run(concurrent(url, step, args.concurrency))
                        memory.append((done, rss_mb(runonce.proc.pid)))
            finally:
                runonce.stop()
                baseline.stop()
                if proxy is not None:
                    proxy.terminate()
                    proxy.wait(10)
    finally:
        downstream.stop()
        emulator.stop()

    print(f"fresh deliveries against the Firestore emulator; {args.rounds} round(s), medians over rounds")
    print(
        f"{'Firestore RTT':>13} {'':9} {'median ms':>10} {'p99 ms':>9} {'deliv/s @' + str(args.concurrency):>13} "
        f"{'RPCs/run':>9}"
    )
    for rtt, figures in results.items():
        for name, fig in figures.items():
            print(
                f"{rtt:11g}ms {name:9} {fig['median_ms']:10.2f} {fig['p99_ms']:9.2f} "
                f"{fig['deliveries_per_s']:13.1f} {sum(rpcs[name].values()):9d}"
            )
        a, b = figures["runonce"], figures["baseline"]
        print(
            f"{'':13} ratio     median latency {a['median_ms'] / b['median_ms']:.2f}x (goal <= 0.5x), "
            f"throughput {a['deliveries_per_s'] / b['deliveries_per_s']:.2f}x (goal >= 2x)"
        )
    print("RPCs per fresh run: " + "; ".join(f"{name} {dict(calls)}" for name, calls in rpcs.items()))
    print(
        f"runonce RSS (MB) after N deliveries (RTT {rtts[0]:g} ms): " + ", ".join(f"{n}: {mb:.1f}" for n, mb in memory)
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "results": {str(k): v for k, v in results.items()},
                    "rpcs": {k: dict(v) for k, v in rpcs.items()},
                    "rss_mb": memory,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
