"""Build the runonce image with podman on a Debian base bootstrapped here (no registry is reachable),
and run containers of it. Shared by the image tests and bench/image_cold_start.py."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from deploy_tools import REPO, run, tool

BASE_IMAGE = "localhost/runonce-test-base:bookworm"
IMAGE = "localhost/runonce:deploy-test"
# podman in a sandbox: runc, no new keyring, and limits the sandbox lets a container set.
RUN_FLAGS = ["--runtime=runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1000:1000"]


def image_exists(name: str) -> bool:
    return subprocess.run([tool("podman"), "image", "exists", name]).returncode == 0


def ensure_base_image() -> str:
    """Debian bookworm with python3 and python3-venv, as the Dockerfile's PYTHON_IMAGE stand-in."""
    if image_exists(BASE_IMAGE):
        return BASE_IMAGE
    with tempfile.TemporaryDirectory(prefix="runonce-rootfs-") as rootfs:
        run(
            [
                tool("debootstrap"),
                "--variant=minbase",
                "--include=python3,python3-venv,ca-certificates",
                "bookworm",
                rootfs,
                "http://deb.debian.org/debian",
            ],
            timeout=900,
        )
        run(
            [
                "bash",
                "-o",
                "pipefail",
                "-c",
                'tar -C "$1" -c . | "$2" import - "$3" >/dev/null',
                "import",
                rootfs,
                tool("podman"),
                BASE_IMAGE,
            ],
            timeout=600,
        )
    return BASE_IMAGE


def build_image(tag: str = IMAGE, context: Path = REPO) -> str:
    build(tag, context)
    return tag


def build(tag: str, context: Path = REPO) -> str:
    """Build `context` (the repository by default) on the bootstrapped base; podman's log, which
    says which steps came from the cache."""
    base = ensure_base_image()
    result = run(
        [
            tool("podman"),
            "build",
            "--isolation=chroot",
            "--network=host",
            "-v",
            "/etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro",
            "--build-arg",
            f"PYTHON_IMAGE={base}",
            "-t",
            tag,
            str(context),
        ],
        timeout=900,
    )
    return result.stdout + result.stderr


def start_container(image: str, port: int, env: dict[str, str], container_port: int = 8080) -> str:
    args = [tool("podman"), "run", "-d", *RUN_FLAGS, "-p", f"127.0.0.1:{port}:{container_port}"]
    for name, value in env.items():
        args += ["-e", f"{name}={value}"]
    return run([*args, image]).stdout.strip()


def wait_healthy(port: int, timeout: float = 60) -> float:
    """Seconds until GET /healthz first answers 200."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.01)
    raise AssertionError(f"/healthz on port {port} did not answer 200 within {timeout}s")


def remove_container(container: str) -> None:
    subprocess.run([tool("podman"), "rm", "-f", "-t", "2", container], capture_output=True)
