"""Issue 14's table: runonce against the seed's handler, literal and rewritten async, in one run.

Three contenders answer fresh deliveries against the same Firestore emulator and the same local
downstream, each in its own server process, driven over HTTP the way Cloud Scheduler would:

- runonce: the real `runonce serve`, `http` target, JSON logs on, no auth;
- seed: the guide's handler as written (bench/seed_handler.py), sync Firestore transactions,
  under functions-framework (gunicorn, one worker, its default threads);
- async rewrite: the same logic on FastAPI/uvicorn with the async clients (bench/baseline_app.py).

Rounds rotate the order of the contenders so that machine noise falls on all three; each figure is
the median over rounds, and the ratio columns are runonce's figure over each baseline's.

    .venv/bin/python bench/bench_perf.py            # full run (~8 min on 2 idle cores)
    .venv/bin/python bench/bench_perf.py --smoke    # seconds: proves every row still prints
    .venv/bin/python bench/bench_perf.py --container  # also podman run -> first 200 (builds the image)
    .venv/bin/python bench/bench_perf.py --skip cold-start memory rtt   # CPU, throughput, latency only
    .venv/bin/python bench/bench_perf.py --skip loopback rtt --cold-starts 5  # the cold-start rows only

Rows: server CPU per fresh delivery (utime+stime from /proc of the server and all its processes),
deliveries/s at 16 concurrent, median and p99 latency one at a time at loopback and with
bench/latency_proxy.py adding a modelled round trip to every Firestore call, RSS over 10,000
deliveries, and process start -> first 200 on a fresh delivery.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import uvloop

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


from tests.support.procs import FirestoreEmulator, free_port, start_firestore_emulator  # noqa: E402

BIN = Path(sys.executable).parent
PROJECT = "runonce-bench"
SCHEDULE_TIME = "2026-10-16T12:00:00Z"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
DELIVERY_PATH = "/v1/routes/bench:run"

# Issue 14's goals per figure: runonce against the seed, or absolute
GOALS = {
    "cpu_ms": "<= 0.4x",
    "throughput": ">= 2x",
    "median_ms": "<= 0.5x",
    "p99_ms": "<= 0.5x",
    "rss_max_mb": "< 120 MB, flat",
    "cold_start_container_s": "<= 0.4 s",
}


# --- the contenders -------------------------------------------------------------------------


@dataclass
class Contender:
    """How to start one server; `start` returns it running, with its pid and port."""

    name: str
    label: str
    command: Callable[[int], list[str]]
    env: Callable[[str, str], dict[str, str]]  # (firestore host, downstream URL) -> environment


def contenders() -> list[Contender]:
    def runonce_env(firestore: str, downstream: str) -> dict[str, str]:
        routes = {"routes": {"bench": {"target": {"type": "http", "url": downstream}}}}
        return {
            "RUNONCE_AUTH": "none",
            "RUNONCE_ROUTES": json.dumps(routes),
            "RUNONCE_STORE": "firestore",
            "RUNONCE_FIRESTORE_PROJECT": PROJECT,
            "RUNONCE_FIRESTORE_COLLECTION": "bench_runonce",
            "FIRESTORE_EMULATOR_HOST": firestore,
            "RUNONCE_LOG_FORMAT": "json",
        }

    def seed_env(firestore: str, downstream: str) -> dict[str, str]:
        return {
            "GOOGLE_CLOUD_PROJECT": PROJECT,
            "FIRESTORE_EMULATOR_HOST": firestore,
            "BENCH_DOWNSTREAM_URL": downstream,
        }

    def rewrite_env(firestore: str, downstream: str) -> dict[str, str]:
        return {
            "BENCH_FIRESTORE_PROJECT": PROJECT,
            "BENCH_COLLECTION": "bench_async_rewrite",
            "FIRESTORE_EMULATOR_HOST": firestore,
            "BENCH_DOWNSTREAM_URL": downstream,
        }

    return [
        Contender(
            "runonce",
            "runonce serve: http target, JSON logs, RUNONCE_AUTH=none",
            lambda port: [str(BIN / "runonce"), "serve", "--port", str(port)],
            runonce_env,
        ),
        Contender(
            "seed",
            "the guide's handler as written: Flask, sync Firestore, functions-framework (bench/seed_handler.py)",
            lambda port: [
                str(BIN / "functions-framework"),
                "--source",
                "bench/seed_handler.py",
                "--target",
                "handle_scheduled_job",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            seed_env,
        ),
        Contender(
            "rewrite",
            "its async rewrite: FastAPI, AsyncClient, httpx, uvicorn (bench/baseline_app.py)",
            # uvicorn's defaults, access log included: runonce writes one line per delivery too
            lambda port: [str(BIN / "uvicorn"), "bench.baseline_app:app", "--port", str(port)],
            rewrite_env,
        ),
    ]


@dataclass
class Server:
    contender: Contender
    proc: subprocess.Popen
    port: int
    started: float  # time.perf_counter() just before Popen

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start(contender: Contender, firestore: str, downstream: str, logs: Path, headers: str = "") -> Server:
    """Start the server and return once a fresh delivery has been answered 200 (its cold start)."""
    port = free_port()
    log = logs / f"{contender.name}-{port}.log"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RUNONCE_", "BENCH_", "FIRESTORE_"))}
    with log.open("wb") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            contender.command(port),
            cwd=REPO,
            env={**base, **contender.env(firestore, downstream)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Server(contender, proc, port, started)
    try:
        run(first_answer(server, log, headers))
    except BaseException:
        server.stop()
        raise
    return server


async def first_answer(server: Server, log: Path, headers: str = "") -> None:
    def exited() -> None:
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"{server.contender.name} exited with {server.proc.returncode}:\n{log.read_text()[-3000:]}"
            )

    await first_answer_on(server.port, server.contender.name, exited, headers)


async def first_answer_on(
    port: int, name: str, check_alive: Callable[[], None], headers: str = "", timeout: float = 60
) -> None:
    """Poll with fresh deliveries until one is answered 200."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        check_alive()
        try:
            connection = await Connection.open(port, headers)
        except OSError:
            await asyncio.sleep(0.005)
            continue
        try:
            status, body = await connection.deliver()
        except (OSError, asyncio.IncompleteReadError):
            await asyncio.sleep(0.005)
            continue
        finally:
            connection.close()
        if status == 200:
            return
        raise RuntimeError(f"{name}: first delivery answered {status}: {body[:300]!r}")
    raise RuntimeError(f"{name}: no answer after {timeout}s")


