"""Where runonce's CPU goes on a fresh delivery: py-spy on a real `runonce serve` (the bench_perf.py
set-up: `http` target, JSON logs, Firestore emulator, local downstream), split the way issue 14 does.

    .venv/bin/python bench/profile_hot_path.py [--deliveries 3000] [--concurrency 16] [--no-native] [--oidc]

Samples the server (py-spy record, `--native` so C extensions such as grpc's and uvloop's show up)
while it answers fresh deliveries, then attributes each sample to one cost: the innermost frame that
belongs to a known one wins, so the JSON encoding inside a log call counts as JSON, and the socket
write inside httpcore as the httpx POST. Also prints each cost inclusively (any frame on the stack),
which is what removing that layer entirely would save. Writes the raw stacks beside the output.
On a loaded machine py-spy also samples threads that wait for a core: the output says when.
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_perf import BIN, Contender, Downstream, contenders, cpu_seconds, drive, run, start  # noqa: E402
from tests.support.oidc import CertsServer, claims, make_key, sign  # noqa: E402
from tests.support.procs import start_firestore_emulator  # noqa: E402


def frames(*paths: str, native: str = "") -> re.Pattern[str]:
    """A frame whose (shortened) path starts with one of `paths`, or whose text matches `native`."""
    pattern = r"\((?:" + "|".join(re.escape(path) for path in paths) + ")"
    return re.compile(pattern + (f"|{native}" if native else ""))


# (cost, pattern on a py-spy frame "function (path:line)"): the split of issue 14. py-spy shortens
# paths: runonce's own modules show as `api/access_log.py`, `stores/firestore.py`. The innermost frame that
# matches a cost wins, the first listed on the same frame. Frames of anyio, asyncio and uvloop match
# none: they are charged to the layer that called them (httpcore's locks to the POST, starlette's
# streams to the framework), or to "event loop" when no layer is on the stack.
COSTS: list[tuple[str, re.Pattern[str]]] = [
    ("garbage collection", re.compile(r"^(gc_collect\w*|_PyObject_GC_Collect|collect|gc_collect_main) \(")),
    ("auth", frames("auth/callers.py:", "certs.py:", "google/auth/", "jwt/", "cryptography/")),
    ("JSON", frames("json/", "orjson", native=r"^encode_json |^JSONResponse\.render ")),
    ("logging", frames("logging/", "logs.py:")),
    ("metrics", frames("prometheus_client/", "metrics.py:")),
    ("httpx POST", frames("httpx/", "httpcore/", "h11/", "targets/")),
    (
        "Firestore client",
        frames(
            "firestore_v1/",
            "google/cloud/firestore",
            "api_core/",
            "proto/",
            "google/protobuf/",
            "grpc/",
            native=r"cygrpc|libgrpc|_message\.cpython|upb",
        ),
    ),
    (
        "framework/middleware",
        frames(
            "fastapi/",
            "starlette/",
            "uvicorn/",
            "pydantic",
            "api/access_log.py:",
            "main.py:",
            "api/",
            native=r"httptools|pydantic_core",
        ),
    ),
    ("runonce core", frames("run/runner.py:", "delivery.py:", "routes.py:", "errors.py:", "admission.py:", "stores/")),
]
LOOP_ENTRY = re.compile(r"asyncio/runners\.py")  # frames above it (click, `serve`, uvicorn's run) are on every stack
EVENT_LOOP = "event loop (uvloop, asyncio)"
OTHER = "other"
# A sample whose innermost frame is one of these is a thread waiting, not working: dropped.
IDLE = re.compile(
    r"^(epoll_wait|epoll_pwait|poll|ppoll|select|pselect6?|pthread_cond_(timed)?wait|__futex_abstimed_wait\w*|"
    r"futex_wait\w*|sem_(timed)?wait|nanosleep|clock_nanosleep|accept4?) \("
)
# Leaf frames that are system calls: their CPU is the kernel's (loopback TCP is processed in the
# sender's system call), a share no Python-level change removes, only fewer calls.
SYSCALL = re.compile(
    r"^(write|writev|sendmsg|sendto|send|read|readv|recv|recvmsg|recvfrom|getpid|fstatat64|stat64|"
    r"newfstatat|openat64|epoll_ctl|syscall|close|__close|getsockopt|setsockopt) \("
)
# Single spots worth watching, each one lever: (pattern, inclusive). Inclusive counts every sample
# with a matching frame on the stack (right for a call that does its work below it: the access-log
# line's logging and JSON); otherwise only the samples that the matching frame itself decided, i.e.
# the frame is the innermost one of any cost (right for wrappers, such as fastapi's middleware, that
# are on every stack).
SPOTS: dict[str, tuple[re.Pattern[str], bool]] = {
    "httpcore current_async_library (`import sniffio` fails on every call: a sys.path scan)": (
        re.compile(r"^current_async_library \(httpcore/"),
        True,
    ),
    "proto-plus marshalling (proto/)": (frames("proto/"), False),
    "api_core retry/timeout wrappers": (frames("api_core/retry/", "api_core/timeout.py", "api_core/gapic_v1/"), False),
    "grpc aio call objects (grpc/aio/, cygrpc)": (frames("grpc/", native=r"cygrpc"), False),
    "FastAPI routing, dependency solving, request/response": (
        frames("fastapi/routing.py", "fastapi/dependencies/", "starlette/routing.py", "starlette/requests.py"),
        False,
    ),
    "fastapi's extra middleware (telemetry, body limit, exit stack)": (
        frames("fastapi/telemetry/", "fastapi/_body_limit.py", "fastapi/middleware/"),
        False,
    ),
    "uvicorn + httptools (HTTP server, response write)": (frames("uvicorn/", native=r"httptools"), False),
    "access-log line (AccessLog._log: logging + JSON below it)": (re.compile(r"^AccessLog\._log "), True),
    "h11 (httpx's HTTP/1.1 state machine)": (frames("h11/"), False),
}


def attribute(stack: list[str]) -> tuple[str, str | None]:
    """The cost of one sample, and the frame that decided it: the innermost frame below the event
    loop's entry that matches a cost."""
    entry = next((i for i, frame in enumerate(stack) if LOOP_ENTRY.search(frame)), -1)
    for frame in reversed(stack[entry + 1 :]):
        for cost, pattern in COSTS:
            if pattern.search(frame):
                return cost, frame
    return (EVENT_LOOP if entry >= 0 else OTHER), None


