"""Container cold start and image size: build the image (podman, Debian base bootstrapped locally,
as in tests/deploy), then time `podman run` -> first 200 on /healthz, N times, and podman's own floor
(`podman run --rm` of `true` in the image: what any container costs here before Python starts).

    .venv/bin/python bench/image_cold_start.py [--runs 5] [--store sqlite|firestore]

`--store firestore` starts the Firestore emulator and runs the container on the host network, so
start-up includes importing and configuring the Firestore client, as on Cloud Run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "deploy"), str(REPO)]

from deploy_image import RUN_FLAGS, build_image, remove_container, wait_healthy  # noqa: E402
from deploy_tools import tool  # noqa: E402

from tests.support.procs import free_port  # noqa: E402

ROUTES = json.dumps({"routes": {"demo": {"target": {"type": "log"}}}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--store", choices=["sqlite", "firestore"], default="sqlite")
    args = parser.parse_args()

    image = build_image()
    size = int(
        subprocess.run(
            [tool("podman"), "image", "inspect", "--format", "{{.Size}}", image],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    emulator = None
    env = {"RUNONCE_AUTH": "none", "RUNONCE_ROUTES": ROUTES, "RUNONCE_LOG_FORMAT": "json"}
    if args.store == "firestore":
        from tests.support.procs import start_firestore_emulator

        emulator = start_firestore_emulator(Path(tempfile.mkdtemp()))
        env |= {
            "RUNONCE_STORE": "firestore",
            "RUNONCE_FIRESTORE_PROJECT": "bench-project",
            "FIRESTORE_EMULATOR_HOST": emulator.host,
        }
    else:
        env |= {"RUNONCE_STORE": "sqlite:////var/lib/runonce/runonce.db"}
    timings, floor = [], []
    try:
        for _ in range(args.runs):
            started = time.monotonic()
            subprocess.run(
                [tool("podman"), "run", "--rm", *RUN_FLAGS, "--entrypoint", "true", image],
                capture_output=True,
                check=True,
            )
            floor.append(time.monotonic() - started)
            port = free_port()
            command = [tool("podman"), "run", "-d", *RUN_FLAGS]
            if args.store == "firestore":
                command += ["--network=host", "-e", f"PORT={port}"]
            else:
                command += ["-p", f"127.0.0.1:{port}:8080"]
            for name, value in env.items():
                command += ["-e", f"{name}={value}"]
            started = time.monotonic()
            container = subprocess.run([*command, image], capture_output=True, text=True, check=True).stdout.strip()
            try:
                wait_healthy(port)
                timings.append(time.monotonic() - started)
            finally:
                remove_container(container)
    finally:
        if emulator is not None:
            emulator.stop()
    print(f"image {image}: {size / 1e6:.0f} MB ({size} bytes)")
    print(
        f"cold start ({args.store} store), podman run -> first 200 on /healthz, {args.runs} runs: "
        f"median {statistics.median(timings):.2f} s, min {min(timings):.2f} s, max {max(timings):.2f} s"
    )
    print(f"podman's floor, podman run --rm of `true` in the image: median {statistics.median(floor):.2f} s")


if __name__ == "__main__":
    main()
