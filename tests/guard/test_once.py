"""The library against the real Firestore emulator: what a job's author sees from `once`."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, timedelta
from pathlib import Path

import pytest

from runonce_guard import Fenced, GuardConfigError, NotStartedByRunonce, StepInProgress, StepKey, UnguardedStep
from runonce_guard.stores.firestore import FirestoreStepStore
from tests.support.clock import Clock
from tests.support.procs import wait_for
from tests.support.stores import FIRESTORE_PROJECT


def test_64_concurrent_callers_run_the_body_once(make_guard) -> None:
    guards = [make_guard() for _ in range(8)]  # 8 clients, as 8 processes would have
    runs: list[int] = []
    barrier = threading.Barrier(64)
    results: list[object] = [None] * 64
    errors: list[BaseException] = []

    def caller(index: int) -> None:
        @guards[index % 8].once("charge-card")
        def charge() -> dict:
            runs.append(index)
            time.sleep(0.3)  # long enough that every other caller finds it in progress
            return {"charged_by": index}

        try:
            barrier.wait()
            results[index] = charge()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert len(runs) == 1
    assert results == [{"charged_by": runs[0]}] * 64  # the winner's result, replayed to all 63 others


def test_completed_step_is_skipped_and_its_result_replayed(make_guard, run_id: str) -> None:
    bodies: list[str] = []

    def export() -> dict:
        bodies.append("ran")
        return {"rows": 3, "file": "gs://b/export.csv"}

    first = make_guard().once("export")(export)
    assert first() == {"rows": 3, "file": "gs://b/export.csv"}

    retry = make_guard()  # a task retry: a new process, same environment
    assert retry.once("export")(export)() == {"rows": 3, "file": "gs://b/export.csv"}
    with retry.once("export") as step:
        assert step.done and step.result == {"rows": 3, "file": "gs://b/export.csv"}
    assert bodies == ["ran"]
    record = retry.store.get(StepKey(run_id, "export", "0"), retry.clock())
    assert record is not None and record.status == "completed" and record.attempts == 1
    assert record.holder == "export-abc12/task0/attempt0"


def test_context_manager_records_the_result_it_is_given(make_guard) -> None:
    with make_guard().once("send-emails") as step:
        assert not step.done and step.attempts == 1
        step.set_result(["a@example.com"])
    with make_guard().once("send-emails") as again:
        assert again.done and again.result == ["a@example.com"]


def test_retry_after_an_exception_runs_the_step_again(make_guard, run_id: str) -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionResetError("upstream reset")
        return "sent"

    with pytest.raises(ConnectionResetError):
        make_guard().once("notify")(flaky)()
    guard = make_guard()
    failed = guard.store.get(StepKey(run_id, "notify", "0"), guard.clock())
    assert failed is not None and failed.status == "failed"
    assert failed.last_error == "ConnectionResetError: upstream reset"

    assert guard.once("notify", on_busy="raise")(flaky)() == "sent"  # released: claimable at once
    assert len(calls) == 2
    done = guard.store.get(StepKey(run_id, "notify", "0"), guard.clock())
    assert done is not None and done.status == "completed" and done.attempts == 2 and done.last_error is None


def test_outcome_unknown_exception_keeps_the_claim_until_the_lease_ends(make_guard, run_id: str) -> None:
    clock = Clock()
    guard = make_guard(clock=clock)
    with pytest.raises(TimeoutError), guard.once("publish", unknown=(TimeoutError,)):
        raise TimeoutError("publish call timed out")
    record = guard.store.get(StepKey(run_id, "publish", "0"), clock())
    assert record is not None and record.status == "in_progress"
    assert record.last_error == "TimeoutError: publish call timed out"

    with pytest.raises(StepInProgress, match="lease until"), guard.once("publish", on_busy="raise"):
        pytest.fail("ran while the unknown attempt's lease was live")

    clock.advance(guard.settings.lease_seconds + 1)
    with guard.once("publish", on_busy="raise") as step:
        assert not step.done and step.recovering and step.attempts == 2  # check before publishing again


def test_stale_attempt_cannot_record_completion(make_guard, run_id: str) -> None:
    clock = Clock()
    stale, fresh = make_guard(clock=clock), make_guard(clock=clock)
    with pytest.raises(Fenced, match="held by attempt"), stale.once("charge") as old:
        old.set_result("stale")
        clock.advance(stale.settings.lease_seconds + 1)  # old attempt hangs past its lease
        with fresh.once("charge") as new:
            assert new.recovering and new.attempts == 2
            new.set_result("fresh")
    record = fresh.store.get(StepKey(run_id, "charge", "0"), clock())
    assert record is not None and record.status == "completed" and record.result_value() == "fresh"
    assert record.attempt_id != old.record.attempt_id  # type: ignore[union-attr]


def test_stale_attempt_failing_does_not_release_the_new_attempts_claim(make_guard, run_id: str) -> None:
    clock = Clock()
    stale, fresh = make_guard(clock=clock), make_guard(clock=clock)
    with pytest.raises(RuntimeError) as raised, stale.once("charge"):
        clock.advance(stale.settings.lease_seconds + 1)
        taken = fresh.once("charge").__enter__()
        raise RuntimeError("old attempt fails late")
    assert "held by attempt" in raised.value.__notes__[0]
    record = fresh.store.get(StepKey(run_id, "charge", "0"), clock())
    assert record is not None and record.status == "in_progress" and record.attempt_id == taken.record.attempt_id


def test_no_run_id_is_a_clear_error_and_nothing_runs(make_guard, job_env: dict[str, str]) -> None:
    env = {k: v for k, v in job_env.items() if k != "IDEMPOTENCY_KEY"}
    ran: list[int] = []
    with pytest.raises(
        NotStartedByRunonce, match=r"no run_id in \$IDEMPOTENCY_KEY, so this job was not started by runonce"
    ):
        make_guard(environ=env).once("export")(lambda: ran.append(1))()
    assert ran == []

    with pytest.warns(UnguardedStep, match="runs UNGUARDED"):
        make_guard(environ=env).once("export", allow_missing=True)(lambda: ran.append(1))()
    with pytest.warns(UnguardedStep):
        make_guard(environ=env).once("export", allow_missing=True)(lambda: ran.append(1))()
    assert ran == [1, 1]  # unguarded: nothing recorded, so nothing is skipped


def test_run_id_env_is_configurable_and_task_index_is_part_of_the_key(make_guard, job_env: dict[str, str]) -> None:
    env = {k: v for k, v in job_env.items() if k != "IDEMPOTENCY_KEY"} | {"MY_RUN": "r-1"}
    ran: list[str] = []
    for task in ("0", "1", "1"):
        guard = make_guard(environ=env | {"CLOUD_RUN_TASK_INDEX": task}, run_id_env="MY_RUN")
        guard.once("shard")(lambda t=task: ran.append(t))()
    assert ran == ["0", "1"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"step": "a/b"}, "step 'a/b': 1 to 100 letters"),
        ({"step": "export\n"}, r"step 'export\\n'"),  # the whole value must match: no trailing newline
        ({"step": "x", "run_id": "a" * 64 + "\n"}, "run_id 'a"),
        ({"step": "x", "lease_seconds": float("inf")}, "lease_seconds inf"),
        ({"step": "x", "lease_seconds": float("nan")}, "lease_seconds nan"),
        ({"step": "x", "lease_seconds": 1e300}, "lease_seconds 1e"),
        ({"step": "x", "wait_seconds": float("nan")}, "wait_seconds nan"),
        ({"step": "x", "task": "two"}, "task 'two'"),
        ({"step": "x", "on_busy": "skip"}, "on_busy 'skip'"),
        ({"step": "x", "run_id": "a/b"}, "run_id 'a/b'"),
        ({"step": "x", "lease_seconds": 0}, "lease_seconds 0"),
        ({"step": "x", "wait_seconds": -1}, "wait_seconds -1"),
    ],
)
def test_bad_arguments_fail_before_anything_runs(make_guard, kwargs: dict, message: str) -> None:
    with pytest.raises(GuardConfigError, match=message):
        make_guard().once(**kwargs)


KILLABLE_JOB = """
import sys, time, pathlib
from runonce_guard import once
log = pathlib.Path(sys.argv[1])

