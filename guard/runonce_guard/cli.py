"""`runonce-guard`: guard any command as one step (e.g. a Cloud Run job container's ENTRYPOINT).

    runonce-guard run --step NAME [options] -- CMD [ARGS...]
    runonce-guard status --step NAME [--run-id ID]
    runonce-guard store init

`run` claims the step, runs CMD only if the step is not done, records done on exit 0 and releases
the claim on any other exit (passing CMD's code on; `--keep-on-exit CODE` keeps the claim instead,
for codes that mean "outcome unknown"). SIGTERM and SIGINT are forwarded to CMD while it runs;
before it runs (waiting for a busy step) they end the wrapper at once, also as a container's PID 1.

Exit codes of the wrapper itself (CMD's own code otherwise), each with a `runonce-guard:` line on stderr:
    0   step already done (CMD not run)           64  usage error: bad or missing arguments (EX_USAGE)
    69  store unavailable (EX_UNAVAILABLE)         78  configuration error, or no run_id (EX_CONFIG)
    75  step in progress elsewhere (EX_TEMPFAIL)   76  CMD exited 0, but a newer attempt had taken the
    127 CMD not found / not executable                 step over (its completion was refused)
    128+N  ended by signal N before CMD ran (143: SIGTERM), the claim given back if it was taken
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import time
import warnings
from typing import Any, NoReturn

from .errors import Fenced, GuardConfigError, GuardError, NotStartedByRunonce, StepInProgress, StoreUnavailable
from .once import _FROM_ENV, DEFAULT_RUN_ID_ENV, Guard, UnguardedStep
from .settings import MAX_DURATION_SECONDS, SECONDS, parse_seconds, shown

# sysexits.h codes, apart from the small codes commands commonly exit with (1, 2, …).
EXIT_USAGE = 64
EXIT_UNAVAILABLE = 69
EXIT_BUSY = 75
EXIT_FENCED = 76
EXIT_CONFIG = 78
EXIT_NOT_FOUND = 127
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error, a code commands often use themselves: exit 64 instead."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"runonce-guard: {message}\n")


def _seconds(flag: str) -> Any:
    def parse(raw: str) -> float:
        try:
            return parse_seconds(flag, raw)
        except GuardConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{flag}: ")) from None

    return parse


def _wait_seconds(raw: str) -> float:
    if not SECONDS.fullmatch(raw) or float(raw) > MAX_DURATION_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{shown(raw)}: seconds, 0 or more, at most {MAX_DURATION_SECONDS} (ten years)"
        )
    return float(raw)


def _exit_code(raw: str) -> int:
    """An exit code for --keep-on-exit: 1 to 255, in ASCII digits (bounded before `int()`)."""
    if not (re.fullmatch(r"[0-9]{1,3}", raw) and 1 <= int(raw) <= 255):
        raise argparse.ArgumentTypeError(f"{shown(raw)}: an exit code from 1 to 255")
    return int(raw)


class _Terminated(Exception):
    """SIGTERM or SIGINT before CMD ran: an ordinary exception to `once`, so a claim taken is given back."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"ended by {signal.Signals(signum).name} before the command ran")


