"""`once(step)`: run a step of a job at most once per run_id, as a decorator or a context manager.

    @once("send-invoices")                 with once("export") as step:
    def send_invoices(): ...                   if not step.done:
                                                   step.set_result(export())

On entry the step is claimed (see rules.py); then
- completed earlier: the body is skipped (decorator) or `step.done` is True, with the stored result;
- held by another attempt's live lease: wait until it ends (up to `wait_seconds`) or raise `StepInProgress`;
- claimed: the body runs (its lease renewed every third of the lease, so a live attempt keeps the
  step however long it takes); a normal exit records `completed` (+ result), fenced on this attempt;
  an exception records `failed` so a retry runs the step again, except exception types listed in
  `unknown` (outcome unknown: the claim is kept until its lease expires, then the next attempt takes over
  with `step.recovering` True and should check whether the side effect happened).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import os
import socket
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

from .errors import Fenced, GuardConfigError, NotStartedByRunonce, StepInProgress, StoreUnavailable
from .rules import COMPLETED, FAILED, IN_PROGRESS, NO_TASK, Decision, StepKey, StepRecord
from .runners import TaskIdentity, task_identity
from .settings import MAX_DURATION_SECONDS, GuardSettings, check_seconds
from .stores import Claim, StepStore, build_store

F = TypeVar("F", bound=Callable[..., Any])
OnBusy = Literal["wait", "raise"]

DEFAULT_RUN_ID_ENV = "IDEMPOTENCY_KEY"  # what runonce's cloud_run_job target sets (its `env_var`)
POLL_SECONDS = 1.0
_FROM_ENV: Any = object()


class ResultNotStored(UserWarning):
    """The step completed, but its result is not JSON-serialisable: a replay will return None."""


class UnguardedStep(UserWarning):
    """`allow_missing=True` and no run_id: the step ran without any guard."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Guard:
    """Settings, store, clock and environment for `once`. The module-level `once` uses one built
    from the environment on first use; build your own to pass a store or settings explicitly."""

    def __init__(
        self,
        store: StepStore | None = None,
        settings: GuardSettings | None = None,
        *,
        run_id_env: str = DEFAULT_RUN_ID_ENV,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], datetime] = _utcnow,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.environ = os.environ if environ is None else environ
        self.settings = settings or GuardSettings.from_env(self.environ)
        self.run_id_env = run_id_env
        self.clock = clock
        self.sleep = sleep
        self._store = store
        self._lock = threading.Lock()

    @property
    def store(self) -> StepStore:
        with self._lock:  # built on first guarded use: an unguarded run needs no credentials
            if self._store is None:
                self._store = build_store(self.settings)
            return self._store

    def retrying(self) -> bool:
        """A retried task (Cloud Run's CLOUD_RUN_TASK_ATTEMPT or Batch's BATCH_TASK_RETRY_ATTEMPT above
        0): its steps are most likely done, so the step is read before it is claimed."""
        try:
            attempt = task_identity(self.environ).attempt
        except GuardConfigError:
            return False  # the key's own reading of the environment refuses it, with the reason
        return attempt is not None and attempt > 0

    def holder(self) -> str:
        """Who claims: the Cloud Run execution, task and attempt when there, else host and pid (with
        the runner's task and attempt when it names them)."""
        try:
            identity = task_identity(self.environ)
        except GuardConfigError:  # only reached with an explicit task (else the key refused first)
            identity = TaskIdentity(None, None, None, None)
        execution = self.environ.get("CLOUD_RUN_EXECUTION")
        task = "?" if identity.index is None else identity.index
        attempt = "?" if identity.attempt is None else identity.attempt
        if execution:
            return f"{execution}/task{task}/attempt{attempt}"
        where = f"{socket.gethostname()}/pid{os.getpid()}"
        return where if identity.runner is None else f"{where}/task{task}/attempt{attempt}"

    def once(
        self,
        step: str,
        *,
        run_id: str | None = None,
        task: str | int | None = _FROM_ENV,
        on_busy: OnBusy = "wait",
        wait_seconds: float | None = None,
        unknown: tuple[type[BaseException], ...] = (),
        allow_missing: bool = False,
        lease_seconds: float | None = None,
    ) -> Once:
        """See the module docstring. `task` defaults to the job runner's task index (runners.py;
        refused when a runner's tasks cannot be told apart), None means no task part;
        `wait_seconds` defaults to the lease, so a retry after a crash waits out the dead lease."""
        if on_busy not in ("wait", "raise"):
            raise GuardConfigError(f"on_busy {on_busy!r}: must be 'wait' or 'raise'")
        if lease_seconds is not None:
            check_seconds("lease_seconds", lease_seconds)
        if wait_seconds is not None and not 0 <= wait_seconds <= MAX_DURATION_SECONDS:  # nan fails both
            raise GuardConfigError(
                f"wait_seconds {wait_seconds!r}: must be 0 or more, at most {MAX_DURATION_SECONDS} (ten years)"
            )
        return Once(self, step, run_id, task, on_busy, wait_seconds, tuple(unknown), allow_missing, lease_seconds)


