"""Client CPU per POST: httpx over its own transport (httpcore) against httpx over aiohttp's pool
(`runonce/targets/transport.py`), the same local downstream, interleaved rounds, medians.

    .venv/bin/python bench/bench_transport.py            # [--rounds 5] [--posts 3000] [--concurrency 16]

CPU is this process's utime+stime over the POSTs of a round (the downstream runs in its own
process); the body and headers are an `http` target's.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runonce.targets.transport import target_client
from tests.support.procs import free_port

BODY = b'{"run_id":"' + b"0" * 64 + b'","route":"r","job":"j","schedule_time":"2026-10-16T12:00:00Z","payload":{}}'
HEADERS = {"Idempotency-Key": "0" * 64, "Content-Type": "application/json"}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def round_of(client: httpx.AsyncClient, url: str, posts: int, concurrency: int) -> float:
    """CPU milliseconds per POST over `posts` POSTs, `concurrency` at a time."""
    gate = asyncio.Semaphore(concurrency)

    async def post() -> None:
        async with gate:
            answer = await client.post(url, content=BODY, headers=HEADERS)
            assert answer.status_code == 200, answer.status_code

    started = cpu_seconds()
    await asyncio.gather(*(post() for _ in range(posts)))
    return 1000 * (cpu_seconds() - started) / posts


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--posts", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    port = free_port()
    downstream = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--app-dir",
            str(Path(__file__).parent),
            "downstream_app:app",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
    )
    url = f"http://127.0.0.1:{port}/run"
    clients = {"httpcore": httpx.AsyncClient(timeout=30), "aiohttp": target_client(30)}
    try:
        for _ in range(100):  # the downstream is up, and each client has its connections
            try:
                for client in clients.values():
                    await round_of(client, url, 50, args.concurrency)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        figures: dict[str, list[float]] = {name: [] for name in clients}
        for _ in range(args.rounds):
            for name, client in clients.items():
                figures[name].append(await round_of(client, url, args.posts, args.concurrency))
        medians = {name: statistics.median(values) for name, values in figures.items()}
        for name, value in medians.items():
            print(f"{name:9} {value:.3f} ms CPU per POST (median of {args.rounds}, {args.concurrency} concurrent)")
        print(f"aiohttp / httpcore: {medians['aiohttp'] / medians['httpcore']:.2f}x")
    finally:
        for client in clients.values():
            await client.aclose()
        downstream.terminate()
        downstream.wait()


if __name__ == "__main__":
    asyncio.run(main())