class _StopSignals:
    """SIGTERM/SIGINT while the wrapper itself waits. The handler raises only inside `sleep` (the
    wait for a busy step, where nothing is held), else it is noted and acted on before CMD starts.
    Installed for the whole run: as a container's PID 1 a signal without a handler is ignored."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._sleeping = False
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, _frame: Any) -> None:
        self.received = signum
        if self._sleeping:
            raise _Terminated(signum)

    def sleep(self, seconds: float) -> None:
        self._sleeping = True
        try:
            if self.received is not None:
                raise _Terminated(self.received)
            time.sleep(seconds)
        finally:
            self._sleeping = False

    def check(self) -> None:
        if self.received is not None:
            raise _Terminated(self.received)


class _Exited(Exception):
    """CMD exited non-zero: releases the claim (an ordinary exception to `once`)."""

    def __init__(self, code: int):
        self.code = code
        super().__init__(f"command exited with {code}")


class _ExitedUnknown(_Exited):
    """CMD exited with a --keep-on-exit code: the claim is kept (outcome unknown)."""


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="runonce-guard", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    run = sub.add_parser("run", help="run CMD once per (run_id, step, task)")
    status = sub.add_parser("status", help="print the step's record as JSON")
    store = sub.add_parser("store", help="set up the step store named by RUNONCE_STORE")
    store.add_argument("action", choices=["init"], help="init: create what the store needs (idempotent)")
    for p in (run, status):
        p.add_argument("--step", required=True, help="step name: [A-Za-z0-9_.-]{1,100}")
        p.add_argument("--run-id", help=f"the run_id (default: ${DEFAULT_RUN_ID_ENV}, or --run-id-env)")
        p.add_argument("--run-id-env", default=DEFAULT_RUN_ID_ENV, help="env var holding the run_id")
        task = p.add_mutually_exclusive_group()
        task.add_argument(
            "--task",
            help="task index; wins over the job runner's ($CLOUD_RUN_TASK_INDEX, $BATCH_TASK_INDEX, $CLUSTER_SPEC)",
        )
        task.add_argument("--no-task", action="store_true", help="one record for all tasks")
    run.add_argument(
        "--on-busy",
        choices=["wait", "raise"],
        default="wait",
        help="another attempt holds the lease: wait for it (default) or exit 75 at once",
    )
    run.add_argument("--wait-seconds", type=_wait_seconds, help="longest wait for a busy step (default: the lease)")
    run.add_argument(
        "--lease-seconds", type=_seconds("--lease-seconds"), help="this step's lease (default: $RUNONCE_LEASE_SECONDS)"
    )
    run.add_argument(
        "--keep-on-exit",
        type=_exit_code,
        action="append",
        default=[],
        metavar="CODE",
        help="exit codes that mean 'outcome unknown': keep the claim instead of releasing",
    )
    run.add_argument("--allow-missing", action="store_true", help="no run_id: run CMD unguarded, with a warning")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    return parser


def _task(args: argparse.Namespace) -> Any:
    return None if args.no_task else (args.task if args.task is not None else _FROM_ENV)


def _say(message: str) -> None:
    print(f"runonce-guard: {message}", file=sys.stderr, flush=True)


def _run_child(cmd: list[str]) -> int:
    """Run CMD, forwarding SIGTERM/SIGINT to it; its exit code (128+N if killed by signal N)."""
    child = subprocess.Popen(cmd)
    previous = {}

    def forward(signum: int, _frame: Any) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    for sig in STOP_SIGNALS:
        previous[sig] = signal.signal(sig, forward)
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code


def _cmd_run(guard: Guard, args: argparse.Namespace, signals: _StopSignals) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    keep = set(args.keep_on_exit)
    run = guard.once(
        args.step,
        run_id=args.run_id,
        task=_task(args),
        on_busy=args.on_busy,
        wait_seconds=args.wait_seconds,
        unknown=(_ExitedUnknown,),
        allow_missing=args.allow_missing,
        lease_seconds=args.lease_seconds,
    )
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnguardedStep)
            with run as step:
                for warning in caught:
                    _say(f"WARNING: {warning.message}")
                if step.done:
                    record = step.record
                    assert record is not None
                    _say(
                        f"step {args.step!r} already done ({record.updated_at.isoformat()}, attempt "
                        f"{record.attempt_id}): not running the command"
                    )
                    return 0
                signals.check()  # a stop asked for while claiming: give the claim back, run nothing
                if step.recovering:
                    _say(f"step {args.step!r}: an earlier attempt crashed or ended unknown inside it; running again")
                try:
                    code = _run_child(cmd)
                except OSError as exc:
                    _say(f"cannot run {cmd[0]!r}: {exc}")
                    code = EXIT_NOT_FOUND
                if code != 0:
                    raise (_ExitedUnknown if code in keep else _Exited)(code)
        return 0
    except _Exited as exited:
        return exited.code


def _cmd_status(guard: Guard, args: argparse.Namespace) -> int:
    key = guard.once(args.step, run_id=args.run_id, task=_task(args)).key()
    if key is None:
        raise NotStartedByRunonce(f"no run_id: pass --run-id or set ${args.run_id_env}")
    record = guard.store.get(key, guard.clock())
    if record is None:
        print(json.dumps({"key": key.doc_id, "status": "absent"}))
        return 1
    print(json.dumps({"key": key.doc_id, **record.to_json()}, indent=2))
    return 0


# The wrapper's own exit code per error, most specific first.
_EXIT_CODES: tuple[tuple[type[GuardError], int], ...] = (
    (Fenced, EXIT_FENCED),
    (StepInProgress, EXIT_BUSY),
    (StoreUnavailable, EXIT_UNAVAILABLE),
    (GuardError, EXIT_CONFIG),  # GuardConfigError, NotStartedByRunonce
)


def _cmd_store_init(guard: Guard) -> int:
    """Create the Spanner table; say what Firestore and Redis need (nothing to create)."""
    settings, store = guard.settings, guard.store
    init = getattr(store, "init", None)
    if init is not None:
        init(_say)
        return 0
    store.ping()
    if settings.store == "firestore":
        _say(
            f"Firestore needs no table: documents go to collection {settings.firestore_steps_collection!r}. "
            "To delete old steps, enable a TTL policy on expire_at: gcloud firestore fields ttls update "
            f"expire_at --collection-group={settings.firestore_steps_collection} --enable-ttl"
        )
    else:
        _say("Redis needs nothing created: each step's key expires at its expire_at")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    guard: Guard | None = None
    if args.verb == "store":
        try:
            guard = Guard()
            return _cmd_store_init(guard)
        except GuardError as exc:
            _say(str(exc))
            return next(code for kind, code in _EXIT_CODES if isinstance(exc, kind))
        finally:
            if guard is not None and guard._store is not None:
                guard._store.close()
    if args.verb == "run" and not (args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd):
        _say("run: give the command after --, e.g. runonce-guard run --step export -- ./export.sh")
        return EXIT_USAGE
    signals = _StopSignals()
    try:
        if args.verb == "run":
            signals.install()
        guard = Guard(run_id_env=args.run_id_env, sleep=signals.sleep)
        return _cmd_run(guard, args, signals) if args.verb == "run" else _cmd_status(guard, args)
    except _Terminated as stopped:
        _say(f"step {args.step!r}: {stopped}; the claim, if taken, was given back")
        return 128 + stopped.signum
    except GuardError as exc:
        _say(f"step {args.step!r}: the command succeeded, but {exc}" if isinstance(exc, Fenced) else str(exc))
        return next(code for kind, code in _EXIT_CODES if isinstance(exc, kind))
    finally:
        signals.uninstall()
        if guard is not None and guard._store is not None:
            guard._store.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
