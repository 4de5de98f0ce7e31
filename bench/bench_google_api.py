"""What `google_api` routes cost a cold start: process start -> first 200 on a fresh delivery (to a
`log` route, so only start-up differs), for a routes file without google_api routes, with one, with
the four of examples/google_api.yaml (Batch, Dataproc, Vertex AI, Pub/Sub: the largest carried
document is aiplatform.v1), and with one route on an API read from google-api-python-client's whole
cache (the `google-api` extra). Also the size of what the image carries for them.

    .venv/bin/python bench/bench_google_api.py [--runs 5]

Runs are interleaved, after one untimed start each (files in the page cache, as on a warm host).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from runonce.targets.google_api_discovery import VENDORED  # noqa: E402
from tests.support.procs import free_port  # noqa: E402

LOG = {"demo": {"target": {"type": "log"}}}
EXAMPLES = yaml.safe_load((REPO / "examples" / "google_api.yaml").read_text())["routes"]
SCHEDULER = {
    "target": {
        "type": "google_api",
        "api": "cloudscheduler.v1",  # not carried: read from the client's cache
        "method": "projects.locations.jobs.create",
        "params": {"parent": "projects/my-project/locations/us-central1"},
        "body": {"name": "projects/my-project/locations/us-central1/jobs/j${run_id:32}", "schedule": "0 3 * * *"},
    }
}
VARIANTS = {
    "log route only": LOG,
    "+ 1 google_api route (batch.v1)": {**LOG, "nightly-batch": EXAMPLES["nightly-batch"]},
    "+ 4 google_api routes (the example file)": {**LOG, **EXAMPLES},
    "+ 1 route from the client cache (cloudscheduler.v1)": {**LOG, "scheduler": SCHEDULER},
}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cold_start(routes: dict, tmp: Path, n: int) -> tuple[float, float]:
    """(wall seconds, server CPU seconds) from process start to the first 200 on a fresh delivery."""
    routes_file = tmp / f"routes-{n}.json"
    routes_file.write_text(json.dumps({"routes": routes}))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNONCE_")}
    env |= {
        "RUNONCE_AUTH": "none",
        "RUNONCE_ROUTES_FILE": str(routes_file),
        "RUNONCE_STORE": f"sqlite:///{tmp / f'runs-{n}.db'}",
    }
    args = [sys.executable, "-m", "runonce.cli", "serve", "--port", str(port)]
    started = time.perf_counter()
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        with httpx.Client(timeout=2) as client:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"runonce serve exited with {proc.returncode}")
                try:
                    answer = client.post(
                        f"http://127.0.0.1:{port}/v1/routes/demo:run",
                        headers={
                            "X-CloudScheduler-JobName": "bench",
                            "X-CloudScheduler-ScheduleTime": f"2026-01-01T00:{n % 60:02d}:00Z",
                        },
                    )
                    if answer.status_code == 200:
                        return time.perf_counter() - started, cpu_seconds(proc.pid)
                except httpx.TransportError:
                    pass
                time.sleep(0.005)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    carried = sum(path.stat().st_size for path in VENDORED.iterdir())
    print(f"carried discovery documents: {len(list(VENDORED.glob('*.json.gz')))}, {carried / 1024:.0f} KiB")
    walls: dict[str, list[float]] = {name: [] for name in VARIANTS}
    cpus: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        n = 0
        for round_no in range(-1, args.runs):
            for name, routes in VARIANTS.items():
                n += 1
                wall, cpu = cold_start(routes, Path(tmp), n)
                if round_no >= 0:
                    walls[name].append(wall)
                    cpus[name].append(cpu)
    print(f"cold start, process start -> first 200, median of {args.runs} (min-max):")
    for name in VARIANTS:
        wall, cpu = walls[name], cpus[name]
        print(
            f"  {name:52s} wall {statistics.median(wall):.3f} s ({min(wall):.3f}-{max(wall):.3f}), "
            f"CPU {statistics.median(cpu):.3f} s"
        )


if __name__ == "__main__":
    main()
