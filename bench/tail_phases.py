"""Where the slowest one-at-a-time deliveries spend their time: a real `runonce serve` (the
bench_perf.py set-up: `http` target, JSON logs, Firestore emulator, local downstream), with the
delivery (`Runner.run`), the store's two calls (Commit, BatchGetDocuments) and the targets' POST
timed from inside the server, then split for the slowest 1 %.

    .venv/bin/python bench/tail_phases.py [--deliveries 3000] [--firestore HOST:PORT]

Prints each phase's median and p99, then for the deliveries at or above the p99 the phase that took
longest and what was left for runonce's own code (the delivery less its Firestore calls and its
POST). Issue 14's p99 row asks whose tail it is: runonce's own code, or the calls it waits on.
The timers wrap methods in the server process only (`--serve`), never in the tree under test.
"""

from __future__ import annotations

import argparse
import bisect
import functools
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_perf import Contender, Downstream, contenders, drive, p99, run, start  # noqa: E402
from tests.support.procs import start_firestore_emulator  # noqa: E402


def serve_timed(port: int, record_to: Path) -> None:
    """`runonce serve` with timers on the delivery, the store's calls and the POST; the records are
    written to `record_to` when the server stops (uvicorn hands SIGTERM on to the handler it found)."""
    from runonce.cli import main
    from runonce.run import runner as protocol
    from runonce.stores import firestore
    from runonce.targets import transport

    records: list[tuple[str, float, float]] = []  # (phase, started, ms)

    def write_and_exit(*_: object) -> None:
        record_to.write_text(json.dumps(records))
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, write_and_exit)

    def timed(cls: type, name: str, phase: str) -> None:
        original = getattr(cls, name)

        @functools.wraps(original)
        async def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                records.append((phase, started, (time.perf_counter() - started) * 1000))

        setattr(cls, name, wrapper)

    timed(protocol.Runner, "run", "delivery")
    timed(firestore.FirestoreStore, "_commit", "commit")
    timed(firestore.FirestoreStore, "_read_one", "read")
    timed(transport.AiohttpTransport, "handle_async_request", "post")
    main(["serve", "--port", str(port)])


def split(records: list[tuple[str, float, float]]) -> None:
    deliveries = sorted((r for r in records if r[0] == "delivery"), key=lambda r: r[1])
    inside: dict[float, list[tuple[str, float]]] = {d[1]: [] for d in deliveries}
    starts = [d[1] for d in deliveries]
    for phase, started, ms in records:
        if phase == "delivery":
            continue
        # the delivery this call belongs to: the last one started before it (one at a time)
        index = bisect.bisect_right(starts, started) - 1
        if index >= 0:
            inside[starts[index]].append((phase, ms))
    print(f"{len(deliveries)} deliveries, one at a time; per phase, ms:")
    for phase in ("delivery", "commit", "read", "post"):
        values = [ms for p, _, ms in records if p == phase]
        print(
            f"  {phase:9} n {len(values):5}  median {statistics.median(values):6.2f}  p99 {p99(values):6.2f}"
            f"  max {max(values):6.1f}"
        )

    def own(d: tuple[str, float, float]) -> float:
        """The delivery less the calls it waited on: the claim's commit and the read beside it
        count once (the longer), then the POST and the finish's commit."""
        calls = inside[d[1]]
        commits = [ms for p, ms in calls if p == "commit"]
        reads = [ms for p, ms in calls if p == "read"]
        claim = max(commits[:1] + reads[:1], default=0.0)
        return d[2] - claim - sum(commits[1:]) - sum(reads[1:]) - sum(ms for p, ms in calls if p == "post")

    owns = [own(d) for d in deliveries]
    print(
        f"  {'own code':9} n {len(owns):5}  median {statistics.median(owns):6.2f}  p99 {p99(owns):6.2f}"
        "  (the delivery less the calls it waited on)"
    )
    line = p99([d[2] for d in deliveries])
    slowest = [d for d in deliveries if d[2] >= line]
    worst = Counter(max([*inside[d[1]], ("own code", own(d))], key=lambda part: part[1])[0] for d in slowest)
    print(
        f"the {len(slowest)} deliveries at or above the p99 ({line:.2f} ms): longest part "
        + ", ".join(f"{phase} {count}" for phase, count in worst.most_common())
    )
    for d in sorted(slowest, key=lambda d: -d[2])[:10]:
        calls = ", ".join(f"{p} {ms:.1f}" for p, ms in inside[d[1]])
        print(f"  {d[2]:6.1f} ms: {calls}, own code {own(d):.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deliveries", type=int, default=3000)
    parser.add_argument(
        "--warmup", type=int, default=1000, help="deliveries at 16 concurrent first (the emulator's JIT)"
    )
    parser.add_argument("--firestore", help="an emulator already running (HOST:PORT); default: start one")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--record-to", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_timed(args.serve, args.record_to)
        return
    logs = Path(tempfile.mkdtemp(prefix="runonce-tail-"))
    record_to = logs / "phases.json"
    plain = contenders()[0]
    timed = Contender(
        "runonce",
        plain.label,
        lambda port: [
            sys.executable,
            str(Path(__file__).resolve()),
            "--serve",
            str(port),
            "--record-to",
            str(record_to),
        ],
        plain.env,
    )
    emulator = None if args.firestore else start_firestore_emulator(logs)
    downstream = Downstream(logs)
    server = None
    try:
        server = start(timed, args.firestore or emulator.host, downstream.url, logs)
        run(drive(server.port, args.warmup, 16))
        mark = time.perf_counter()
        run(drive(server.port, args.deliveries, 1))
    finally:
        if server is not None:
            server.stop()
        downstream.stop()
        if emulator is not None:
            emulator.stop()
    records = [r for r in json.loads(record_to.read_text()) if r[1] >= mark]
    print(f"load average {os.getloadavg()[0]:.1f}; logs: {logs}")
    split(records)


if __name__ == "__main__":
    main()
