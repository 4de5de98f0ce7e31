"""`runonce-guard run/status` as a Cloud Run job's ENTRYPOINT would run them: real processes, real emulator."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.guard_cli import WRAPPER, effect, guard
from tests.support.procs import wait_for


def test_runs_the_command_once_then_skips_it(job_env, tmp_path: Path, run_id: str) -> None:
    log = tmp_path / "effects"
    first = guard(job_env, "run", "--step", "export", "--", *effect(log))
    assert first.returncode == 0, first.stderr
    retry = guard(job_env | {"CLOUD_RUN_TASK_ATTEMPT": "1"}, "run", "--step", "export", "--", *effect(log))
    assert retry.returncode == 0
    assert "already done" in retry.stderr and "not running the command" in retry.stderr
    assert log.read_text() == "0\n"

    status = guard(job_env, "status", "--step", "export")
    assert status.returncode == 0
    record = json.loads(status.stdout)
    assert record["key"] == f"{run_id}~export~0"
    assert record["status"] == "completed" and record["attempts"] == 1
    assert record["holder"] == "export-abc12/task0/attempt0"


def test_non_zero_exit_is_passed_on_and_releases_the_step(job_env, tmp_path: Path) -> None:
    log = tmp_path / "effects"
    failed = guard(job_env, "run", "--step", "load", "--", *effect(log, 3))
    assert failed.returncode == 3
    status = json.loads(guard(job_env, "status", "--step", "load").stdout)
    assert status["status"] == "failed" and status["last_error"] == "_Exited: command exited with 3"

    retry = guard(
        job_env | {"CLOUD_RUN_TASK_ATTEMPT": "1"}, "run", "--step", "load", "--on-busy", "raise", "--", *effect(log)
    )
    assert retry.returncode == 0, retry.stderr
    assert log.read_text() == "0\n1\n"


def test_keep_on_exit_code_keeps_the_claim(job_env, tmp_path: Path) -> None:
    log = tmp_path / "effects"
    unknown = guard(job_env, "run", "--step", "publish", "--keep-on-exit", "9", "--", *effect(log, 9))
    assert unknown.returncode == 9
    busy = guard(job_env, "run", "--step", "publish", "--on-busy", "raise", "--", *effect(log))
    assert busy.returncode == 75
    assert "is in progress" in busy.stderr
    assert log.read_text() == "0\n"


def test_missing_run_id_exits_78_saying_runonce_did_not_start_the_job(job_env, tmp_path: Path) -> None:
    env = {k: v for k, v in job_env.items() if k != "IDEMPOTENCY_KEY"}
    log = tmp_path / "effects"
    done = guard(env, "run", "--step", "export", "--", *effect(log))
    assert done.returncode == 78
    assert "not started by runonce" in done.stderr and "--allow-missing" in done.stderr
    assert not log.exists()

    unguarded = guard(env, "run", "--step", "export", "--allow-missing", "--", *effect(log))
    assert unguarded.returncode == 0 and "UNGUARDED" in unguarded.stderr
    assert log.read_text() == "0\n"


def test_command_not_found_exits_127_and_releases(job_env) -> None:
    done = guard(job_env, "run", "--step", "x", "--", "/nonexistent/job")
    assert done.returncode == 127 and "cannot run '/nonexistent/job'" in done.stderr
    assert json.loads(guard(job_env, "status", "--step", "x").stdout)["status"] == "failed"


TRAPPING_JOB = """
import signal, sys, time, pathlib
ready = pathlib.Path(sys.argv[1])
def on_signal(signum, frame):
    ready.with_suffix(".got").write_text(signal.Signals(signum).name)
    sys.exit(42)
signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)
ready.write_text("ready")
time.sleep(60)
"""


def test_sigterm_and_sigint_are_forwarded_to_the_command(job_env, tmp_path: Path) -> None:
    for step, sig in (("term", signal.SIGTERM), ("int", signal.SIGINT)):
        ready = tmp_path / f"{step}.ready"
        proc = subprocess.Popen(
            [WRAPPER, "run", "--step", step, "--", sys.executable, "-c", TRAPPING_JOB, str(ready)], env=job_env
        )
        wait_for(ready.exists, 30, "trapping job", proc)
        proc.send_signal(sig)  # to the wrapper only, as Cloud Run signals the container's PID 1
        assert proc.wait(30) == 42
        assert ready.with_suffix(".got").read_text() == sig.name
        assert json.loads(guard(job_env, "status", "--step", step).stdout)["status"] == "failed"


def test_status_of_a_step_never_run(job_env) -> None:
    done = guard(job_env, "status", "--step", "never", "--no-task")
    assert done.returncode == 1
    assert json.loads(done.stdout)["status"] == "absent" and json.loads(done.stdout)["key"].endswith("~never~-")


def test_bad_store_setting_names_the_variable(job_env) -> None:
    done = guard(job_env | {"RUNONCE_STORE": "sqlite:///x.db"}, "run", "--step", "x", "--", "true")
    assert done.returncode == 78 and "RUNONCE_STORE: sqlite://…" in done.stderr and "SQLite file cannot" in done.stderr


def test_missing_credentials_is_a_setup_error_not_a_traceback(job_env) -> None:
    env = {k: v for k, v in job_env.items() if k != "FIRESTORE_EMULATOR_HOST"}
    env["GOOGLE_APPLICATION_CREDENTIALS"] = "/nonexistent/adc.json"
    for args in (["status", "--step", "x"], ["run", "--step", "x", "--", "true"]):
        done = guard(env, *args)
        assert done.returncode == 78, done.stderr
        assert "Firestore client:" in done.stderr and "Traceback" not in done.stderr
