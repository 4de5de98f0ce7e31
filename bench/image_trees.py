"""Container cold start of two source trees' images, alternated in one run: each tree's image is built
(podman, on the Debian base bootstrapped as in tests/deploy), then `podman run` -> first 200 on
/healthz is timed for each image in turn, with a `log` route alone and with one route of each of the
nine Google target types (this tree's examples, so start-up checks every route against its
discovery document).

    .venv/bin/python bench/image_trees.py --tree /tmp/main --tree . [--runs 25]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "deploy"), str(REPO)]

from deploy_image import RUN_FLAGS, build, remove_container, wait_healthy  # noqa: E402
from deploy_tools import tool  # noqa: E402

from bench.bench_targets import TYPES, example_block  # noqa: E402
from tests.support.procs import free_port  # noqa: E402


def route_sets() -> dict[str, str]:
    """RUNONCE_ROUTES for each variant: the demo `log` route, and it with a route of each Google type."""
    routes: dict[str, Any] = {"demo": {"target": {"type": "log"}}}
    routes |= {kind: {"target": example_block(kind)} for kind in TYPES}
    return {"log": json.dumps({"routes": {"demo": routes["demo"]}}), "google": json.dumps({"routes": routes})}


def cold_start(image: str, routes: str) -> float:
    port = free_port()
    command = [tool("podman"), "run", "-d", *RUN_FLAGS, "-p", f"127.0.0.1:{port}:8080"]
    for setting in ("RUNONCE_AUTH=none", f"RUNONCE_ROUTES={routes}", "RUNONCE_STORE=sqlite:////var/lib/runonce/r.db"):
        command += ["-e", setting]
    started = time.monotonic()
    container = subprocess.run([*command, image], capture_output=True, text=True, check=True).stdout.strip()
    try:
        wait_healthy(port)
        return time.monotonic() - started
    finally:
        remove_container(container)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, action="append", required=True, help="A source tree (give two).")
    parser.add_argument("--runs", type=int, default=25)
    args = parser.parse_args()
    images = {}
    for number, tree in enumerate(args.tree):
        tag = f"localhost/runonce:bench-tree-{number}"
        build(tag, tree.resolve())
        size = subprocess.run(
            [tool("podman"), "image", "inspect", "--format", "{{.Size}}", tag], capture_output=True, text=True
        ).stdout
        print(f"{tree}: image {int(size) / 1e6:.1f} MB")
        images[str(tree)] = tag
    variants = route_sets()
    timings: dict[tuple[str, str], list[float]] = {(tree, v): [] for tree in images for v in variants}
    for run in range(args.runs):
        order = list(images) if run % 2 == 0 else list(reversed(images))
        for variant, routes in variants.items():
            for tree in order:
                timings[(tree, variant)].append(cold_start(images[tree], routes))
    first = next(iter(images))
    for variant in variants:
        baseline = statistics.median(timings[(first, variant)])
        for tree in images:
            median = statistics.median(timings[(tree, variant)])
            print(f"{variant} routes, {tree}: median {median:.2f} s ({median / baseline:.2f}x), {args.runs} runs")


if __name__ == "__main__":
    main()
