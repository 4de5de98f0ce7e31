"""Client-side CPU of the Firestore store alone: one fresh scheduled run as the Runner does it (the
claim beside a read of the force run's record, then the finish), in-process against the emulator.

    .venv/bin/python bench/bench_firestore_store.py                          # this tree
    .venv/bin/python bench/bench_firestore_store.py --tree before=/tmp/old   # this tree vs another

Each tree runs in its own child process (PYTHONPATH=tree, so its `app` is imported) that warms up,
then times `--runs` fresh runs one after another: process CPU (utime+stime, gRPC's threads
included) per run, and the store's round trips per run. Rounds rotate the trees' order so machine
noise falls on each alike; the figures are medians over rounds, the ratio is each tree's over the
first's. A second tree is e.g. `git archive <rev> | tar -x -C /tmp/old`.
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
from datetime import UTC
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROJECT = "runonce-bench"


async def child(runs: int, warmup: int) -> dict[str, float]:
    from datetime import datetime, timedelta

    from runonce.stores import Finish, NewRun
    from runonce.stores.firestore import FirestoreStore

    store = FirestoreStore(project=PROJECT, collection=f"bench_store_{uuid.uuid4().hex[:8]}")
    now = datetime.now(UTC)
    lease, retention = timedelta(seconds=300), timedelta(days=1)

    async def one() -> None:
        new = NewRun(uuid.uuid4().hex, "bench", "scheduler", "p", "l", "job", "2026-12-01T00:00:00Z", None, "0" * 64)
        claim, _ = await asyncio.gather(store.claim(new, now, lease, retention), store.get(uuid.uuid4().hex, now))
        await store.finish(claim, Finish("completed", target={"type": "http", "resource": "x"}), now)

    try:
        for _ in range(warmup):
            await one()
        store.round_trips.clear()
        started = time.process_time()
        for _ in range(runs):
            await one()
        cpu = time.process_time() - started
        return {"cpu_ms": cpu * 1000 / runs, "round_trips": sum(store.round_trips.values()) / runs}
    finally:
        await store.close()


def run_child(tree: Path, emulator: str, args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "FIRESTORE_EMULATOR_HOST": emulator}
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            "--runs",
            str(args.runs),
            "--warmup",
            str(args.warmup),
        ],
        env=env,
        cwd="/",
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of another source tree to compare")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=500, help="fresh runs timed per tree per round")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--smoke", action="store_true", help="tiny numbers: proves the benchmark runs")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args.runs, args.warmup))))
        return
    if args.smoke:
        args.rounds, args.runs, args.warmup = 1, 5, 2
    trees = {"this": REPO, **{name: Path(path) for name, path in (t.split("=", 1) for t in args.tree)}}

    sys.path.insert(0, str(REPO))
    from tests.support.procs import start_firestore_emulator

    emulator = start_firestore_emulator(Path(tempfile.mkdtemp(prefix="runonce-bench-fsstore-")))
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    try:
        order = list(trees)
        for round_no in range(args.rounds):
            for name in order[round_no % len(order) :] + order[: round_no % len(order)]:
                samples[name].append(run_child(trees[name], emulator.host, args))
    finally:
        emulator.stop()

    load = os.getloadavg()[0]
    print(
        f"Firestore store, one fresh scheduled run (claim + force-run read, finish), in-process; "
        f"{args.rounds} round(s) x {args.runs} runs, rotating order, medians; load average {load:.1f}"
    )
    first = statistics.median(s["cpu_ms"] for s in samples["this"])
    for name, rounds in samples.items():
        cpu = statistics.median(s["cpu_ms"] for s in rounds)
        spread = " ".join(f"{s['cpu_ms']:.3f}" for s in rounds)
        print(
            f"{name:8} CPU ms per run {cpu:.3f} ({cpu / first:.2f}x this)  round trips per run "
            f"{rounds[0]['round_trips']:g}  rounds: {spread}"
        )


if __name__ == "__main__":
    main()
