"""runonce against itself with extra environment, in one interleaved run: prices a lever that an
environment variable can switch (a package put on PYTHONPATH, a setting) before anyone changes code.

    .venv/bin/python bench/bench_variant.py PYTHONPATH=/tmp/sniffio-site   # [--rounds 5] [--smoke]

Same set-up and rounds as bench_perf.py (Firestore emulator, local downstream, `http` target, JSON
logs); prints each figure's median for both servers and the variant's ratio.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_perf import Downstream, Figures, contenders, measure_rounds, with_servers
from tests.support.procs import start_firestore_emulator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env", nargs="+", help="NAME=VALUE added to the variant's environment")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--latency-requests", type=int, default=200)
    parser.add_argument("--throughput-requests", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.warmup, args.latency_requests, args.throughput_requests = 1, 8, 10, 32
    extra = dict(item.split("=", 1) for item in args.env)

    runonce = contenders()[0]
    base_env = runonce.env
    variant = replace(
        runonce, name="variant", env=lambda firestore, downstream: {**base_env(firestore, downstream), **extra}
    )
    logs = Path(tempfile.mkdtemp(prefix="runonce-bench-variant-"))
    emulator = start_firestore_emulator(logs)
    downstream = Downstream(logs)
    figures = Figures()
    try:
        with_servers(
            [runonce, variant],
            emulator.host,
            downstream.url,
            logs,
            lambda servers: measure_rounds(servers, emulator.proc.pid, figures, "", args),
        )
    finally:
        downstream.stop()
        emulator.stop()

    print(f"runonce vs runonce with {extra}; {args.rounds} interleaved round(s), medians")
    for figure in ("cpu_ms", "cpu_seq_ms", "throughput", "median_ms", "p99_ms"):
        a, b = figures.median("runonce", figure), figures.median("variant", figure)
        print(f"{figure:12} {a:9.2f} {b:9.2f}  variant/runonce {b / a:.2f}x")


if __name__ == "__main__":
    main()
