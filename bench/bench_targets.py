"""What the Google targets cost, two source trees side by side in one run (say main and a branch):

- cold start: process start -> first 200 on a fresh delivery (to a `log` route), with a routes
  file holding one route of every Google target type (the examples' first route of each), so
  start-up validates them all;
- adapter CPU per dispatch: each target type's `dispatch` for fresh runs against an in-process
  transport answering 200 (no network, no store), process CPU time per call. What a delivery adds
  on top of the claim path for that target type.

    .venv/bin/python bench/bench_targets.py --tree /tmp/main --tree . [--runs 5] [--dispatches 400]

Runs are interleaved between the trees, after one untimed start each. Each tree runs with its
own source first on `sys.path` and this virtualenv's libraries.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
TYPES = (
    "batch_job",
    "bigquery_job",
    "cloud_build_trigger",
    "cloud_run_job",
    "cloud_tasks_task",
    "dataflow_flex_template",
    "dataproc_batch",
    "vertex_pipeline_job",
    "workflows",
)
REST_TYPES = tuple(kind for kind in TYPES if kind != "workflows")  # gRPC: not driven in-process here

COLD_START = textwrap.dedent(
    """
    import json, os, signal, subprocess, sys, time
    import httpx
    from tests.support.procs import free_port
    routes_file, store, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    def cpu(pid):
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNONCE_")}
    env |= {"RUNONCE_AUTH": "none", "RUNONCE_ROUTES_FILE": routes_file, "RUNONCE_STORE": f"sqlite:///{store}"}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "runonce.cli", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        with httpx.Client(timeout=2) as client:
            while True:
                if proc.poll() is not None:
                    raise SystemExit(proc.stderr.read().decode()[-2000:])
                try:
                    answer = client.post(f"http://127.0.0.1:{port}/v1/routes/demo:run",
                        headers={"X-CloudScheduler-JobName": "bench",
                                 "X-CloudScheduler-ScheduleTime": f"2026-01-01T00:{runs % 60:02d}:00Z"})
                    if answer.status_code == 200:
                        print(json.dumps([time.perf_counter() - started, cpu(proc.pid)]))
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.005)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
    """
)

DISPATCH = textwrap.dedent(
    """
    import asyncio, json, sys, time
    import httpx
    from pydantic import TypeAdapter
    from runonce.targets import DispatchRequest, TargetConfig, build_target
    from runonce.targets.registry import TargetContext
    blocks, count = json.loads(sys.argv[1]), int(sys.argv[2])
    ANSWER = {"name": "projects/p/locations/l/operations/o", "id": "p:US.j",
              "metadata": {"name": "projects/p/locations/l/jobs/j/executions/e", "build": {"name": "b", "id": "b"}},
              "job": {"id": "j"}}
    class Auth:
        async def access_token(self):
            return "token"
    async def main():
        out = {}
        async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(200, json=ANSWER))) as http:
            context = TargetContext(http=http, google_auth=Auth())
            for kind, block in blocks.items():
                target = build_target(TypeAdapter(TargetConfig).validate_python(block), context)
                requests = [DispatchRequest(run_id=f"{kind}{n:060d}"[-64:].replace("_", "a"), route="r", job="j",
                            schedule_time="2026-01-31T12:00:00Z", source="scheduler") for n in range(count + 50)]
                for request in requests[:50]:
                    await target.dispatch(request)  # warm-up
                started = time.process_time()
                for request in requests[50:]:
                    await target.dispatch(request)
                out[kind] = (time.process_time() - started) / count
        print(json.dumps(out))
    asyncio.run(main())
    """
)


def example_block(kind: str) -> dict[str, Any]:
    routes = yaml.safe_load((REPO / "examples" / f"{kind}.yaml").read_text())["routes"]
    block: dict[str, Any] = next(iter(routes.values()))["target"]
    return block


def run_in(tree: Path, script: str, *args: str) -> Any:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=tree, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, action="append", required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dispatches", type=int, default=400)
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.tree]
    routes = {"demo": {"target": {"type": "log"}}}
    routes |= {kind: {"target": example_block(kind)} for kind in TYPES}
    blocks = json.dumps({kind: example_block(kind) for kind in REST_TYPES})
    walls: dict[Path, list[float]] = {tree: [] for tree in trees}
    cpus: dict[Path, list[float]] = {tree: [] for tree in trees}
    per_dispatch: dict[Path, list[dict[str, float]]] = {tree: [] for tree in trees}
    with tempfile.TemporaryDirectory() as tmp:
        routes_file = Path(tmp) / "routes.json"
        routes_file.write_text(json.dumps({"routes": routes}))
        for round_no in range(-1, args.runs):
            for tree in trees if round_no % 2 else reversed(trees):
                store = Path(tmp) / f"runs-{tree.name}-{round_no}.db"
                wall, cpu = run_in(tree, COLD_START, str(routes_file), str(store), str(round_no + 1))
                result = run_in(tree, DISPATCH, blocks, str(args.dispatches))
                if round_no >= 0:
                    walls[tree].append(wall)
                    cpus[tree].append(cpu)
                    per_dispatch[tree].append(result)
    first = trees[0]
    print(f"cold start with one route of each of {len(TYPES)} Google target types, median of {args.runs}:")
    for tree in trees:
        wall, cpu = statistics.median(walls[tree]), statistics.median(cpus[tree])
        ratio = wall / statistics.median(walls[first])
        print(f"  {tree!s:40s} wall {wall:.3f} s ({ratio:.2f}x)  server CPU {cpu:.3f} s")
    print(f"adapter CPU per dispatch (ms), median of {args.runs} passes of {args.dispatches}:")
    print(f"  {'type':24s}" + "".join(f"{tree.name[-14:]:>16s}" for tree in trees) + "   ratio")
    for kind in REST_TYPES:
        medians = [statistics.median(run[kind] for run in per_dispatch[tree]) * 1000 for tree in trees]
        print(f"  {kind:24s}" + "".join(f"{m:16.3f}" for m in medians) + f"   {medians[-1] / medians[0]:.2f}x")


if __name__ == "__main__":
    main()