# --- the load generator ---------------------------------------------------------------------
# A bare HTTP/1.1 keep-alive client on uvloop: it shares the two cores with the servers, so the
# cheaper it is, the less it takes from them (httpx costs about as much per request as a server).


class Connection:
    def __init__(self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, headers: str):
        self.port, self.reader, self.writer, self.headers = port, reader, writer, headers

    @classmethod
    async def open(cls, port: int, headers: str = "") -> Connection:
        """`headers`: extra header lines, each ending in CRLF (an Authorization header)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(port, reader, writer, headers)

    def close(self) -> None:
        self.writer.close()

    async def deliver(self) -> tuple[int, bytes]:
        """POST one fresh run (a job name never used before); (status, body)."""
        self.writer.write(
            f"POST {DELIVERY_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nUser-Agent: Google-Cloud-Scheduler\r\n"
            f"X-CloudScheduler-JobName: job-{uuid.uuid4().hex}\r\nX-CloudScheduler-ScheduleTime: {SCHEDULE_TIME}\r\n"
            f"{self.headers}Content-Length: 0\r\n\r\n".encode()
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        if "content-length" not in headers:
            raise RuntimeError(f"answer without Content-Length: {head!r}")
        body = await self.reader.readexactly(int(headers["content-length"]))
        if headers.get("connection", "").lower() == "close":
            self.close()
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return status, body


async def drive(port: int, count: int, concurrency: int, headers: str = "") -> tuple[float, list[float]]:
    """`count` fresh deliveries, `concurrency` in flight: (wall seconds, latencies in ms)."""
    connections = [await Connection.open(port, headers) for _ in range(concurrency)]
    remaining = iter(range(count))
    latencies: list[float] = []

    async def worker(connection: Connection) -> None:
        for _ in remaining:
            began = time.perf_counter()
            status, body = await connection.deliver()
            latencies.append((time.perf_counter() - began) * 1000)
            if status != 200:
                raise RuntimeError(f"port {port}: HTTP {status}: {body[:300]!r}")

    began = time.perf_counter()
    try:
        await asyncio.gather(*(worker(c) for c in connections))
    finally:
        for connection in connections:
            connection.close()
    return time.perf_counter() - began, latencies


def run(coroutine):
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


# --- what /proc says ------------------------------------------------------------------------


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants (gunicorn's worker under functions-framework's arbiter)."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            with contextlib.suppress(OSError):
                queue.extend(int(child) for child in (task / "children").read_text().split())
    return found


def cpu_seconds(pid: int, *, kernel_only: bool = False) -> float:
    """utime + stime of the process tree, in seconds (stime alone with `kernel_only`)."""
    ticks = 0
    for each in process_tree(pid):
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += (0 if kernel_only else int(fields[11])) + int(fields[12])  # utime, stime (fields 14, 15 of proc(5))
    return ticks / CLOCK_TICKS


def rss_mb(pid: int) -> float:
    """Resident memory of the process tree, MB."""
    total = 0
    for each in process_tree(pid):
        try:
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


# --- measuring ------------------------------------------------------------------------------


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98] if len(values) >= 2 else values[0]


@dataclass
class Figures:
    """Per contender: one list of samples (one per round) per figure."""

    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    rss: dict[str, list[tuple[int, float]]] = field(default_factory=dict)

    def add(self, name: str, figure: str, value: float) -> None:
        self.samples.setdefault(name, {}).setdefault(figure, []).append(value)

    def median(self, name: str, figure: str) -> float | None:
        values = self.samples.get(name, {}).get(figure)
        return statistics.median(values) if values else None


def rotated(servers: list[Server], round_no: int) -> list[Server]:
    shift = round_no % len(servers)
    return servers[shift:] + servers[:shift]


def measure_rounds(
    servers: list[Server], emulator_pid: int, figures: Figures, suffix: str, args: argparse.Namespace
) -> None:
    """Warm-up, then `args.rounds` rounds of: one at a time (latency, CPU) and 16 at once
    (throughput, CPU; the emulator's CPU too), the contenders in a rotating order."""
    for server in servers:
        run(drive(server.port, args.warmup, args.concurrency))
    for round_no in range(args.rounds):
        for server in rotated(servers, round_no):
            name = server.contender.name
            cpu = cpu_seconds(server.pid)
            count = args.latency_requests_rtt if suffix else args.latency_requests
            _, latencies = run(drive(server.port, count, 1))
            figures.add(name, f"cpu_seq_ms{suffix}", (cpu_seconds(server.pid) - cpu) * 1000 / count)
            figures.add(name, f"median_ms{suffix}", statistics.median(latencies))
            figures.add(name, f"p99_ms{suffix}", p99(latencies))
            cpu, emulator_cpu = cpu_seconds(server.pid), cpu_seconds(emulator_pid)
            wall, _ = run(drive(server.port, args.throughput_requests, args.concurrency))
            figures.add(name, f"cpu_ms{suffix}", (cpu_seconds(server.pid) - cpu) * 1000 / args.throughput_requests)
            figures.add(
                name,
                f"emulator_cpu_ms{suffix}",
                (cpu_seconds(emulator_pid) - emulator_cpu) * 1000 / args.throughput_requests,
            )
            figures.add(name, f"throughput{suffix}", args.throughput_requests / wall)


def measure_memory(servers: list[Server], figures: Figures, args: argparse.Namespace) -> None:
    """`args.memory_deliveries` per contender at 16 concurrent, in five interleaved chunks; RSS after each."""
    step = max(1, args.memory_deliveries // 5)
    for server in servers:
        figures.rss[server.contender.name] = [(0, rss_mb(server.pid))]
    for done in range(step, step * 5 + 1, step):
        for server in servers:
            run(drive(server.port, step, args.concurrency))
            figures.rss[server.contender.name].append((done, rss_mb(server.pid)))
    for name, series in figures.rss.items():
        figures.add(name, "rss_max_mb", max(mb for _, mb in series))


def rss_verdict(series: list[tuple[int, float]]) -> str:
    """ "flat" when the second half of the deliveries grew RSS by under 2 MB (the first half warms caches)."""
    middle = series[len(series) // 2][1]
    growth = series[-1][1] - middle
    return "flat" if growth < 2 else f"+{growth:.1f} MB in 2nd half"


def measure_cold_starts(
    contender_list: list[Contender],
    firestore: str,
    downstream: str,
    logs: Path,
    figures: Figures,
    args: argparse.Namespace,
) -> None:
    """Process start -> first 200 on a fresh delivery (imports, app set-up, first Firestore
    channel and downstream connection), `args.cold_starts` times each, interleaved, after one
    untimed start each: the files are then in the page cache, as an image's are on a warm host."""
    for round_no in range(0 if args.smoke else -1, args.cold_starts):
        shift = round_no % len(contender_list)
        for contender in contender_list[shift:] + contender_list[:shift]:
            server = start(contender, firestore, downstream, logs)
            if round_no >= 0:
                figures.add(contender.name, "cold_start_s", time.perf_counter() - server.started)
                # CPU spent to get there (imports, set-up, first delivery): steadier than wall time on a shared machine
                figures.add(contender.name, "cold_start_cpu_s", cpu_seconds(server.pid))
            server.stop()


# The libraries the stack names that a fresh delivery on this route cannot do without (the web
# framework and server, the settings, the HTTP client API, the Firestore client): their imports alone
# are a floor under any cold start on this stack, measured beside runonce's.
STACK_IMPORTS = "import fastapi, uvicorn, httpx, pydantic_settings, google.cloud.firestore"


def time_until_imported(command: list[str]) -> tuple[float, float | None]:
    """Start `command` (a Python that runs STACK_IMPORTS, then prints a line and waits on stdin):
    (seconds from start to that line, its CPU by then, or None where /proc cannot see it)."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stdout.readline()
        elapsed = time.perf_counter() - started
        if line.strip() != b"imported":
            raise RuntimeError(f"{command[0]}: {line!r} {proc.stderr.read()[-2000:]!r}")
        cpu = cpu_seconds(proc.pid) if Path(command[0]).name.startswith("python") else None
        return elapsed, cpu
    finally:
        proc.stdin.close()  # the child reads EOF and exits
        proc.wait(30)


def stack_import_script() -> str:
    return f"{STACK_IMPORTS}; import sys; print('imported', flush=True); sys.stdin.read()"


def measure_stack_floor(figures: Figures, runs: int) -> None:
    """Process start -> STACK_IMPORTS done, in this venv: what the cold start costs before runonce's
    own code runs (after one untimed run, so the files are in the page cache)."""
    for round_no in range(-1, runs):
        elapsed, cpu = time_until_imported([sys.executable, "-c", stack_import_script()])
        if round_no >= 0:
            figures.add("runonce", "stack_floor_s", elapsed)
            figures.add("runonce", "stack_floor_cpu_s", cpu)


IMAGE = "localhost/runonce:bench-perf"  # its own tag: the deploy tests' image may be in use meanwhile


def measure_container_cold_starts(
    firestore: str, downstream: str, figures: Figures, runs: int, image: str = IMAGE
) -> str:
    """podman run -> first 200 on a fresh delivery, runonce's image with the same settings as the
    process (host network: the emulator and the downstream are on loopback). Builds the image from
    this checkout first (podman on a locally bootstrapped Debian base, as tests/deploy do)."""
    sys.path.insert(0, str(REPO / "tests" / "deploy"))
    from deploy_image import RUN_FLAGS, build, remove_container
    from deploy_tools import tool

    build(image)
    for _ in range(runs):  # the floor: podman itself, starting and ending a process in this image
        started = time.perf_counter()
        subprocess.run(
            [tool("podman"), "run", "--rm", *RUN_FLAGS, "--network=host", "--entrypoint", "true", image],
            capture_output=True,
            check=True,
        )
        figures.add("runonce", "container_floor_s", time.perf_counter() - started)
    for _ in range(runs):  # podman, Python and the stack's imports: the floor under any runonce in this image
        elapsed, _ = time_until_imported(
            [
                tool("podman"),
                "run",
                "--rm",
                "-i",
                *RUN_FLAGS,
                "--network=host",
                "--entrypoint",
                "python",
                image,
                "-c",
                stack_import_script(),
            ]
        )
        figures.add("runonce", "container_stack_floor_s", elapsed)
    for _ in range(runs):
        port = free_port()
        command = [tool("podman"), "run", "-d", *RUN_FLAGS, "--network=host", "-e", f"PORT={port}"]
        for name, value in contenders()[0].env(firestore, downstream).items():
            command += ["-e", f"{name}={value}"]
        started = time.perf_counter()
        container = subprocess.run([*command, image], capture_output=True, text=True, check=True).stdout.strip()
        try:
            run(first_answer_on(port, "container", lambda: None))
            figures.add("runonce", "cold_start_container_s", time.perf_counter() - started)
        finally:
            remove_container(container)
    return f"container cold start: podman run (runc, host network) of {image} -> first 200 on a fresh delivery"


class LatencyProxy:
    """bench/latency_proxy.py in front of the emulator: every Firestore round trip gets `rtt_ms` more."""

    def __init__(self, target: str, rtt_ms: float):
        port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "bench" / "latency_proxy.py"),
                "--listen",
                f"127.0.0.1:{port}",
                "--target",
                target,
                "--rtt-ms",
                str(rtt_ms),
            ],
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == b"ready"
        self.host = f"127.0.0.1:{port}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class Downstream:
    """bench/downstream_app.py under uvicorn, without an access log: answers 200 at once."""

    def __init__(self, logs: Path):
        self.port = free_port()
        with (logs / "downstream.log").open("wb") as out:
            self.proc = subprocess.Popen(
                [str(BIN / "uvicorn"), "bench.downstream_app:app", "--port", str(self.port), "--no-access-log"],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.url = f"http://127.0.0.1:{self.port}/ok"
        deadline = time.monotonic() + 30
        while not port_open(self.port):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"downstream did not start:\n{(logs / 'downstream.log').read_text()}")
            time.sleep(0.02)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def port_open(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


# --- the table ------------------------------------------------------------------------------

ROWS = [
    # (figure, label, number format)
    ("cpu_ms", "server CPU per fresh delivery, 16 concurrent (ms)", "{:.2f}"),
    ("cpu_seq_ms", "server CPU per fresh delivery, one at a time (ms)", "{:.2f}"),
    ("throughput", "throughput at 16 concurrent (deliveries/s)", "{:.0f}"),
    ("emulator_cpu_ms", "  Firestore emulator's CPU per delivery, meanwhile (ms)", "{:.2f}"),
    ("median_ms", "median latency, loopback (ms)", "{:.2f}"),
    ("p99_ms", "p99 latency, loopback (ms)", "{:.2f}"),
    ("median_ms@rtt", "median latency, Firestore RTT +{rtt} ms (ms)", "{:.2f}"),
    ("p99_ms@rtt", "p99 latency, Firestore RTT +{rtt} ms (ms)", "{:.2f}"),
    ("throughput@rtt", "throughput at 16 concurrent, RTT +{rtt} ms (/s)", "{:.0f}"),
    ("rss_max_mb", "RSS max over {memory} deliveries (MB)", "{:.1f}"),
    ("cold_start_s", "cold start: process start -> first 200 (s)", "{:.2f}"),
    ("cold_start_cpu_s", "  server CPU from process start to that 200 (s)", "{:.2f}"),
    ("stack_floor_s", "  floor: process start -> stack imports done (s)", "{:.2f}"),
    ("stack_floor_cpu_s", "    its CPU (s)", "{:.2f}"),
    ("cold_start_container_s", "cold start: container start -> first 200 (s)", "{:.2f}"),
    ("container_floor_s", "  podman run --rm of `true` in that image (s)", "{:.2f}"),
    ("container_stack_floor_s", "  floor: container start -> stack imports done (s)", "{:.2f}"),
]


def table(figures: Figures, names: list[str], args: argparse.Namespace) -> list[str]:
    width = 52
    header = f"{'':{width}} {'runonce':>9} {'seed':>9} {'rewrite':>9} {'vs seed':>8} {'vs rewr.':>8}  goal (vs seed)"
    lines = [header, "-" * len(header)]
    for figure, label, fmt in ROWS:
        key = figure.replace("@rtt", "_rtt")
        text = label.format(rtt=f"{args.firestore_rtt_ms:g}", memory=f"{args.memory_deliveries:,}")
        values = {name: figures.median(name, key) for name in names}
        cells = [fmt.format(values[name]) if values[name] is not None else "n/a" for name in names]
        ratios = []
        for baseline in ("seed", "rewrite"):
            a, b = values["runonce"], values[baseline]
            ratios.append(f"{a / b:.2f}x" if a is not None and b else "n/a")
        goal = GOALS.get(figure.split("@")[0], "")
        lines.append(f"{text:{width}} {cells[0]:>9} {cells[1]:>9} {cells[2]:>9} {ratios[0]:>8} {ratios[1]:>8}  {goal}")
    return lines


def measure_with_latency(
    listed: list[Contender],
    emulator: FirestoreEmulator,
    downstream: str,
    logs: Path,
    figures: Figures,
    args: argparse.Namespace,
) -> None:
    """The rounds again, with fresh servers that reach the emulator through bench/latency_proxy.py."""
    proxy = LatencyProxy(emulator.host, args.firestore_rtt_ms)
    try:
        with_servers(
            listed,
            proxy.host,
            downstream,
            logs,
            lambda servers: measure_rounds(servers, emulator.proc.pid, figures, "_rtt", args),
        )
    finally:
        proxy.stop()


def with_servers(
    listed: list[Contender], firestore: str, downstream: str, logs: Path, measure: Callable[[list[Server]], None]
) -> None:
    """Start the contenders against `firestore`, `measure` them, and stop them whatever happens."""
    servers = [start(c, firestore, downstream, logs) for c in listed]
    try:
        measure(servers)
    finally:
        for server in servers:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--warmup",
        type=int,
        default=500,
        help="deliveries per contender before the rounds (the emulator's JIT needs ~1,000 in all)",
    )
    # A p99 is only as steady as the samples above it: of 200, it is the third-slowest, and one stall
    # of the shared cores moves it; of 1,000, ten samples stand above it.
    parser.add_argument(
        "--latency-requests", type=int, default=1000, help="one-at-a-time fresh deliveries per round, at loopback"
    )
    parser.add_argument(
        "--latency-requests-rtt",
        type=int,
        default=300,
        help="the same with the modelled Firestore round trip (each takes 15-50 ms)",
    )
    parser.add_argument(
        "--throughput-requests", type=int, default=600, help="fresh deliveries per round at --concurrency"
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--memory-deliveries", type=int, default=10_000)
    parser.add_argument("--cold-starts", type=int, default=3)
    parser.add_argument(
        "--firestore-rtt-ms",
        type=float,
        default=5.0,
        help="modelled round trip added to every Firestore call (bench/latency_proxy.py)",
    )
    parser.add_argument(
        "--container",
        action="store_true",
        help="also time podman run -> first 200 (builds this checkout's image with podman first)",
    )
    parser.add_argument("--image", default=IMAGE, help="tag to build and run with --container (default: %(default)s)")
    parser.add_argument(
        "--skip",
        nargs="+",
        default=[],
        choices=["cold-start", "loopback", "memory", "rtt"],
        help="leave these rows out (n/a), e.g. to re-measure CPU quickly after a change; "
        "`--skip loopback rtt` measures the cold starts alone (loopback: the CPU, "
        "throughput, latency and memory rows at loopback)",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny numbers: proves that every row still prints")
    parser.add_argument("--json", type=Path, help="also write every sample here")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.warmup, args.latency_requests, args.throughput_requests = 1, 8, 10, 32
        args.latency_requests_rtt = 10
        args.memory_deliveries, args.cold_starts = 100, 1

    load_before = os.getloadavg()[0]
    logs = Path(tempfile.mkdtemp(prefix="runonce-bench-perf-"))
    listed = contenders()
    names = [c.name for c in listed]
    figures = Figures()
    container_note = "container cold start: not measured (pass --container: podman; builds the image, ~2 min)"
    emulator = start_firestore_emulator(logs)
    downstream = Downstream(logs)
    try:
        if "cold-start" not in args.skip:
            measure_cold_starts(listed, emulator.host, downstream.url, logs, figures, args)
            measure_stack_floor(figures, args.cold_starts)
        if args.container:
            container_note = measure_container_cold_starts(
                emulator.host, downstream.url, figures, args.cold_starts, args.image
            )

        def at_loopback(servers: list[Server]) -> None:
            measure_rounds(servers, emulator.proc.pid, figures, "", args)
            if "memory" not in args.skip:
                measure_memory(servers, figures, args)

        if "loopback" not in args.skip:
            with_servers(listed, emulator.host, downstream.url, logs, at_loopback)
        if "rtt" not in args.skip:
            measure_with_latency(listed, emulator, downstream.url, logs, figures, args)
    finally:
        downstream.stop()
        emulator.stop()

    threads = os.environ.get("THREADS", str((os.cpu_count() or 1) * 4))
    print(
        f"fresh deliveries, Firestore emulator, one local downstream; {args.rounds} round(s) in rotating order, "
        f"medians over rounds; {os.cpu_count()} CPUs, load average {load_before:.1f} at the start and "
        f"{os.getloadavg()[0]:.1f} at the end; seed under functions-framework with {threads} threads"
    )
    for contender in listed:
        print(f"  {contender.name:8} {contender.label}")
    print("\n".join(table(figures, names, args)))
    print(
        "(throughput shares the cores with the emulator, the downstream and this load generator: where the three\n"
        " are level, the machine is the limit; the emulator's CPU row shows the load each puts on it)"
    )
    for name, series in figures.rss.items():
        print(
            f"RSS {name} (MB) after N deliveries: "
            + ", ".join(f"{n}: {mb:.1f}" for n, mb in series)
            + f" -> {rss_verdict(series)}"
        )
    print(container_note)
    print(
        f"floor rows: `{STACK_IMPORTS}` and nothing else, in a fresh Python (the stack's libraries a "
        "delivery to this route needs; the first 200 comes after them)"
    )
    print(f"logs: {logs}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "args": vars(args) | {"json": str(args.json)},
                    "samples": figures.samples,
                    "rss": figures.rss,
                    "container": container_note,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
