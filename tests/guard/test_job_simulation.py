"""A Cloud Run job, simulated: the driver re-runs the task's container command with the same
environment after each failure, as Cloud Run's task retries do (only CLOUD_RUN_TASK_ATTEMPT changes),
failing attempts at random points. Across all retries each step's side effect happens exactly once.

    RUNONCE_GUARD_SIM_RUNS=50 RUNONCE_GUARD_SIM_SEED=123 .venv/bin/pytest tests/guard/test_job_simulation.py
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

SIM_JOB = Path(__file__).with_name("sim_job.py")
RUNS = int(os.environ.get("RUNONCE_GUARD_SIM_RUNS", "3"))  # runs per mode; each run has 2 tasks
STEPS = 4
MAX_ATTEMPTS = 25
WHERE = ("raise_before", "crash_before", "crash_after")


@pytest.mark.parametrize("mode", ["library", "wrapper"])
def test_each_step_side_effect_happens_once_across_task_retries(mode: str, job_env, tmp_path: Path) -> None:
    seed = int(os.environ.get("RUNONCE_GUARD_SIM_SEED", random.randrange(2**32)))
    print(f"guard job simulation: mode={mode} seed={seed} runs={RUNS} (RUNONCE_GUARD_SIM_SEED={seed} replays it)")
    rng = random.Random(seed)
    failures: Counter[str] = Counter()
    for run in range(RUNS):
        run_id = uuid.uuid4().hex  # one scheduled run = one job execution
        effects, chaos_file = tmp_path / f"effects-{run}", tmp_path / f"chaos-{run}"
        for task in ("0", "1"):
            env = job_env | {
                "IDEMPOTENCY_KEY": run_id,
                "CLOUD_RUN_TASK_INDEX": task,
                "RUNONCE_LEASE_SECONDS": "1",
                "SIM_STEPS": str(STEPS),
                "SIM_EFFECTS": str(effects),
                "SIM_CHAOS_FILE": str(chaos_file),
            }
            for attempt in range(MAX_ATTEMPTS):
                chaos = None if rng.random() < 0.35 else {"step": rng.randrange(STEPS), "where": rng.choice(WHERE)}
                chaos_file.write_text(json.dumps(chaos))
                done = subprocess.run(
                    [sys.executable, str(SIM_JOB), mode],
                    start_new_session=True,
                    timeout=120,
                    env=env | {"CLOUD_RUN_TASK_ATTEMPT": str(attempt)},
                    capture_output=True,
                    text=True,
                )
                if done.returncode == 0:
                    break
                failures[chaos["where"] if chaos else f"exit {done.returncode}"] += 1
                assert chaos is not None, f"seed={seed}: attempt without chaos failed: {done.stderr}"
            else:
                pytest.fail(f"seed={seed}: task {task} of run {run} never succeeded in {MAX_ATTEMPTS} attempts")
        lines = [line.rsplit(":", 1)[0] for line in effects.read_text().splitlines()]
        expected = sorted(f"task{t}:s{s}" for t in ("0", "1") for s in range(STEPS))
        assert sorted(lines) == expected, f"seed={seed} run={run}: side effects {Counter(lines)}"
    print(f"failures injected: {dict(failures)}")
    assert sum(failures.values()) > 0, f"seed={seed}: no failure was injected; nothing was tested"
