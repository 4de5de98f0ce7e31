"""`python -m tests.sim [--store memory|sqlite|firestore|spanner|redis] [--seed N] [--histories N] [--faults JSON]`:
explore histories, or replay one seed with exactly the given faults (the command a failure prints).
Firestore needs FIRESTORE_EMULATOR_HOST (the test session starts its own emulator). Spanner and
Redis use RUNONCE_SIM_SPANNER_URL (+ SPANNER_EMULATOR_HOST) / RUNONCE_SIM_REDIS_URL when set, else
this command starts the Spanner emulator / a redis-server itself for the run."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from .run import DEFAULT_SEED, describe, explore, quiet
from .world import SERVER_STORES, draw_config, run_history


def start_server_store(store: str, stack: ExitStack) -> None:
    """A Spanner emulator database (with `runonce store init`) or a redis-server for this run."""
    from tests.support.backends import create_spanner_database, start_redis, start_spanner_emulator

    logs = Path(tempfile.mkdtemp(prefix="runonce-sim-"))
    if store == "redis":
        server = start_redis(logs)
        stack.callback(server.stop)
        os.environ[SERVER_STORES[store]] = f"redis://127.0.0.1:{server.port}/0"
        return
    emulator = start_spanner_emulator(logs)
    stack.callback(emulator.stop)
    os.environ[SERVER_STORES[store]] = create_spanner_database("sim")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim")
    parser.add_argument("--store", default="memory", choices=["memory", "sqlite", "firestore", "spanner", "redis"])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--histories", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10_000)
    parser.add_argument("--faults", help="replay --seed with exactly these faults (JSON object)")
    args = parser.parse_args()
    with ExitStack() as stack:
        if args.store in SERVER_STORES and not os.environ.get(SERVER_STORES[args.store]):
            start_server_store(args.store, stack)
        return run(args)


def run(args: argparse.Namespace) -> int:
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
