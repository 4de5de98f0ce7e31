"""`runonce-guard`'s own failures, as a job's ENTRYPOINT meets them: each exits with a code of its own
(never one a wrapped command commonly uses), says one line, runs nothing, and changes nothing."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runonce_guard import Guard, GuardSettings
from runonce_guard.rules import StepKey
from tests.support.guard_cli import WRAPPER, effect, guard
from tests.support.procs import wait_for

EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_CONFIG = 64, 69, 78

# Each a class of bad duration: not finite, too large, not above 0, not ASCII digits.
BAD_SECONDS = ["inf", "nan", "1e300", "-5", "0", "1_0", "٣٠٠", "300s", "315360001"]


def no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("runonce-guard:")]
    assert len(lines) == 1, done.stderr


@pytest.mark.subprocess
@pytest.mark.parametrize("raw", BAD_SECONDS)
@pytest.mark.parametrize(
    "name", ["RUNONCE_LEASE_SECONDS", "RUNONCE_RETENTION_SECONDS", "RUNONCE_STORE_TIMEOUT_SECONDS"]
)
def test_a_bad_duration_setting_is_a_configuration_error(tmp_path: Path, name: str, raw: str) -> None:
    log = tmp_path / "effects"
    env = {**os.environ, "IDEMPOTENCY_KEY": "a" * 64, name: raw}
    done = guard(env, "run", "--step", "export", "--", *effect(log))
    assert done.returncode == EXIT_CONFIG, done.stderr
    assert name in done.stderr
    no_traceback(done)
    assert not log.exists()


@pytest.mark.subprocess
@pytest.mark.parametrize("raw", BAD_SECONDS)
def test_a_bad_duration_flag_is_a_usage_error(tmp_path: Path, raw: str) -> None:
    log = tmp_path / "effects"
    env = {**os.environ, "IDEMPOTENCY_KEY": "a" * 64}
    for flag in ("--lease-seconds", "--wait-seconds"):
        if flag == "--wait-seconds" and raw == "0":
            continue  # waiting 0 s is valid: fail at once when busy
        done = guard(env, "run", "--step", "export", f"{flag}={raw}", "--", *effect(log))
        assert done.returncode == EXIT_USAGE, done.stderr
        assert flag in done.stderr and "Traceback" not in done.stderr
    assert not log.exists()


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("RUNONCE_FIRESTORE_STEPS_COLLECTION", "steps/sub", "not a Firestore collection ID"),
        ("RUNONCE_FIRESTORE_STEPS_COLLECTION", "__steps__", "not a Firestore collection ID"),
        ("RUNONCE_FIRESTORE_STEPS_COLLECTION", "..", "not a Firestore collection ID"),
        ("RUNONCE_FIRESTORE_PROJECT", "123456789012", "use the project ID"),
        ("RUNONCE_FIRESTORE_PROJECT", "My_Project", "not a project ID"),
        ("RUNONCE_FIRESTORE_PROJECT", "my-project\n", "not a project ID"),
        ("RUNONCE_STORE", "sqlite:///x.db", "RUNONCE_STORE"),
    ],
)
def test_a_malformed_setting_is_a_configuration_error(tmp_path: Path, variable: str, value: str, says: str) -> None:
    log = tmp_path / "effects"
    env = {**os.environ, "IDEMPOTENCY_KEY": "a" * 64, variable: value}
    for args in (["run", "--step", "export", "--", *effect(log)], ["status", "--step", "export"]):
        done = guard(env, *args)
        assert done.returncode == EXIT_CONFIG, done.stderr
        assert variable in done.stderr and says in done.stderr
        no_traceback(done)
    assert not log.exists()


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "args",
    [
        ["run", "--step", "export"],  # no command after --
        ["run", "--step", "export", "--"],
        ["run", "--no-such-flag", "--step", "x", "--", "true"],
        ["run", "--", "true"],  # --step missing
        ["status"],
        ["nosuch"],
    ],
)
def test_usage_errors_exit_64(args: list[str]) -> None:
    done = guard({**os.environ, "IDEMPOTENCY_KEY": "a" * 64}, *args)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--step", "export\n"], "step 'export\\n'"),
        (["--step", "a/b"], "step 'a/b'"),
        (["--step", "x", "--run-id", "a" * 64 + "\n"], "run_id"),
        (["--step", "x", "--task", "1\n"], "task '1\\n'"),
    ],
)
def test_names_must_match_as_a_whole(tmp_path: Path, args: list[str], says: str) -> None:
    log = tmp_path / "effects"
    done = guard({**os.environ, "IDEMPOTENCY_KEY": "a" * 64}, "run", *args, "--", *effect(log))
    assert done.returncode == EXIT_CONFIG, done.stderr
    assert says in done.stderr
    no_traceback(done)
    assert not log.exists()


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A loopback port that accepts connections and never answers: a store that hangs."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    server.close()


def closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"  # closed again when the probe is


@pytest.mark.subprocess
@pytest.mark.parametrize("store", ["refused", "silent"])
def test_an_unreachable_store_fails_within_the_store_timeout(tmp_path: Path, store: str, silent_listener: str) -> None:
    """The Firestore client's own retry would keep trying for 60 s whatever the timeout says."""
    host = closed_port() if store == "refused" else silent_listener
    log = tmp_path / "effects"
    env = {
        **os.environ,
        "IDEMPOTENCY_KEY": "a" * 64,
        "FIRESTORE_EMULATOR_HOST": host,
        "RUNONCE_FIRESTORE_PROJECT": "demo-guard",
        "RUNONCE_STORE_TIMEOUT_SECONDS": "0.5",
    }
    started = time.monotonic()
    done = guard(env, "run", "--step", "export", "--", *effect(log))
    elapsed = time.monotonic() - started
    assert done.returncode == EXIT_UNAVAILABLE, done.stderr
    assert "firestore" in done.stderr
    assert elapsed < 10, f"took {elapsed:.1f}s with a 0.5 s store timeout"  # 51 s with 2 s before the fix
    assert not log.exists()


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def test_sigterm_while_waiting_for_a_busy_step_ends_the_wrapper_as_pid_1(job_env, make_guard, tmp_path: Path) -> None:
    """A container's PID 1 ignores a signal it has no handler for: Cloud Run's SIGTERM would go
    unheard until SIGKILL. The wrapper, waiting for a step another attempt holds, ends at once,
    runs nothing and leaves the other attempt's claim alone."""
    unshare = "/usr/bin/unshare"
    assert Path(unshare).exists(), "unshare (util-linux) is needed to run the wrapper as PID 1"
    other: Guard = make_guard()
    settings = GuardSettings.from_env(job_env)
    key = StepKey(job_env["IDEMPOTENCY_KEY"], "export", "0")
    now = datetime.now(UTC)
    held = other.store.claim(key, now, timedelta(minutes=10), settings.retention, "other/attempt")
    assert held.won

    log = tmp_path / "effects"
    outer = subprocess.Popen(
        [unshare, "--pid", "--fork", "--kill-child", WRAPPER, "run", "--step", "export", "--", *effect(log)],
        env=job_env,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: children(outer.pid), 30, "the wrapper as PID 1", outer)
    [wrapper] = children(outer.pid)
    [ns_pid] = [
        line.split()[1:]
        for line in Path(f"/proc/{wrapper}/status").read_text().splitlines()
        if line.startswith("NSpid:")
    ]
    assert ns_pid[-1] == "1", ns_pid  # PID 1 in its own namespace, as in a container
    time.sleep(1.5)  # the wrapper is claiming, finds the step busy, and waits (poll: 1 s)
    assert outer.poll() is None, outer.communicate()[1]
    signalled = time.monotonic()
    os.kill(wrapper, signal.SIGTERM)
    _, stderr = outer.communicate(timeout=20)
    code = outer.returncode
    stopped_in = time.monotonic() - signalled
    assert code == 128 + signal.SIGTERM, stderr
    assert "SIGTERM" in stderr and "before the command ran" in stderr
    assert stopped_in < 5, f"took {stopped_in:.1f}s"  # the lease had 10 minutes left
    assert not log.exists()
    record = other.store.get(key, datetime.now(UTC))
    assert record is not None and record.attempt_id == held.record.attempt_id and record.status == "in_progress"


def test_sigterm_while_claiming_gives_the_claim_back_and_runs_nothing(job_env, monkeypatch, tmp_path: Path) -> None:
    """A stop that arrives while the wrapper claims (no wait to interrupt) is acted on before the
    command starts: the claim just taken is released, so the next attempt runs the step."""
    from runonce_guard import cli
    from runonce_guard.stores.base import StepStore

    for name, value in job_env.items():
        monkeypatch.setenv(name, value)
    claim = StepStore.claim

    def claim_then_stopped(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        won = claim(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # Cloud Run stopping the task, mid-claim
        return won

    monkeypatch.setattr(StepStore, "claim", claim_then_stopped)
    log = tmp_path / "effects"
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["run", "--step", "publish", "--", *effect(log)]) == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before  # the wrapper's handlers are undone
    assert not log.exists()
    monkeypatch.setattr(StepStore, "claim", claim)
    status = json.loads(guard(job_env, "status", "--step", "publish").stdout)
    assert status["status"] == "failed" and "SIGTERM" in status["last_error"]