@dataclass
class Summary:
    samples: int = 0  # working samples (idle ones dropped)
    idle: int = 0
    exclusive: Counter[str] = field(default_factory=Counter)
    in_syscalls: Counter[str] = field(default_factory=Counter)  # of exclusive, leaf in a system call
    inclusive: Counter[str] = field(default_factory=Counter)
    spots: Counter[str] = field(default_factory=Counter)
    deciders: dict[str, Counter[str]] = field(default_factory=dict)  # per cost, the frames that decided it
    leaves: Counter[str] = field(default_factory=Counter)


def summarise(raw: Path) -> Summary:
    summary = Summary()
    for line in raw.read_text().splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        stack = stack_text.split(";")
        if IDLE.search(stack[-1]):
            summary.idle += count
            continue
        summary.samples += count
        cost, decider = attribute(stack)
        summary.exclusive[cost] += count
        summary.deciders.setdefault(cost, Counter())[decider or stack[-1]] += count
        if SYSCALL.search(stack[-1]):
            summary.in_syscalls[cost] += count
        for name, pattern in COSTS:
            if any(pattern.search(frame) for frame in stack):
                summary.inclusive[name] += count
        for name, (pattern, inclusive) in SPOTS.items():
            if any(pattern.search(frame) for frame in stack) if inclusive else (decider and pattern.search(decider)):
                summary.spots[name] += count
        summary.leaves[next((f for f in reversed(stack) if ".py:" in f), stack[-1])] += count
    return summary


