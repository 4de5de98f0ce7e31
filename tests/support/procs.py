"""Start real processes for end-to-end tests: the runonce server (uvicorn) and the Firestore emulator."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]

IN_PROCESS_ONLY = "RUNONCE_TESTS_IN_PROCESS_ONLY"
"""Set by `make test-fast`: a test that starts a process outside the venv then fails, naming the marker."""


def require_services(what: str) -> None:
    """Called by each starter of an emulator, redis-server or `runonce serve`: under `make test-fast`
    a test that needs one and is not marked `services` (or `e2e`) fails here, so the fast subset stays
    in-process as tests are added. tests/conftest.py marks the users of the store fixtures itself."""
    if os.environ.get(IN_PROCESS_ONLY):
        raise RuntimeError(
            f"this test starts {what}, and `make test-fast` runs in-process tests only: "
            "mark it @pytest.mark.services (or e2e if it starts `runonce serve`)"
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(check, timeout: float, what: str, proc: subprocess.Popen | None = None, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            output = log.read_text() if log and log.exists() else ""
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready:\n{output}")
        try:
            if check():
                return
        except (OSError, httpx.HTTPError):
            pass
        time.sleep(0.05)
    output = log.read_text() if log and log.exists() else ""
    raise RuntimeError(f"{what} not ready after {timeout}s:\n{output}")


@dataclass
class ServerProcess:
    """`runonce serve` in a subprocess; `url` is its base URL, `log` its combined output."""

    proc: subprocess.Popen
    port: int
    log: Path
    env: dict[str, str] = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: a crash, no clean-up."""
        self.stop(signal.SIGKILL)


def start_server(
    env: dict[str, str],
    log_dir: Path,
    *,
    workers: int = 1,
    extra_args: list[str] | None = None,
    port: int | None = None,
) -> ServerProcess:
    """Start `runonce serve` with exactly `env` on top of PATH/HOME-style basics; wait for /healthz.
    `port`: one chosen before (e.g. to put the URL in the env as the audience), else a free one."""
    require_services("a `runonce serve` process")
    port = port or free_port()
    log = log_dir / f"runonce-{port}.log"
    base = {k: v for k, v in os.environ.items() if not k.startswith("RUNONCE_")}
    full_env = {**base, **env}
    args = [
        sys.executable,
        "-m",
        "runonce.cli",
        "serve",
        "--port",
        str(port),
        "--workers",
        str(workers),
        *(extra_args or []),
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(args, cwd=REPO, env=full_env, stdout=out, stderr=subprocess.STDOUT)
    server = ServerProcess(proc, port, log, full_env)
    wait_for(lambda: httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200, 30, "runonce server", proc, log)
    return server


@dataclass
class EmulatorProcess:
    """An emulator on 127.0.0.1:`port`, started in its own process group (`start_new_session`)."""

    proc: subprocess.Popen
    port: int
    log: Path

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stop it and its children (gcloud's Java), and return only once the port refuses connections."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if self.proc.poll() is not None and not listening(self.port):
                    return
                time.sleep(0.05)


class FirestoreEmulator(EmulatorProcess):
    """The Firestore emulator: gcloud and its Java child."""


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def start_firestore_emulator(log_dir: Path) -> FirestoreEmulator:
    """The real Firestore emulator (gcloud + Java) on a free port. Fails, never skips, if missing."""
    require_services("the Firestore emulator")
    gcloud = shutil.which("gcloud")
    if gcloud is None or shutil.which("java") is None:
        raise RuntimeError(
            "The Firestore emulator is required: install the Google Cloud CLI with the "
            "cloud-firestore-emulator component and a Java 11+ runtime "
            "(apt-get install google-cloud-cli google-cloud-cli-firestore-emulator openjdk-17-jre-headless)."
        )
    port = free_port()
    log = log_dir / f"firestore-emulator-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [gcloud, "emulators", "firestore", "start", f"--host-port=127.0.0.1:{port}", "--quiet"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    emulator = FirestoreEmulator(proc, port, log)
    try:
        wait_for(lambda: "Dev App Server is now running" in log.read_text(), 60, "Firestore emulator", proc, log)
    except Exception:
        emulator.stop()
        raise
    return emulator