class Step:
    """What the body of `with once(...) as step:` sees."""

    def __init__(self, key: StepKey | None, claim: Claim | None):
        self.key = key
        self.claim = claim
        self.guarded = claim is not None
        self.done = claim is not None and claim.decision is Decision.REPLAY
        """True: the step completed in an earlier attempt; skip the body."""
        self.result: Any = claim.record.result_value() if self.done and claim is not None else None
        """The stored result when `done`; else what `set_result` set."""
        self.recovering = bool(claim and claim.won and claim.previous and claim.previous.status == IN_PROGRESS)
        """True: an earlier attempt crashed or ended with an unknown outcome inside this step."""
        self._result_json: str | None = None
        self._renewer: _LeaseRenewer | None = None

    @property
    def record(self) -> StepRecord | None:
        return self.claim.record if self.claim else None

    @property
    def attempts(self) -> int:
        return self.claim.record.attempts if self.claim else 0

    def set_result(self, value: Any) -> None:
        """Record the step's result (JSON-serialisable); it is stored with the completion."""
        if self.done:
            raise GuardConfigError(f"step {self.key.step if self.key else '?'} is already done: its result is stored")
        self.result = value
        try:
            self._result_json = None if value is None else json.dumps(value, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            self._result_json = None
            warnings.warn(f"step result not stored ({exc}); a replay returns None", ResultNotStored, stacklevel=2)


class _LeaseRenewer:
    """Extends a held step's lease every third of the lease while the body runs, so the lease bounds
    how long a *dead* attempt blocks the step, not how long a live one may take. A crashed process
    stops renewing; a fenced renewal (another attempt took over) stops for good, and the finish
    will be refused."""

    def __init__(self, guard: Guard, step: Step, lease: timedelta):
        self._guard, self._step, self._lease = guard, step, lease
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"runonce-guard-lease-{step.key}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self._lease.total_seconds() / 3):
            claim = self._step.claim
            assert claim is not None
            try:
                renewed = self._guard.store.renew(claim, self._guard.clock(), self._lease)
            except Fenced:
                return
            except StoreUnavailable:
                continue  # try again next tick; the lease runs on meanwhile
            self._step.claim = renewed  # stop() joins this thread before the finish reads it

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()


class Once:
    """A configured step: a decorator (`@once(...)`) or a context manager (`with once(...) as step`)."""

    def __init__(
        self,
        guard: Guard,
        step: str,
        run_id: str | None,
        task: Any,
        on_busy: OnBusy,
        wait_seconds: float | None,
        unknown: tuple[type[BaseException], ...],
        allow_missing: bool,
        lease_seconds: float | None,
    ):
        self.guard, self.step, self.run_id, self.task = guard, step, run_id, task
        self.on_busy, self.wait_seconds, self.unknown = on_busy, wait_seconds, unknown
        self.allow_missing, self.lease_seconds = allow_missing, lease_seconds
        self._active: Step | None = None
        self.key()  # a bad step name or task fails here, before anything runs

    def key(self) -> StepKey | None:
        """The step's key from the arguments and the environment; None when there is no run_id."""
        env = self.guard.environ
        run_id = self.run_id if self.run_id is not None else env.get(self.guard.run_id_env)
        task = task_identity(env).index if self.task is _FROM_ENV else self.task
        task = NO_TASK if task is None or task == "" else str(task)
        if not run_id:
            StepKey("x", self.step, task)  # validates step and task all the same
            return None
        return StepKey(run_id, self.step, task)

    # -- context manager ------------------------------------------------------------------------

    def __enter__(self) -> Step:
        if self._active is not None:
            raise GuardConfigError(f"once({self.step!r}) is already open: use one `with` at a time")
        self._active = self._begin()
        return self._active

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        step, self._active = self._active, None
        assert step is not None
        self._end(step, exc)

    # -- decorator ------------------------------------------------------------------------------

    def __call__(self, fn: F) -> F:
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise GuardConfigError(
                f"once({self.step!r}) cannot guard a generator: its body runs after the call returns"
            )
        if inspect.iscoroutinefunction(fn):
            return self._async(fn)  # type: ignore[return-value]  # the wrapper keeps fn's signature: F

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._copy() as step:
                if step.done:
                    return step.result
                value = fn(*args, **kwargs)
                step.set_result(value)
                return value

        return wrapper  # type: ignore[return-value]  # functools.wraps(fn): F's signature

    def _async(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`async def` steps: the body is awaited; the store calls (blocking) run in a thread."""

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            run = self._copy()
            step = await asyncio.to_thread(run.__enter__)
            try:
                if step.done:
                    value = step.result
                else:
                    value = await fn(*args, **kwargs)
                    step.set_result(value)
            except BaseException as exc:
                await asyncio.to_thread(run.__exit__, type(exc), exc, exc.__traceback__)
                raise
            await asyncio.to_thread(run.__exit__, None, None, None)
            return value

        return wrapper

    def _copy(self) -> Once:
        """A fresh context manager per call of a decorated function (calls may overlap)."""
        return Once(
            self.guard,
            self.step,
            self.run_id,
            self.task,
            self.on_busy,
            self.wait_seconds,
            self.unknown,
            self.allow_missing,
            self.lease_seconds,
        )

    # -- the protocol ---------------------------------------------------------------------------

    def _begin(self) -> Step:
        key = self.key()
        if key is None:
            name = self.guard.run_id_env
            if not self.allow_missing:
                raise NotStartedByRunonce(
                    f"step {self.step!r}: no run_id in ${name}, so this job was not started by runonce "
                    f"(runonce's cloud_run_job target sets ${name} on every execution it starts). Start it "
                    "through runonce, pass the run_id (run_id=... / --run-id), or run unguarded with "
                    "allow_missing=True "
                    "(--allow-missing)."
                )
            warnings.warn(
                f"step {self.step!r} runs UNGUARDED: ${name} is not set (allow_missing=True)",
                UnguardedStep,
                stacklevel=3,
            )
            return Step(None, None)

        guard, settings = self.guard, self.guard.settings
        lease = timedelta(seconds=self.lease_seconds) if self.lease_seconds else settings.lease
        wait = self.wait_seconds if self.wait_seconds is not None else lease.total_seconds()
        started = time.monotonic()
        while True:
            now = guard.clock()
            claim = guard.store.claim(key, now, lease, settings.retention, guard.holder(), read_first=guard.retrying())
            if claim.decision is not Decision.BUSY:
                step = Step(key, claim)
                if claim.won:
                    step._renewer = _LeaseRenewer(guard, step, lease)
                return step
            waited = time.monotonic() - started
            if self.on_busy == "raise" or waited >= wait:
                raise StepInProgress(claim.record, waited)
            until_lease_ends = (claim.record.lease_expires - now).total_seconds()
            guard.sleep(max(0.05, min(POLL_SECONDS, until_lease_ends + 0.05, wait - waited)))

    def _end(self, step: Step, exc: BaseException | None) -> None:
        if step.claim is None or not step.claim.won:
            return  # unguarded, or replayed: nothing to record
        if step._renewer is not None:
            step._renewer.stop()  # before the finish: it writes over the renewer's last version
        store, now = self.guard.store, self.guard.clock()
        if exc is None:
            store.finish(step.claim, COMPLETED, now, result=step._result_json)  # Fenced propagates
            return
        error = f"{type(exc).__name__}: {exc}"[:1000]
        status = IN_PROGRESS if isinstance(exc, self.unknown) else FAILED
        try:
            store.finish(step.claim, status, now, last_error=error)
        except Fenced as fenced:
            exc.add_note(f"runonce-guard: {fenced}")  # the body's exception is what the caller sees


_default: Guard | None = None
_default_lock = threading.Lock()


def default_guard() -> Guard:
    """The Guard `once` uses: built from the environment on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Guard()
        return _default


def once(step: str, **options: Any) -> Once:
    """`Guard.once` on the default guard (settings from `RUNONCE_*`, run_id from $IDEMPOTENCY_KEY)."""
    return default_guard().once(step, **options)