def with_oidc(contender: Contender) -> tuple[Contender, str, CertsServer]:
    """runonce verifying a Scheduler-style ID token on every delivery, against a loopback certs endpoint."""
    key = make_key()
    certs = CertsServer([key]).start()
    audience, caller = "https://runonce.example.run.app", "scheduler@bench-project.iam.gserviceaccount.com"
    token = sign(key, claims(audience=audience, email=caller, lifetime=3600))
    settings = {
        "RUNONCE_AUTH": "oidc",
        "RUNONCE_AUDIENCE": audience,
        "RUNONCE_ALLOWED_CALLERS": caller,
        "RUNONCE_OIDC_CERTS_URL": certs.url,
    }
    env = contender.env
    return (
        replace(contender, env=lambda firestore, downstream: {**env(firestore, downstream), **settings}),
        f"Authorization: Bearer {token}\r\n",
        certs,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deliveries", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument("--no-native", action="store_true", help="Python frames only")
    parser.add_argument("--raw", type=Path, help="keep py-spy's collapsed stacks here")
    parser.add_argument(
        "--oidc",
        action="store_true",
        help="RUNONCE_AUTH=oidc: every delivery carries an RS256 ID token (tests/support/oidc.py)",
    )
    args = parser.parse_args()

    logs = Path(tempfile.mkdtemp(prefix="runonce-profile-"))
    raw = args.raw or logs / "runonce.collapsed"
    contender, headers, certs = contenders()[0], "", None
    if args.oidc:
        contender, headers, certs = with_oidc(contender)
    emulator = start_firestore_emulator(logs)
    downstream = Downstream(logs)
    try:
        server = start(contender, emulator.host, downstream.url, logs, headers)
        try:
            run(drive(server.port, 300, args.concurrency, headers))  # warm: connections, caches
            command = [
                str(BIN / "py-spy"),
                "record",
                "--pid",
                str(server.pid),
                "--rate",
                str(args.rate),
                "--format",
                "raw",
                "--output",
                str(raw),
                "--nonblocking" if args.no_native else "--native",
            ]
            spy = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            time.sleep(1)  # attached
            if spy.poll() is not None:
                raise RuntimeError(f"py-spy failed: {spy.stdout.read().decode() if spy.stdout else ''}")
            cpu, sys_before = cpu_seconds(server.pid), cpu_seconds(server.pid, kernel_only=True)
            wall, _ = run(drive(server.port, args.deliveries, args.concurrency, headers))
            cpu_ms = (cpu_seconds(server.pid) - cpu) * 1000 / args.deliveries
            sys_ms = (cpu_seconds(server.pid, kernel_only=True) - sys_before) * 1000 / args.deliveries
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        finally:
            server.stop()
    finally:
        downstream.stop()
        emulator.stop()
        if certs is not None:
            certs.stop()

    summary = summarise(raw)
    total = summary.samples
    mode = "python frames only" if args.no_native else "--native"
    print(
        f"{'OIDC on' if args.oidc else 'RUNONCE_AUTH=none'}; py-spy record {mode}, {args.rate} Hz, {args.deliveries} "
        f"fresh deliveries at {args.concurrency} concurrent "
        f"({args.deliveries / wall:.0f}/s with py-spy attached)"
    )
    print(
        f"server CPU per delivery (/proc): {cpu_ms:.2f} ms, of which kernel (stime) {sys_ms:.2f} ms "
        f"({sys_ms / cpu_ms:.0%}); {total} working samples ({summary.idle} idle ones dropped)"
    )
    sampled = total / args.rate
    if sampled > 1.3 * cpu_ms * args.deliveries / 1000:
        print(
            f"caution: {sampled:.1f} s sampled against {cpu_ms * args.deliveries / 1000:.1f} s of CPU: a thread that "
            "waits for a core (a loaded machine) is sampled as working, mostly inside the system call that woke "
            "another process (write, sendmsg)"
            + (
                ""
                if args.no_native
                else f"; the syscalls column ({sum(summary.in_syscalls.values()) / total:.0%}) is "
                "then inflated against the kernel's real share above"
            )
            + "; the Python-level shares hold"
        )
    print(
        f"{'cost (innermost layer on the stack)':38} {'share':>7} {'ms/deliv.':>10} {'syscalls':>9} {'inclusive':>10}"
    )
    for cost, count in summary.exclusive.most_common():
        share = count / total
        included = summary.inclusive[cost] / total if cost in summary.inclusive else share
        print(
            f"{cost:38} {share:7.1%} {share * cpu_ms:10.2f} {summary.in_syscalls[cost] / total:9.1%} {included:10.1%}"
        )
    print("single spots (share, ms per delivery; SPOTS says which count inclusively):")
    for name in SPOTS:
        share = summary.spots[name] / total
        print(f"  {share:6.1%} {share * cpu_ms:6.2f}  {name}")
    for cost, _ in summary.exclusive.most_common(3):
        print(f"{cost}: the frames that decided it (innermost frame of the layer)")
        for frame, count in summary.deciders[cost].most_common(6):
            print(f"  {count / total:6.1%}  {frame}")
    print("hottest leaf frames (innermost Python frame):")
    for frame, count in summary.leaves.most_common(12):
        print(f"  {count / total:6.1%}  {frame}")
    print(f"raw stacks: {raw}")


if __name__ == "__main__":
    main()
