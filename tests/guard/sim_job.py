"""A Cloud Run job task for the simulation: STEPS steps, each appending one line (its side effect).

Chaos for this attempt is read from $SIM_CHAOS_FILE (the driver rewrites it before each attempt, so
the environment stays the same across retries, as Cloud Run's are): `{"step": k, "where": w}` with
w = raise_before (the step raises before its side effect), crash_before (the container dies inside
the step, before its side effect: kill -9 of the process group), crash_after (dies right after step
k completed). Mode `library` uses `once`; mode `wrapper` runs one `runonce-guard run` per step.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path


def plan() -> dict | None:
    return json.loads(Path(os.environ["SIM_CHAOS_FILE"]).read_text() or "null")


def chaos(step: int, where: str) -> None:
    chosen = plan()
    if chosen and chosen["step"] == step and chosen["where"] == where:
        if where == "raise_before":
            raise RuntimeError(f"chaos in step {step}")
        os.killpg(0, signal.SIGKILL)  # the whole container, wrapper included: no clean-up runs


def side_effect(step: int) -> None:
    with open(os.environ["SIM_EFFECTS"], "a") as out:
        out.write(f"task{os.environ['CLOUD_RUN_TASK_INDEX']}:s{step}:attempt{os.environ['CLOUD_RUN_TASK_ATTEMPT']}\n")


def run_step(step: int) -> None:
    """One step's body (in the wrapper mode, the command the wrapper runs)."""
    try:
        chaos(step, "raise_before")
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
    chaos(step, "crash_before")
    side_effect(step)


def main() -> int:
    mode, steps = sys.argv[1], int(os.environ["SIM_STEPS"])
    if mode == "step":
        run_step(int(sys.argv[2]))
        return 0
    for step in range(steps):
        if mode == "library":
            from runonce_guard import once

            with once(f"s{step}") as guarded:
                if not guarded.done:
                    chaos(step, "raise_before")
                    chaos(step, "crash_before")
                    side_effect(step)
        else:
            wrapper = Path(sys.executable).parent / "runonce-guard"
            code = subprocess.call(
                [str(wrapper), "run", "--step", f"s{step}", "--", sys.executable, __file__, "step", str(step)]
            )
            if code != 0:
                return code
        chaos(step, "crash_after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
