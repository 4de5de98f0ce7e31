"""A Cloud-Tasks-shaped burst against several `runonce serve` processes sharing one store.

Each run is a distinct task (`X-CloudTasks-QueueName` + `X-CloudTasks-TaskName`, as Cloud Tasks sends
them) delivered 2 or 3 times, concurrently, each copy to a different instance. Every copy is retried
as Cloud Tasks retries a task (after a 409, 429, 503, 504 or a lost connection) until it gets a 200.
An instance can be killed (SIGKILL) mid-burst: copies in flight to it fail and go to the next one.
Used by tests/test_instances_e2e.py and bench/bench_instances.py."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from runonce.api.answers import ANSWERS, SUCCESSES
from tests.support.downstream import Downstream
from tests.support.procs import REPO, ServerProcess, free_port, require_services, wait_for

PROJECT, LOCATION, QUEUE = "burst-project", "europe-west1", "burst"
ROUTE = "burst"
TABLE = {(answer.http_status, answer.status) for answer in (*ANSWERS.values(), *SUCCESSES)}
"""Every (HTTP status, body status) runonce may answer (runonce/api/answers.py)."""
RETRIED = {409, 429, 502, 503, 504}
"""What Cloud Tasks retries: any status outside 2xx; these are the ones runonce gives under load."""
LOST = (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError)


def server_env(store_env: dict[str, str], downstream: Downstream, lease_seconds: float | None = None) -> dict[str, str]:
    """RUNONCE_* for one instance: no auth (the burst is about the store), an `http` target."""
    routes = {"routes": {ROUTE: {"target": {"type": "http", "url": f"{downstream.url}/{ROUTE}"}}}}
    env = {
        "RUNONCE_AUTH": "none",
        "RUNONCE_ROUTES": json.dumps(routes),
        "RUNONCE_LOG_FORMAT": "text",
        **store_env,
    }
    if lease_seconds is not None:
        # The settings rule: lease >= dispatch + 2 x store timeout + 1 s.
        store_timeout = (lease_seconds - 1 - 2) / 2
        env |= {
            "RUNONCE_LEASE_SECONDS": f"{lease_seconds:g}",
            "RUNONCE_DISPATCH_TIMEOUT_SECONDS": "2",
            "RUNONCE_STORE_TIMEOUT_SECONDS": f"{store_timeout:g}",
        }
    return env


def start_instances(env: dict[str, str], log_dir: Path, count: int, timeout: float = 120) -> list[ServerProcess]:
    """`count` instances of `runonce serve` on the same store: all spawned, then each waited for
    (on a loaded machine a start takes many seconds; starting them one by one would add them up)."""
    require_services("`runonce serve` processes")
    base = {k: v for k, v in os.environ.items() if not k.startswith("RUNONCE_")}
    servers: list[ServerProcess] = []
    for _ in range(count):
        port = free_port()
        log = log_dir / f"runonce-{port}.log"
        args = [sys.executable, "-m", "runonce.cli", "serve", "--port", str(port), "--workers", "1"]
        with log.open("wb") as out:
            proc = subprocess.Popen(args, cwd=REPO, env={**base, **env}, stdout=out, stderr=subprocess.STDOUT)
        servers.append(ServerProcess(proc, port, log, {**base, **env}))
    try:
        for server in servers:
            wait_for(
                lambda server=server: httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200,
                timeout,
                "runonce server",
                server.proc,
                server.log,
            )
    except Exception:
        for server in servers:
            server.stop()
        raise
    return servers


@dataclass
class Outcome:
    """What the burst saw: every answer, the run_id of each task, how long it took."""

    answers: Counter[tuple[int, str]] = field(default_factory=Counter)
    outside_table: list[str] = field(default_factory=list)
    run_ids: dict[str, str] = field(default_factory=dict)  # task name -> run_id from its 200
    lost: int = 0  # connections lost (the killed instance)
    deliveries: int = 0  # copies sent (each until its 200)
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        """Deliveries (copies answered 200) per second."""
        return self.deliveries / self.seconds if self.seconds else 0.0


@dataclass
class Burst:
    """`runs` distinct tasks, each delivered 2 or 3 times (chosen with `seed`)."""

    servers: list[ServerProcess]
    runs: int
    seed: int
    concurrency: int = 48
    prefix: str = "t"
    kill_after: int | None = None  # SIGKILL servers[0] once this many copies were answered 200
    killed: set[int] = field(default_factory=set)

    def plan(self) -> list[tuple[str, int]]:
        """(task name, first instance) per copy; the copies of a run are adjacent so they race."""
        rng = random.Random(self.seed)
        copies: list[tuple[str, int]] = []
        for index in range(self.runs):
            task = f"{self.prefix}-{index}"
            first = rng.randrange(len(self.servers))
            copies += [(task, first + copy) for copy in range(rng.choice([2, 3]))]
        return copies

    async def run(self) -> Outcome:
        outcome = Outcome()
        plan = self.plan()
        done = 0
        gate = asyncio.Semaphore(self.concurrency)
        limits = httpx.Limits(max_connections=self.concurrency * 2, max_keepalive_connections=self.concurrency)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:

            async def deliver(task: str, instance: int) -> None:
                nonlocal done
                attempt = 0
                async with gate:
                    while True:
                        index = self._alive(instance + attempt)
                        server = self.servers[index]
                        headers = {
                            "Content-Type": "application/json",
                            "X-CloudTasks-QueueName": QUEUE,
                            "X-CloudTasks-TaskName": task,
                            "X-CloudTasks-TaskRetryCount": str(attempt),
                            "X-CloudTasks-TaskExecutionCount": str(attempt),
                        }
                        url = f"{server.url}/v1/routes/{ROUTE}:run?project={PROJECT}&location={LOCATION}"
                        attempt += 1
                        try:
                            response = await client.post(url, headers=headers, content=b"{}")
                        except LOST:
                            outcome.lost += 1
                            await asyncio.sleep(0.05)
                            continue
                        status = _body_status(response)
                        outcome.answers[(response.status_code, status)] += 1
                        if (response.status_code, status) not in TABLE:
                            outcome.outside_table.append(f"{response.status_code} {response.text[:300]}")
                        if response.status_code == 200:
                            outcome.run_ids[task] = response.json()["run_id"]
                            done += 1
                            if self.kill_after is not None and done == self.kill_after and not self.killed:
                                self.killed.add(0)
                                self.servers[0].kill()
                            return
                        if response.status_code not in RETRIED or attempt > 400:
                            return  # a final answer Cloud Tasks would not retry into a 200: the test sees it
                        await asyncio.sleep(0.05 + 0.1 * random.random())

            start = time.monotonic()
            await asyncio.gather(*(deliver(task, instance) for task, instance in plan))
            outcome.seconds = time.monotonic() - start
        outcome.deliveries = len(plan)
        return outcome

    def _alive(self, index: int) -> int:
        """The instance at `index` (mod N), or the next one still running."""
        count = len(self.servers)
        for step in range(count):
            candidate = (index + step) % count
            if candidate not in self.killed:
                return candidate
        raise RuntimeError("every instance was killed")


def _body_status(response: httpx.Response) -> str:
    try:
        return str(response.json().get("status", ""))
    except ValueError:
        return ""


def records(server: ServerProcess, run_ids: list[str]) -> Counter[str]:
    """The status of each run's record, counted, as one instance reads them (GET /v1/runs/{id})."""
    statuses: Counter[str] = Counter()
    with httpx.Client(timeout=30) as client:
        for run_id in run_ids:
            response = client.get(f"{server.url}/v1/runs/{run_id}")
            statuses[response.json().get("status", str(response.status_code))] += 1
    return statuses


def calls_so_far(downstream: Downstream) -> int:
    return len(downstream.keys.get(f"/{ROUTE}", []))


def executions(downstream: Downstream, since: int = 0) -> tuple[int, Counter[str]]:
    """(calls the downstream received after the first `since`, calls per Idempotency-Key): a key is
    one execution, since the downstream dedupes by it."""
    keys = Counter(downstream.keys.get(f"/{ROUTE}", [])[since:])
    return sum(keys.values()), keys


def wait(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()
