"""`runonce-guard`: guard any command as one step (e.g. a Cloud Run job container's ENTRYPOINT).

    runonce-guard run --step NAME [options] -- CMD [ARGS...]
    runonce-guard status --step NAME [--run-id ID]

`run` claims the step, runs CMD only if the step is not done, records done on exit 0 and releases
the claim on any other exit (passing CMD's code on; `--keep-on-exit CODE` keeps the claim instead,
for codes that mean "outcome unknown"). SIGTERM and SIGINT are forwarded to CMD.

Exit codes of the wrapper itself (CMD's own code otherwise; killed by signal N = 128+N):
    0   step already done (CMD not run)          2   usage or configuration error, or no run_id
    75  step in progress elsewhere (EX_TEMPFAIL)  69  store unavailable (EX_UNAVAILABLE)
    76  CMD exited 0 but a newer attempt had taken the step over (its completion was refused)
    127 CMD not found / not executable
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import warnings
from typing import Any

from .errors import Fenced, GuardError, NotStartedByRunonce, StepInProgress, StoreUnavailable
from .once import _FROM_ENV, DEFAULT_RUN_ID_ENV, Guard, UnguardedStep

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 69
EXIT_BUSY = 75
EXIT_FENCED = 76
EXIT_NOT_FOUND = 127


class _Exited(Exception):
    """CMD exited non-zero: releases the claim (an ordinary exception to `once`)."""

    def __init__(self, code: int):
        self.code = code
        super().__init__(f"command exited with {code}")


class _ExitedUnknown(_Exited):
    """CMD exited with a --keep-on-exit code: the claim is kept (outcome unknown)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runonce-guard", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    run = sub.add_parser("run", help="run CMD once per (run_id, step, task)")
    status = sub.add_parser("status", help="print the step's record as JSON")
    for p in (run, status):
        p.add_argument("--step", required=True, help="step name: [A-Za-z0-9_.-]{1,100}")
        p.add_argument("--run-id", help=f"the run_id (default: ${DEFAULT_RUN_ID_ENV}, or --run-id-env)")
        p.add_argument("--run-id-env", default=DEFAULT_RUN_ID_ENV, help="env var holding the run_id")
        task = p.add_mutually_exclusive_group()
        task.add_argument("--task", help="task index (default: $CLOUD_RUN_TASK_INDEX)")
        task.add_argument("--no-task", action="store_true", help="one record for all tasks")
    run.add_argument(
        "--on-busy",
        choices=["wait", "raise"],
        default="wait",
        help="another attempt holds the lease: wait for it (default) or exit 75 at once",
    )
    run.add_argument("--wait-seconds", type=float, help="longest wait for a busy step (default: the lease)")
    run.add_argument("--lease-seconds", type=float, help="this step's lease (default: $RUNONCE_LEASE_SECONDS)")
    run.add_argument(
        "--keep-on-exit",
        type=int,
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

    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, forward)
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code


def _cmd_run(guard: Guard, args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        _say("run: give the command after --, e.g. runonce-guard run --step export -- ./export.sh")
        return EXIT_USAGE
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
    (GuardError, EXIT_USAGE),
)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    guard: Guard | None = None
    try:
        guard = Guard(run_id_env=args.run_id_env)
        return _cmd_run(guard, args) if args.verb == "run" else _cmd_status(guard, args)
    except GuardError as exc:
        _say(f"step {args.step!r}: the command succeeded, but {exc}" if isinstance(exc, Fenced) else str(exc))
        return next(code for kind, code in _EXIT_CODES if isinstance(exc, kind))
    finally:
        if guard is not None and guard._store is not None:
            guard._store.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
