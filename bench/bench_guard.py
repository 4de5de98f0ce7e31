"""What the downstream guard costs per step, on the Firestore emulator.

    .venv/bin/python bench/bench_guard.py            # 5 rounds x 200 steps (~1 min)
    .venv/bin/python bench/bench_guard.py --smoke    # seconds

Contenders, alternating within each round so machine noise falls on all of them:
- bare write: one `document.set()` of a record-sized document (what a job would do anyway to note
  "step done", with no claim and no fencing);
- guard, fresh step: `once(step)` around an empty body = claim (create) + finish (fenced update);
- guard, replay in the attempt: `once(step)` again on a step this attempt completed = the refused
  create + a read, body skipped (a step repeated within one attempt: rare);
- guard, replay by a retry: the same steps from the task's next attempt (`CLOUD_RUN_TASK_ATTEMPT=1`),
  which reads first = one read, body skipped (the replay that matters: a retried task).
Reports median and p99 latency per step (ms) and steps/s, one client, sequential.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "guard"))

from google.cloud import firestore  # noqa: E402

from runonce_guard import Guard, GuardSettings  # noqa: E402
from runonce_guard.stores.firestore import FirestoreStepStore  # noqa: E402
from tests.support.procs import start_firestore_emulator  # noqa: E402

PROJECT = "runonce-bench"


def timed(fn, n: int) -> list[float]:
    samples = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    rounds, steps = (1, 20) if args.smoke else (args.rounds, args.steps)

    emulator = start_firestore_emulator(Path(tempfile.mkdtemp()))
    os.environ["FIRESTORE_EMULATOR_HOST"] = emulator.host
    try:
        client = firestore.Client(project=PROJECT)
        bare = client.collection("bare")
        store = FirestoreStepStore(client=client, collection="runonce_steps")
        results: dict[str, list[float]] = {
            "bare write": [],
            "guard, fresh step": [],
            "guard, replay in the attempt": [],
            "guard, replay by a retry": [],
        }
        record = {
            "status": "completed",
            "attempt_id": uuid.uuid4().hex,
            "attempts": 1,
            "result": None,
            "updated_at": datetime.now(UTC),
            "expire_at": datetime.now(UTC),
        }
        for _ in range(rounds):
            run_id = uuid.uuid4().hex
            guard = Guard(store, GuardSettings(), environ={"IDEMPOTENCY_KEY": run_id})
            bare.document(f"{run_id}-warm").set(record)  # channel and emulator warm-up, untimed
            guard.once("warm")(lambda: None)()
            results["bare write"] += timed(lambda i, run_id=run_id: bare.document(f"{run_id}-{i}").set(record), steps)
            results["guard, fresh step"] += timed(lambda i, guard=guard: guard.once(f"s{i}")(lambda: None)(), steps)
            results["guard, replay in the attempt"] += timed(
                lambda i, guard=guard: guard.once(f"s{i}")(lambda: None)(), steps
            )
            retry = Guard(store, GuardSettings(), environ={"IDEMPOTENCY_KEY": run_id, "CLOUD_RUN_TASK_ATTEMPT": "1"})
            results["guard, replay by a retry"] += timed(
                lambda i, retry=retry: retry.once(f"s{i}")(lambda: None)(), steps
            )
        print(f"{rounds} rounds x {steps} steps, one client, sequential, Firestore emulator")
        print(f"{'contender':<30} {'median ms':>10} {'p99 ms':>8} {'steps/s':>8}")
        for name, samples in results.items():
            ordered = sorted(samples)
            p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
            print(f"{name:<30} {statistics.median(ordered):>10.2f} {p99:>8.2f} {1000 / statistics.mean(ordered):>8.0f}")
        client.close()
    finally:
        emulator.stop()


if __name__ == "__main__":
    main()