@once("charge")
def charge():
    with log.open("a") as out:
        out.write("start\\n")
    if sys.argv[2] == "hang":
        time.sleep(3600)
    with log.open("a") as out:
        out.write("done\\n")
    return {"charged": True}

print(charge())
"""


def test_kill_9_inside_a_step_then_the_next_attempt_runs_it_after_the_lease(
    job_env, tmp_path: Path, run_id: str
) -> None:
    log = tmp_path / "side-effects.log"
    env = job_env | {"RUNONCE_LEASE_SECONDS": "3"}
    first = subprocess.Popen([sys.executable, "-c", KILLABLE_JOB, str(log), "hang"], env=env)
    wait_for(lambda: log.exists() and "start" in log.read_text(), 30, "first attempt", first)
    first.send_signal(signal.SIGKILL)
    first.wait()

    started = time.monotonic()
    retry = subprocess.run(
        [sys.executable, "-c", KILLABLE_JOB, str(log), "finish"], env=env, capture_output=True, text=True, timeout=60
    )
    assert retry.returncode == 0, retry.stderr
    assert retry.stdout.strip() == "{'charged': True}"
    assert time.monotonic() - started >= 1.0  # it waited for the dead attempt's lease
    assert log.read_text() == "start\nstart\ndone\n"

    again = subprocess.run(
        [sys.executable, "-c", KILLABLE_JOB, str(log), "finish"], env=env, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0 and again.stdout.strip() == "{'charged': True}"
    assert log.read_text() == "start\nstart\ndone\n"  # replayed, not re-run

    store = FirestoreStepStore(project=FIRESTORE_PROJECT, collection=env["RUNONCE_FIRESTORE_STEPS_COLLECTION"])
    from datetime import datetime

    record = store.get(StepKey(run_id, "charge", "0"), datetime.now(UTC))
    store.close()
    assert record is not None and record.attempts == 2 and record.status == "completed"
    assert record.lease_expires - record.created_at < timedelta(seconds=10)  # the takeover's own lease


def test_the_library_imports_neither_app_nor_the_web_stack(job_env) -> None:
    probe = (
        "import sys, runonce_guard, runonce_guard.cli; import runonce_guard.stores.firestore; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('app', 'fastapi', 'uvicorn', 'starlette')); "
        "print(bad)"
    )
    done = subprocess.run([sys.executable, "-c", probe], env=job_env, capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


async def test_async_steps_are_awaited_once_and_replayed(make_guard) -> None:
    awaited: list[int] = []

    async def publish() -> dict:
        awaited.append(1)
        return {"message_id": "m-1"}

    assert await make_guard().once("publish")(publish)() == {"message_id": "m-1"}
    assert await make_guard().once("publish")(publish)() == {"message_id": "m-1"}
    assert awaited == [1]

    async def failing() -> None:
        raise ConnectionError("broker down")

    with pytest.raises(ConnectionError):
        await make_guard().once("notify")(failing)()
    with make_guard().once("notify", on_busy="raise") as step:  # released: claimable at once
        assert not step.done and step.attempts == 2


def test_generators_are_refused_at_decoration(make_guard) -> None:
    def rows():
        yield 1

    with pytest.raises(GuardConfigError, match="cannot guard a generator"):
        make_guard().once("rows")(rows)


def test_a_live_attempt_keeps_its_step_past_the_lease_by_renewing_it(make_guard, run_id: str) -> None:
    lease = 2.0  # renewed every ~0.7 s while the body runs: 1.3 s of slack for a slow machine
    holder, other = make_guard(), make_guard()
    with holder.once("long-export", lease_seconds=lease) as step:
        first_lease = step.record.lease_expires  # type: ignore[union-attr]
        time.sleep(lease * 2.25)  # past two leases: without renewal another attempt could take over now
        with pytest.raises(StepInProgress), other.once("long-export", lease_seconds=lease, on_busy="raise"):
            pytest.fail("took over a step whose attempt is alive")
        assert step.record.lease_expires > first_lease  # type: ignore[union-attr]
    done = other.store.get(StepKey(run_id, "long-export", "0"), other.clock())
    assert done is not None and done.status == "completed" and done.attempts == 1
