"""Real servers for the optional stores: redis-server and the Cloud Spanner emulator.

Both start on free ports, fail (never skip) with an install hint when missing, and stop cleanly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.procs import REPO, FirestoreEmulator, free_port, listening, require_services, wait_for

SPANNER_PROJECT = "runonce-test"
SPANNER_INSTANCE = "runonce"
SPANNER_EMULATOR_BINARY = "/usr/lib/google-cloud-sdk/bin/cloud_spanner_emulator/emulator_main"


class Server(FirestoreEmulator):
    """A server process in its own process group (same handling as the Firestore emulator's)."""

    def kill(self) -> None:
        """SIGKILL: a crash, no clean-up; returns once the port refuses connections."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.stop()


def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def start_redis(log_dir: Path, port: int | None = None, *, persist: bool = False) -> Server:
    """A real redis-server, no persistence (a test store), or with `persist` an append-only file
    synced on every write in `log_dir` (a restart keeps the data). `port`: restart on the same one."""
    require_services("redis-server")
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError(
            "redis-server is required for the Redis store tests: apt-get install -y redis-server "
            "(Debian's package; .ci/run installs it when missing)"
        )
    port = port or free_port()
    log = log_dir / f"redis-{port}.log"
    # --dir: a replica's full sync writes an RDB file even with --save "": keep it out of the repo.
    proc = _spawn(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(log_dir)]
        + (["--appendonly", "yes", "--appendfsync", "always"] if persist else ["--appendonly", "no"]),
        log,
    )
    server = Server(proc, port, log)
    try:
        wait_for(lambda: listening(port), 20, "redis-server", proc, log)
    except Exception:
        server.stop()
        raise
    return server


def start_spanner_emulator(log_dir: Path) -> Server:
    """The real Cloud Spanner emulator (gRPC on `port`), with instance `SPANNER_INSTANCE` created."""
    require_services("the Spanner emulator")
    binary = SPANNER_EMULATOR_BINARY
    if not os.access(binary, os.X_OK):
        found = shutil.which("gcloud")
        raise RuntimeError(
            "The Cloud Spanner emulator is required for the Spanner store tests: install the Google Cloud CLI "
            "component (apt-get install google-cloud-cli-spanner-emulator, or gcloud components install "
            f"cloud-spanner-emulator){'' if found else '; gcloud itself is missing too'}"
        )
    port = free_port()
    log = log_dir / f"spanner-emulator-{port}.log"
    proc = _spawn([binary, "--host_port", f"127.0.0.1:{port}", "--override_max_databases_per_instance", "1000"], log)
    server = Server(proc, port, log)
    try:
        wait_for(lambda: listening(port), 30, "Spanner emulator", proc, log)
        _create_instance(server.host)
    except Exception:
        server.stop()
        raise
    return server


def _create_instance(host: str) -> None:
    from google.cloud import spanner

    os.environ["SPANNER_EMULATOR_HOST"] = host
    client = spanner.Client(project=SPANNER_PROJECT)
    config = f"projects/{SPANNER_PROJECT}/instanceConfigs/emulator-config"
    client.instance(SPANNER_INSTANCE, configuration_name=config, node_count=1).create().result(60)


def create_spanner_database(name: str) -> str:
    """A new empty database on the emulator, then `runonce store init` on it (a real CLI run).
    Returns its RUNONCE_STORE URL."""
    from google.cloud import spanner

    client = spanner.Client(project=SPANNER_PROJECT)
    client.instance(SPANNER_INSTANCE).database(name).create().result(60)
    url = f"spanner://projects/{SPANNER_PROJECT}/instances/{SPANNER_INSTANCE}/databases/{name}"
    run_store_init(url)
    return url


def run_store_init(url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RUNONCE_STORE": url}
    done = subprocess.run(
        [sys.executable, "-m", "runonce.cli", "store", "init"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"runonce store init failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done
