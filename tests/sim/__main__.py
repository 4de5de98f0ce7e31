"""`python -m tests.sim [--store memory|sqlite|firestore] [--seed N] [--histories N] [--faults JSON]`:
explore histories, or replay one seed with exactly the given faults (the command a failure prints).
Firestore needs FIRESTORE_EMULATOR_HOST (the test session starts its own emulator)."""

from __future__ import annotations

import argparse
import json
import sys

from .run import DEFAULT_SEED, describe, explore, quiet
from .world import draw_config, run_history


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim")
    parser.add_argument("--store", default="memory", choices=["memory", "sqlite", "firestore"])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--histories", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10_000)
    parser.add_argument("--faults", help="replay --seed with exactly these faults (JSON object)")
    args = parser.parse_args()
    if args.faults is not None:
        quiet()
        config = draw_config(args.seed, args.store)
        report = run_history(config, json.loads(args.faults))
        print(config)
        print("\n".join(describe(report)) if report.violations else f"seed {args.seed}: no violation")
        return 1 if report.violations else 0
    summary = explore(args.store, args.seed, args.histories, args.seconds)
    print("\n".join(summary.lines()))
    return 1 if summary.failures else 0


sys.exit(main())
