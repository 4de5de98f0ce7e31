"""One simulated history: a seed draws the settings, the jobs, the tasks and the faults; the
history is played in virtual time against several instances sharing one real store; then the
invariants of issue 10 are checked over everything every party saw. One history in five goes
through the real app (`create_app` over ASGI); the others call `parse_delivery` and the `Runner`
directly and answer with runonce/api/answers.py's status and body, which is five times faster.

Parties and boundaries (a fault can be injected at each `|`):

    Cloud Scheduler / Cloud Tasks --HTTP--> instance (app + Runner) --| store (memory, SQLite, Firestore,
    Pub/Sub push / Eventarc                                             Spanner, Redis)
       retries, attempt deadline,            skewed clock, may crash  --| downstream (reconciles or dedupes)
       duplicates, redelivery                at any boundary (kill -9)

Faults are named by a stable key `op:run_id[:8]:n` (the n-th call of `op` for that run), so a
history replays from (seed, faults) and a fault list can be shrunk one fault at a time.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import hashlib
import json
import random
import shutil
import ssl
import tempfile
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import httpx
from httpx._transports import default as httpx_default

from runonce import errors
from runonce.api.answers import render
from runonce.api.main import create_app
from runonce.metrics import Metrics
from runonce.missed import backfill as backfill_module
from runonce.missed.audit import AUDIT_ROUTE, AuditTarget, ScheduledRun, audit_since, check_audit, scheduled_delivery
from runonce.missed.backfill import catch_up, run_all, run_one, runs_to_backfill
from runonce.routes import load_routes
from runonce.run.delivery import parse_delivery, parse_namespace
from runonce.run.runner import Runner
from runonce.run.sources import parse_event
from runonce.schedules import get_zone
from runonce.settings import LEASE_MARGIN_SECONDS, Settings
from runonce.stores import Claim, Fenced, Finish, NewRun, RunRecord, RunStore, StoreUnavailable
from runonce.stores.base import RunStatus
from runonce.stores.memory import MemoryStore
from runonce.stores.sqlite import SQLiteStore
from runonce.targets import DispatchRequest, Target, TargetFailed, TargetOutcomeUnknown, TargetThrottled

from .check import check
from .vloop import InlineExecutor, VirtualTimeLoop

T = TypeVar("T")
T0 = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)
SIM_WORKFLOW = "projects/sim-project/locations/us-central1/workflows/sim"
NAMESPACE = "project=sim-project&location=us-central1"
QUERY = {"project": ["sim-project"], "location": ["us-central1"]}
BODY = {"mode": "full"}
BODY_SHA256 = hashlib.sha256(json.dumps(BODY, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

# Route -> (forced_runs policy, downstream kind). `reconciles`: creates one execution per call and
# finds earlier ones by run_id (Cloud Run jobs, Cloud Build); `dedupes`: honours the token itself.
ROUTES = {
    "sep": ("separate", "reconciles"),
    "ded": ("dedupe", "reconciles"),
    "rej": ("reject", "dedupes"),
    "tsk": ("separate", "reconciles"),
    "ovs": ("separate", "reconciles"),
    "ovw": ("separate", "reconciles"),
    "lat": ("separate", "reconciles"),
    "pub": ("separate", "reconciles"),
    "cev": ("separate", "reconciles"),
}
EVENT_ROUTES = {"pub": "pubsub", "cev": "cloudevents"}
"""Routes whose deliveries are Pub/Sub pushes and CloudEvents (Eventarc): their executions are events,
redelivered until acked, and one Cloud Storage event may come under several message or event ids."""
OVERLAP = {"ovs": "skip", "ovw": "wait"}
"""Routes with an overlap policy (their downstream's executions run for a while) and the one with
max_lateness_seconds (`lat`); issue 13."""
STORE_FAULTS = ("fail_before_commit", "commit_lose_answer", "commit_then_timeout", "crash_before", "crash_after")
DISPATCH_FAULTS = (
    "fail_before_send",
    "throttled",
    "unknown_after_create",
    "raise_after_create",
    "hang",
    "lose_response",
    "crash_before",
    "crash_after",
)
RECONCILE_FAULTS = ("cannot_tell", "hang", "crash_before", "crash_after")
STATE_FAULTS = ("cannot_tell", "hang", "crash_before", "crash_after")
FIRESTORE_ONLY = ("client_retry_after_commit",)  # below the store interface: the GAPIC call

EXECUTION: contextvars.ContextVar[str] = contextvars.ContextVar("sim_execution", default="?")


# -- what a seed draws ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Retry:
    """Cloud Scheduler's RetryConfig (and Cloud Tasks' RetryConfig: same shape)."""

    count: int
    min_backoff: float
    max_backoff: float
    max_doublings: int
    max_duration: float

    def backoff(self, n: int) -> float:
        """The wait before retry n+1: doubles `max_doublings` times, then grows linearly by the last
        doubled step, capped at `max_backoff` (Scheduler's docs: 10s, 20s, 40s, 80s, 160s, 240s, 300s)."""
        step = self.min_backoff * 2 ** min(n, self.max_doublings)
        linear = max(0, n - self.max_doublings) * self.min_backoff * 2**self.max_doublings
        return min(step + linear, self.max_backoff)

    def gives_up(self, retries_done: int, elapsed: float) -> bool:
        """Retries go on until BOTH the count and the duration are used up."""
        return retries_done >= self.count and elapsed >= self.max_duration


@dataclass(frozen=True)
class Execution:
    """One execution as Cloud Scheduler or Cloud Tasks sees it: its retries share the headers."""

    id: str
    route: str
    headers: dict[str, str]
    start: float  # virtual seconds
    key: tuple[str, str]  # (job, schedule time) or (queue, task): what a run record is about
    forced: bool = False
    tasks: bool = False
    body: bytes = b""  # an event's request body (a push envelope, or a CloudEvent's data)
    event: str | None = None
    """An event's identity as its publisher knows it (one Cloud Storage event under several ids:
    the same `event`); None for Scheduler and Tasks."""


@dataclass(frozen=True)
class CatchUp:
    """A catch-up (after an audit) or a `runonce backfill` of past fire times of one Scheduler job,
    run through an instance's Runner as runonce/missed/backfill.py does: oldest first, one after another;
    `again`: the same backfill is run once more this long after it ended (a re-run)."""

    id: str
    route: str
    job: str
    times: tuple[str, ...]  # schedule times, as the job's X-CloudScheduler-ScheduleTime
    start: float
    again: float | None = None


@dataclass(frozen=True)
class Backfill:
    """An operator's `runonce backfill` (web histories: `POST /v1/routes/{route}:backfill`) of a
    job's route over [first, last) (virtual seconds from T0; the route's fire times are minutely),
    sent at `start`, giving up on runs that wait after `timeout`. `last` after `start` asks for
    fire times not due yet: refused, nothing claimed."""

    id: str
    route: str
    job: str
    start: float
    first: float
    last: float
    timeout: float


@dataclass(frozen=True)
class Audit:
    """The audit job's delivery, sent at `start` with a schedule time `ahead` seconds after it (a
    force run of the audit job carries the next schedule time; an admin may send any), retried as
    Scheduler does on anything but a 200. The routes' `catch_up` (Config.catch_up_policies) follows."""

    id: str
    start: float
    ahead: float
    since: str = "10m"


@dataclass(frozen=True)
class Config:
    seed: int
    store: str
    instances: int
    max_skew: float
    store_timeout: float
    dispatch_timeout: float
    lag: float  # a downstream may act this long after runonce gave up on the request
    lease: float
    retention: float
    tolerance: float
    attempt_deadline: float
    scheduler: Retry
    tasks: Retry
    fault_rate: float
    quiet_at: float  # no fault is injected after this time
    web: bool  # deliveries through the real app over ASGI (else straight to parse_delivery + Runner)
    jobs: tuple[tuple[Execution, ...], ...]  # one serial sequence per Scheduler job
    task_executions: tuple[Execution, ...]
    events: tuple[Execution, ...] = ()
    run_length: float = 0.0  # an execution of an overlap route runs up to this long
    max_lateness: int = 1  # route `lat`
    catch_ups: tuple[CatchUp, ...] = ()
    backfills: tuple[Backfill, ...] = ()
    audits: tuple[Audit, ...] = ()
    catch_up_policies: tuple[tuple[str, str, int], ...] = ()  # (route, catch_up, window seconds) for the audits

    def settings(self) -> Settings:
        routes: dict[str, dict[str, Any]] = {
            name: {"target": {"type": "log"}, "forced_runs": policy} for name, (policy, _) in ROUTES.items()
        }
        for name, overlap in OVERLAP.items():  # a target type that reads state (the sim's own is used)
            routes[name].update(overlap=overlap, target={"type": "workflows", "workflow": SIM_WORKFLOW})
        routes["lat"]["max_lateness_seconds"] = self.max_lateness
        jobs = [(c.route, c.job) for c in self.catch_ups] + [(b.route, b.job) for b in self.backfills]
        jobs += [(route, job) for route, job in self.audited_jobs()]
        for route, job in jobs:  # the fields a route's fire times need a run_id
            routes[route].update(
                job=job,
                schedule="* * * * *",
                body=BODY,
                namespace={"project": QUERY["project"][0], "location": QUERY["location"][0]},
            )
        for route, source in EVENT_ROUTES.items():
            routes[route]["source"] = source
        for route, policy, window in self.catch_up_policies:
            routes[route].update(catch_up=policy, catch_up_window_seconds=window)
        routes = {"routes": routes}
        return Settings(
            routes=json.dumps(routes),
            auth="none",
            store="sqlite:///unused.db",
            lease_seconds=self.lease,
            retention_seconds=self.retention,
            dispatch_timeout_seconds=self.dispatch_timeout,
            store_timeout_seconds=self.store_timeout,
            forced_run_tolerance_seconds=self.tolerance,
        )

    def audited_jobs(self) -> list[tuple[str, str]]:
        """(route, job) of each route the audits catch up: the one job on that route."""
        jobs = {sequence[0].route: sequence[0].key[0] for sequence in self.jobs}
        return [(route, jobs[route]) for route, _, _ in self.catch_up_policies]


def draw_config(seed: int, store: str) -> Config:
    rng = random.Random(seed)
    store_timeout = rng.choice([0.3, 0.5, 1.0])
    dispatch_timeout = rng.choice([0.5, 1.0, 2.0])
    max_skew = rng.choice([0.0, 0.1, 0.5])
    lag = rng.uniform(0, store_timeout)
    # The settings rule (runonce/settings.py, which refuses less): lease covers the dispatch, the store
    # calls around it and its margin; here also both clocks' skew and a downstream that acts late (lag).
    lease = (
        dispatch_timeout + 2 * store_timeout + 2 * max_skew + lag + LEASE_MARGIN_SECONDS + rng.choice([0.0, 0.5, 2.0])
    )
    tolerance = rng.choice([2.0, 5.0])
    attempt_deadline = rng.choice([dispatch_timeout * 0.8, dispatch_timeout + 2 * store_timeout + 0.5, 15.0])

    def retry() -> Retry:
        return Retry(
            count=rng.randint(1, 5),
            min_backoff=rng.uniform(0.2, 3.0),
            max_backoff=rng.choice([5.0, 10.0, 20.0]),
            max_doublings=rng.randint(0, 4),
            max_duration=rng.choice([0.0, 10.0, 30.0, 60.0, 120.0]),
        )

    run_length = rng.choice([10.0, 60.0, 200.0])
    max_lateness = rng.choice([3, 10, 30])
    jobs = []
    for j in range(rng.randint(1, 3)):
        route = rng.choice(["sep", "sep", "ded", "rej", "ovs", "ovw", "lat"])
        period = rng.choice([30.0, 60.0, 120.0])
        first = rng.uniform(5.0, 40.0)
        delay = rng.uniform(0, 2 * max_lateness) if route == "lat" and rng.random() < 0.5 else 0.0  # an outage
        sequence = []
        for k in range(rng.randint(1, 3)):
            s = first + k * period
            text = (T0 + timedelta(seconds=round(s))).strftime("%Y-%m-%dT%H:%M:%SZ")
            headers = {"X-CloudScheduler-JobName": f"job-{j}", "X-CloudScheduler-ScheduleTime": text}
            key = (f"job-{j}", text)
            if rng.random() < 0.4:  # a force run carries the next schedule time and arrives early
                early = round(s) - tolerance - rng.uniform(0.1, 12.0)
                sequence.append(Execution(f"j{j}.{k}.forced", route, headers, max(0.0, early), key, forced=True))
            sequence.append(Execution(f"j{j}.{k}", route, headers, round(s) + delay + rng.uniform(0, 0.3), key))
        jobs.append(tuple(sequence))
    tasks = []
    for t in range(rng.randint(0, 3)):
        name = f"task-{t}"
        headers = {"X-CloudTasks-QueueName": "exports", "X-CloudTasks-TaskName": name}
        tasks.append(Execution(f"t{t}", "tsk", headers, rng.uniform(0, 60.0), ("exports", name), tasks=True))
    return Config(
        catch_ups=draw_catch_ups(seed, jobs),
        backfills=draw_backfills(seed, jobs),
        audits=draw_audits(seed, jobs)[0],
        catch_up_policies=draw_audits(seed, jobs)[1],
        seed=seed,
        store=store,
        instances=rng.randint(1, 3),
        max_skew=max_skew,
        store_timeout=store_timeout,
        dispatch_timeout=dispatch_timeout,
        lag=lag,
        lease=lease,
        retention=100_000.0,
        tolerance=tolerance,
        attempt_deadline=attempt_deadline,
        scheduler=retry(),
        tasks=retry(),
        fault_rate=rng.choice([0.05, 0.15, 0.3]),
        quiet_at=rng.uniform(10.0, 100.0),
        web=rng.random() < 0.2,
        jobs=tuple(jobs),
        task_executions=tuple(tasks),
        events=draw_events(seed),
        run_length=run_length,
        max_lateness=max_lateness,
    )


def draw_events(seed: int) -> tuple[Execution, ...]:
    """Pub/Sub pushes and CloudEvents, from a generator of their own (the other draws stay as they
    were for a seed): plain messages and events, and Cloud Storage events published under 1 to 3
    message or event ids."""
    rng = random.Random(f"{seed}/events")
    found = []
    for n in range(rng.randint(0, 4)):
        route = rng.choice(["pub", "cev"])
        storage = rng.random() < 0.5
        generation = str(1700000000000000 + n)
        obj = {"bucket": "sim-bucket", "name": f"o{n}", "generation": generation, "metageneration": "1"}
        start = rng.uniform(0, 60.0)
        for copy in range(rng.randint(1, 3) if storage else 1):
            event_id = f"{n}-{copy}"
            body, headers = _event_request(route, event_id, obj if storage else {"n": n}, storage)
            ident = f"storage-{n}" if storage else f"event-{n}"
            found.append(
                Execution(
                    f"e{n}.{copy}", route, headers, start + rng.uniform(0, 5.0), (ident, ""), body=body, event=ident
                )
            )
    return tuple(found)


def _event_request(route: str, event_id: str, data: dict[str, Any], storage: bool) -> tuple[bytes, dict[str, str]]:
    """A push envelope (route `pub`) or a binary-mode CloudEvent (`cev`), as Google sends them."""
    published = _stamp(T0)
    if route == "pub":
        attributes = {}
        if storage:
            attributes = {"bucketId": data["bucket"], "objectId": data["name"], "objectGeneration": data["generation"]}
            attributes["eventType"] = "OBJECT_FINALIZE"
        message = {"data": base64.b64encode(json.dumps(data).encode()).decode(), "messageId": event_id}
        message.update(attributes=attributes, publishTime=published)
        envelope = {"message": message, "subscription": "projects/sim-project/subscriptions/sim"}
        return json.dumps(envelope).encode(), {"content-type": "application/json"}
    event_type = "google.cloud.storage.object.v1.finalized" if storage else "com.example.sim"
    headers = {"ce-id": event_id, "ce-source": "//sim", "ce-type": event_type, "ce-specversion": "1.0"}
    headers.update({"ce-time": published, "content-type": "application/json"})
    return json.dumps(data).encode(), headers


def draw_catch_ups(seed: int, jobs: list[tuple[Execution, ...]]) -> tuple[CatchUp, ...]:
    """In one history in three, catch-ups / backfills of some of a job's fire times, at random
    times from just after the first of them: before, during (retries in flight) or after Scheduler's
    execution. Drawn from their own RNG, so a seed's other draws are those it had before. A route
    names one job, so only a job alone on its route is caught up."""
    rng = random.Random(f"{seed}/catch-up")
    if rng.random() >= 1 / 3:
        return ()
    routes = Counter(sequence[0].route for sequence in jobs)
    alone = [sequence for sequence in jobs if routes[sequence[0].route] == 1]
    found = []
    for n in range(rng.randint(1, 3) if alone else 0):
        sequence = rng.choice(alone)
        keys = sorted({e.key[1] for e in sequence})
        times = tuple(rng.sample(keys, rng.randint(1, len(keys))))
        times = tuple(sorted(times)) if rng.random() < 0.8 else times  # a catch-up of `all` is oldest first
        first = min(e.start for e in sequence if e.key[1] == min(times) and not e.forced)
        fired = (datetime.fromisoformat(min(times)) - T0).total_seconds()  # a past time: not before it fired
        start = max(
            fired, first + rng.choice([-1.0, 0.0, 0.0, 2.0, 10.0, 40.0]) + rng.uniform(0, rng.choice([0.3, 2.0]))
        )
        again = rng.choice([None, 0.0, rng.uniform(0, 60.0)]) if rng.random() < 0.5 else None
        found.append(CatchUp(f"c{n}", sequence[0].route, sequence[0].key[0], times, start, again))
    return tuple(found)


def _alone(jobs: list[tuple[Execution, ...]]) -> list[tuple[Execution, ...]]:
    """The job sequences alone on their route (a route names one job)."""
    routes = Counter(sequence[0].route for sequence in jobs)
    return [sequence for sequence in jobs if routes[sequence[0].route] == 1]


def draw_backfills(seed: int, jobs: list[tuple[Execution, ...]]) -> tuple[Backfill, ...]:
    """In one history in four, one or two operators' backfills of a job's route, over a few of its
    (minutely) fire times, often on an overlap route. Drawn from their own RNG, so a seed's other
    draws are those it had before."""
    rng = random.Random(f"{seed}/backfill")
    alone = _alone(jobs)
    if rng.random() >= 1 / 4 or not alone:
        return ()
    found = []
    overlap = [sequence for sequence in alone if sequence[0].route in OVERLAP]
    for n in range(rng.randint(1, 2)):
        sequence = rng.choice(overlap if overlap and rng.random() < 0.6 else alone)
        start = rng.uniform(120.0, 360.0)
        first = rng.choice([0.0, 60.0, 120.0]) + rng.choice([0.0, rng.uniform(0, 59.0)])
        first = min(first, start - 2.0)
        last = min(first + rng.choice([60.0, 180.0, 300.0]), start - 1.0)  # due on every instance's clock
        if rng.random() < 0.1:
            last = start + rng.uniform(1.0, 120.0)  # fire times not due yet: refused
        timeout = rng.choice([1.0, 10.0, 60.0, 300.0])
        found.append(Backfill(f"b{n}", sequence[0].route, sequence[0].key[0], start, first, last, timeout))
    return tuple(found)


def draw_audits(
    seed: int, jobs: list[tuple[Execution, ...]]
) -> tuple[tuple[Audit, ...], tuple[tuple[str, str, int], ...]]:
    """In one history in four, audits (some force runs with a future schedule time) and a
    `catch_up` policy on one or two routes alone with their job."""
    rng = random.Random(f"{seed}/audit")
    alone = _alone(jobs)
    if rng.random() >= 1 / 4 or not alone:
        return (), ()
    routes = sorted({sequence[0].route for sequence in rng.sample(alone, rng.randint(1, min(2, len(alone))))})
    # A window of minutes, so a catch-up reaches the times Scheduler's own executions run at.
    policies = tuple((route, rng.choice(["latest", "all"]), rng.choice([120, 600, 1800])) for route in routes)
    audits = tuple(
        Audit(f"a{n}", rng.uniform(30.0, 360.0), rng.choice([0.0, 3.0, 3120.0, 259_200.0]), rng.choice(["10m", "1h"]))
        for n in range(rng.randint(1, 2))
    )
    return audits, policies


# -- faults --------------------------------------------------------------------------------------


class Faults:
    """Decides the fault (or none) at each boundary. Random mode draws from a per-key RNG, so a
    decision never depends on the order of other decisions; replay mode injects exactly `given`."""

    def __init__(self, config: Config, loop: asyncio.AbstractEventLoop, given: dict[str, str] | None = None):
        self.config, self.loop, self.given = config, loop, given
        self.injected: dict[str, str] = {}
        self._calls: Counter[str] = Counter()

    def pick(self, op: str, run_id: str, kinds: tuple[str, ...]) -> tuple[str, str | None]:
        base = f"{op}:{run_id[:8]}"
        self._calls[base] += 1
        key = f"{base}:{self._calls[base]}"
        if self.given is not None:
            fault = self.given.get(key)
        else:
            rng = random.Random(f"{self.config.seed}/{key}")
            late = self.loop.time() >= self.config.quiet_at
            fault = None if late or rng.random() >= self.config.fault_rate else rng.choice(kinds)
        if fault is not None:
            self.injected[key] = fault
        return key, fault

    def rng(self, key: str) -> random.Random:
        return random.Random(f"{self.config.seed}/{key}/draw")


# -- the parties ---------------------------------------------------------------------------------


@dataclass
class Downstream:
    """The system behind a route. Counts every execution it starts, with the Scheduler/Tasks
    execution whose delivery caused it."""

    route: str
    kind: str
    executions: dict[str, list[tuple[str, float, str]]] = field(default_factory=dict)
    seed: int = 0
    run_length: float = 0.0  # how long an execution may run (draw per execution)
    ends: dict[str, float] = field(default_factory=dict)  # resource -> when it stops running

    def create(self, run_id: str, now: float, origin: str) -> str:
        found = self.executions.get(run_id)
        if self.kind == "dedupes" and found:
            return found[0][0]
        n = len(found or ())
        resource = f"{self.route}/{run_id[:8]}.{n}"
        self.executions.setdefault(run_id, []).append((resource, now, origin))
        self.ends[resource] = now + random.Random(f"{self.seed}/{resource}/length").uniform(0, self.run_length)
        return resource

    def find(self, run_id: str) -> str | None:
        found = self.executions.get(run_id)
        return found[0][0] if found else None


async def _forever() -> None:
    await asyncio.get_running_loop().create_future()


class Instance:
    """One runonce process: the real app over a fault-injecting store and the simulated targets."""

    def __init__(self, world: World, name: str):
        self.world, self.name = world, name
        self.skew = random.Random(f"{world.config.seed}/{name}").uniform(-world.config.max_skew, world.config.max_skew)
        self.dead = False
        self.inner = world.open_store()
        self.store = FaultyStore(self.inner, self)
        targets = {route: SimTarget(self, world.downstreams[route]) for route in ROUTES}
        self._stack = AsyncExitStack()
        self.client: httpx.AsyncClient | None = None
        settings = world.settings
        if world.config.web:
            self.app = create_app(settings, store=self.store, targets=targets, clock=self.clock)
        else:  # the Runner as create_app's lifespan builds it
            targets[AUDIT_ROUTE] = AuditTarget(  # type: ignore[assignment]
                self.store,
                world.routes,
                lease=timedelta(seconds=settings.lease_seconds),
                retention=timedelta(seconds=settings.retention_seconds),
                clock=self.clock,
                metrics=Metrics(),
            )
            self.runner = Runner(
                self.store,
                targets,
                routes=world.routes,
                lease=timedelta(seconds=settings.lease_seconds),
                retention=timedelta(seconds=settings.retention_seconds),
                dispatch_timeout=timedelta(seconds=settings.dispatch_timeout_seconds),
                clock=self.clock,
            )

    def clock(self) -> datetime:
        return T0 + timedelta(seconds=self.world.loop.time() + self.skew)

    async def start(self) -> None:
        if not self.world.config.web:
            return
        await self._stack.enter_async_context(self.app.router.lifespan_context(self.app))
        self.client = await self._stack.enter_async_context(
            httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://runonce")
        )

    async def stop(self) -> None:
        if not self.dead and self.world.config.web:
            await self._stack.aclose()  # the app's lifespan closes the store
        else:
            await self.inner.close()  # the OS would close a killed process's files (and the Runner has no lifespan)

    async def deliver(self, execution: Execution, headers: dict[str, str]) -> Answer:
        started = self.world.loop.time()
        try:
            if self.client is not None and execution.event is not None:
                response = await self.client.post(
                    f"/v1/routes/{execution.route}:run?{NAMESPACE}", headers=headers, content=execution.body
                )
                code, body = response.status_code, response.json()
            elif self.client is not None:
                response = await self.client.post(
                    f"/v1/routes/{execution.route}:run?{NAMESPACE}", headers=headers, json=BODY
                )
                code, body = response.status_code, response.json()
            else:
                code, body = await self._run(execution, headers)
        except Exception as exc:  # noqa: BLE001 - an exception out of the app is a 500
            code, body = 500, {"status": "internal_error", "error": {"message": repr(exc)}}
        answer = Answer(execution.id, self.name, started, self.world.loop.time(), code, body)
        self.world.answers.append(answer)
        return answer

    async def _run(self, execution: Execution, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """What `api.deliveries.deliver` does, without HTTP: parse, run, and answer with the status
        and body that runonce/api/answers.py gives each outcome (the web histories go through the app itself)."""
        route = execution.route
        try:
            namespace = parse_namespace(QUERY, None)
            events = self.world.routes[route].events
            if events is not None:
                delivery, payload, body_sha256 = parse_event(events, route, headers, execution.body, namespace)
                result = await self.runner.run(delivery, payload, body_sha256)
                return 200, result.body()
            delivery = parse_delivery(
                route,
                headers,
                namespace,
                received_at=self.clock(),
                forced_run_tolerance=timedelta(seconds=self.world.settings.forced_run_tolerance_seconds),
                policy=self.world.policies[route],
            )
            result = await self.runner.run(delivery, BODY, BODY_SHA256)
        except errors.DeliveryError as exc:
            if exc.route is None:
                exc.route = route
            answer = render(exc)
            return answer.http_status, answer.body
        return 200, result.body()

    async def catch_up(self, catch_up: CatchUp, time: str, rerun: bool) -> CaughtUp:
        """One fire time through this instance's Runner as `backfill.run_one` does (late_ok), with the
        delivery `audit.scheduled_delivery` builds (Scheduler's run_id), answered as the API would."""
        world = self.world
        route = world.routes[catch_up.route]
        run = ScheduledRun(
            scheduled_delivery(catch_up.route, route, datetime.fromisoformat(time)), get_zone(route.time_zone)
        )
        runner = self.app.state.runner if world.config.web else self.runner
        world.caught_up_runs.add(run.run_id)
        started = world.loop.time()
        outcome = await run_one(runner, run, route)
        if outcome.result is not None:
            code, body = 200, outcome.result.body()
        else:
            assert outcome.error is not None
            answer = render(outcome.error)
            code, body = answer.http_status, answer.body
        answered = Answer(catch_up.id, self.name, started, world.loop.time(), code, body)
        world.answers.append(answered)
        # Read back at once (no fault, no time passes) what it left of its run and of the run it was
        # answered for (a force run for the same time, while that one is unresolved: protocol._claim).
        records = []
        for run_id in dict.fromkeys([run.run_id, body.get("run_id") or run.run_id]):
            records.append(await world.store_io(lambda run_id=run_id: self.inner.get(run_id, self.clock())))
        return CaughtUp(catch_up, time, run.run_id, answered, tuple(r for r in records if r is not None), rerun)

    async def backfill(self, backfill: Backfill) -> list[Answer]:
        """The operator's backfill: over HTTP as `POST :backfill` (web histories), else as `runonce
        backfill` does (`run_all` on a Runner built like serve's). One answer per fire time run,
        as a delivery of it would have been answered; a refused range is one answer for them all."""
        world = self.world
        route = world.routes[backfill.route]
        start, end = (T0 + timedelta(seconds=backfill.first), T0 + timedelta(seconds=backfill.last))
        sent = world.loop.time()
        if self.client is not None:
            body = {"from": _stamp(start), "to": _stamp(end), "timeout": f"{max(1, round(backfill.timeout))}s"}
            response = await self.client.post(f"/v1/routes/{backfill.route}:backfill", json=body)
            code, found = response.status_code, response.json()
            if code != 200:
                return [Answer(backfill.id, self.name, sent, world.loop.time(), code, found)]
            rows = found["runs"]
        else:
            try:
                runs = runs_to_backfill(backfill.route, route, start, end, self.clock())
            except errors.DeliveryError as exc:
                answer = render(exc)
                return [Answer(backfill.id, self.name, sent, world.loop.time(), answer.http_status, answer.body)]
            timeout = timedelta(seconds=backfill.timeout)
            waited: dict[str, float] = {}  # run_id -> when it was first answered waiting

            def waiting(outcome: Any) -> None:
                waited[outcome.run.run_id] = world.loop.time()

            outcomes = await run_all(self.runner, runs, route, concurrency=4, timeout=timeout, waiting=waiting)
            rows = [{**outcome.to_json(), "waited_at": waited.get(outcome.run.run_id)} for outcome in outcomes]
        answers = []
        for row in rows:
            world.caught_up_runs.add(row["run_id"])
            if row["outcome"] == "not_started":
                continue
            code = 200 if row["outcome"] in ("processed", "duplicate", "skipped") else _http_status(row["outcome"])
            answer = {"run_id": row["run_id"], "status": row["outcome"], "route": backfill.route}
            answer["schedule_time"] = row["schedule_time"]
            if "resource" in row:
                answer["target"] = {"type": SimTarget.type, "resource": row["resource"]}
            answer.update({key: row[key] for key in ("reason", "message") if key in row})
            if row.get("waited_at") is not None:
                answer["waited_at"] = row["waited_at"]
            answers.append(Answer(backfill.id, self.name, sent, world.loop.time(), code, answer))
        return answers

    async def audit(self, audit: Audit, schedule_time: str) -> tuple[Answer, list[Answer], RunRecord | None]:
        """One delivery of the audit job, through `POST /v1/audit:run` (web) or as that endpoint
        does it; its answer, one answer per run it caught up, and its run's record right after."""
        world = self.world
        headers = {"X-CloudScheduler-JobName": "runonce-audit", "X-CloudScheduler-ScheduleTime": schedule_time}
        sent = world.loop.time()
        caught: list[dict[str, Any]] = []
        try:
            if self.client is not None:
                response = await self.client.post(
                    f"/v1/audit:run?{NAMESPACE}", headers=headers, json={"since": audit.since}
                )
                code, body = response.status_code, response.json()
                caught = body.get("caught_up", [])
            else:
                code, body, caught = await self._audit(headers, audit)
        except Exception as exc:  # noqa: BLE001 - an exception out of the app is a 500
            code, body = 500, {"status": "internal_error", "error": {"message": repr(exc)}}
        answered = world.loop.time()
        answer = Answer(audit.id, self.name, sent, answered, code, body)
        # The audit run's record, right after: keyed as the endpoint keyed it (an error answer may name no run).
        run_id = body.get("run_id") or self._audit_run_id(headers, sent)
        record = await world.store_io(lambda: self.inner.get(run_id, self.clock()))
        if not body.get("run_id"):
            answer.body["audit_run_id"] = run_id
        runs = []
        for row in caught:
            world.caught_up_runs.add(row["run_id"])
            status = row["outcome"]
            code = 200 if status in ("processed", "duplicate", "skipped") else _http_status(status)
            found = {"run_id": row["run_id"], "status": status, "route": row["route"]}
            found["schedule_time"] = row["schedule_time"]
            if "resource" in row:
                found["target"] = {"type": SimTarget.type, "resource": row["resource"]}
            found.update({key: row[key] for key in ("reason", "message") if key in row})
            runs.append(Answer(audit.id, self.name, sent, answered, code, found))
        return answer, runs, record

    def _audit_run_id(self, headers: dict[str, str], sent: float) -> str:
        """The run_id the audit endpoint gives this delivery, received at `sent` on this instance's clock."""
        received = T0 + timedelta(seconds=sent + self.skew)
        tolerance = timedelta(seconds=self.world.settings.forced_run_tolerance_seconds)
        return parse_delivery(AUDIT_ROUTE, headers, parse_namespace(QUERY, None), received, tolerance).run_id

    async def _audit(self, headers: dict[str, str], audit: Audit) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
        """What `api.missed.run_audit` does, without HTTP."""
        world = self.world
        payload = {"since": audit.since}
        try:
            delivery = parse_delivery(
                AUDIT_ROUTE,
                headers,
                parse_namespace(QUERY, None),
                received_at=self.clock(),
                forced_run_tolerance=timedelta(seconds=world.settings.forced_run_tolerance_seconds),
            )
            assert delivery.schedule_time is not None
            check_audit(
                world.routes,
                delivery.schedule_time,
                self.clock(),
                audit_since(payload),
                lease=self.runner.lease,
                retention=self.runner.retention,
            )
            result = await self.runner.run(delivery, payload, _sha256(payload))
        except errors.DeliveryError as exc:
            if exc.route is None:
                exc.route = AUDIT_ROUTE
            answer = render(exc)
            return answer.http_status, answer.body, []
        body = result.body()
        audit_target: AuditTarget = self.runner.targets[AUDIT_ROUTE]  # type: ignore[assignment]
        audit_target.reports.pop(result.record.run_id, None)
        caught = []
        if result.status == "processed":
            now = self.clock()
            outcomes = await catch_up(
                self.runner,
                self.store,
                dict(world.routes),
                min(delivery.schedule_time, now),
                now,
                lease=self.runner.lease,
                retention=self.runner.retention,
            )
            caught = [outcome.to_json() for outcome in outcomes]
        return 200, body, caught

    async def boundary(self, fault: str | None) -> None:
        """Crash here if told to (or if the process already died): nothing after this runs."""
        if fault in ("crash_before", "crash_after"):
            self.world.kill(self)
        if self.dead:
            await self.world.freeze()


class FaultyStore(RunStore):
    """The store interface with faults: fail before the commit, commit then lose the answer, commit
    then time out, crash before or after. Latency is drawn per call."""

    def __init__(self, inner: RunStore, instance: Instance):
        self.inner, self.instance = inner, instance
        self.world = instance.world
        self.lose_next_commit = False
        self.landed = 0  # Firestore commits of the current call that took effect (seen at the GAPIC call)
        owner = getattr(inner, "_sim_owner", None)
        if owner is not None:
            owner.append(self)

    async def _call(self, op: str, run_id: str, call: Callable[[], Awaitable[T]]) -> T:
        world = self.world
        kinds = STORE_FAULTS + (FIRESTORE_ONLY if world.config.store == "firestore" and op != "get" else ())
        key, fault = world.faults.pick(op, run_id, kinds)
        await self.instance.boundary("crash_before" if fault == "crash_before" else None)
        await asyncio.sleep(world.faults.rng(key).uniform(0, world.config.store_timeout / 10))
        if fault == "fail_before_commit":
            raise StoreUnavailable(f"simulated: {op} failed before the commit")
        self.lose_next_commit = fault == "client_retry_after_commit"
        self.landed = 0
        try:
            result = await world.store_io(call)
        except Fenced:
            self._own_write_check(op, run_id, "Fenced")
            raise
        self._own_write_check(op, run_id, result)
        if fault == "commit_lose_answer":
            raise StoreUnavailable(f"simulated: {op} committed, the answer was lost")
        if fault == "commit_then_timeout":
            await asyncio.sleep(world.config.store_timeout)
            raise StoreUnavailable(f"simulated: {op} committed, then timed out")
        await self.instance.boundary("crash_after" if fault == "crash_after" else None)
        return result

    def _own_write_check(self, op: str, run_id: str, result: object) -> None:
        """A call whose own conditional write took effect must not report someone else's: a claim
        BUSY for its own claim, a finish fenced by its own finish, a release that released nothing
        (each costs the run a whole extra lease: issue 10, defect 3)."""
        lost = (
            (op == "claim" and isinstance(result, Claim) and not result.won)
            or (op == "finish" and result == "Fenced")
            or (op == "release" and result is None)
        )
        if self.landed and lost:
            outcome = result.decision.value if isinstance(result, Claim) else result
            self.world.violations.append(
                f"I2 {op} of run {run_id[:8]}: its own write landed, yet it reported {outcome}"
            )

    async def claim(self, new: NewRun, now: datetime, lease: timedelta, retention: timedelta) -> Claim:
        return await self._call("claim", new.run_id, lambda: self.inner.claim(new, now, lease, retention))

    async def finish(self, claim: Claim, finish: Finish, now: datetime) -> RunRecord:
        return await self._call("finish", claim.record.run_id, lambda: self.inner.finish(claim, finish, now))

    async def get(self, run_id: str, now: datetime) -> RunRecord | None:
        return await self._call("get", run_id, lambda: self.inner.get(run_id, now))

    async def release(self, run_id: str, now: datetime) -> RunRecord | None:
        return await self._call("release", run_id, lambda: self.inner.release(run_id, now))

    async def load(self, run_id: str) -> tuple[RunRecord, Any] | None:  # unused: every operation above is wrapped
        return await self.inner.load(run_id)

    async def list(
        self, now: datetime, route: str | None = None, status: RunStatus | None = None, limit: int = 50
    ) -> list[RunRecord]:
        # On the delivery path since overlap (issue 13): faults as any store call, keyed by route.
        return await self._call("list", route or "-", lambda: self.inner.list(now, route, status, limit))

    async def ping(self) -> None:
        await self.inner.ping()

    async def close(self) -> None:
        await self.inner.close()


class SimTarget(Target):
    """A target in front of a `Downstream`, with faults: fail before sending, throttled, fail or
    raise after creating, hang (the downstream may still act, up to `lag` after the deadline), lose
    the response, crash before or after; reconciliation that cannot tell or hangs."""

    type = "sim"

    def __init__(self, instance: Instance, downstream: Downstream):
        self.instance, self.downstream = instance, downstream
        self.world = instance.world

    async def dispatch(self, request: DispatchRequest) -> str:
        world, loop = self.world, self.world.loop
        key, fault = world.faults.pick("dispatch", request.run_id, DISPATCH_FAULTS)
        await self.instance.boundary("crash_before" if fault == "crash_before" else None)
        draw = world.faults.rng(key)
        await asyncio.sleep(draw.uniform(0, world.config.dispatch_timeout / 10))
        origin = EXECUTION.get()
        if fault == "fail_before_send":
            raise TargetFailed("simulated: connection refused before sending")
        if fault == "throttled":
            raise TargetThrottled("simulated: 429", retry_after=1.0)
        if fault == "hang":  # the request is on its way: the downstream acts at some point, or never
            if draw.random() < 0.7:
                delay = draw.uniform(0, world.config.dispatch_timeout + world.config.lag)
                loop.call_later(delay, lambda: self.downstream.create(request.run_id, loop.time(), origin))
            await _forever()
        resource = self.downstream.create(request.run_id, loop.time(), origin)
        if fault == "unknown_after_create":
            raise TargetOutcomeUnknown("simulated: connection reset after sending")
        if fault == "raise_after_create":
            raise RuntimeError("simulated: adapter bug after the request was sent")
        if fault == "lose_response":
            await _forever()
        await self.instance.boundary("crash_after" if fault == "crash_after" else None)
        return resource

    async def reconcile(self, request: DispatchRequest) -> str | None:
        if self.downstream.kind == "dedupes":
            return None  # the default: the downstream honours the token, dispatching again is safe
        _key, fault = self.world.faults.pick("reconcile", request.run_id, RECONCILE_FAULTS)
        await self.instance.boundary("crash_before" if fault == "crash_before" else None)
        if fault == "cannot_tell":
            raise TargetOutcomeUnknown("simulated: the listing failed")
        if fault == "hang":
            await _forever()
        found = self.downstream.find(request.run_id)
        await self.instance.boundary("crash_after" if fault == "crash_after" else None)
        return found

    async def is_running(self, resource: str) -> bool:
        _key, fault = self.world.faults.pick("state", resource.split("/")[1], STATE_FAULTS)
        await self.instance.boundary("crash_before" if fault == "crash_before" else None)
        self.world.covered["state reads"] += 1
        if fault == "cannot_tell":
            raise TargetOutcomeUnknown("simulated: the state read failed")
        if fault == "hang":
            await _forever()
        running = self.world.loop.time() < self.downstream.ends[resource]
        await self.instance.boundary("crash_after" if fault == "crash_after" else None)
        return running


@dataclass(frozen=True)
class Answer:
    execution: str
    instance: str
    sent: float
    answered: float
    code: int
    body: dict[str, Any]

    @property
    def status(self) -> str:
        return str(self.body.get("status"))

    @property
    def ok(self) -> bool:
        return self.code == 200


@dataclass(frozen=True)
class CaughtUp:
    """What one catch-up / backfill run of one fire time came to, and the record right after it."""

    catch_up: CatchUp
    time: str
    run_id: str
    answer: Answer
    records: tuple[RunRecord, ...]  # right after it ended: its run's, and the one it was answered for
    rerun: bool  # the second run of the same backfill


@dataclass
class Outcome:
    """What Scheduler / Tasks saw of one execution."""

    execution: Execution
    attempts: list[tuple[float, Answer | None]] = field(default_factory=list)  # None: no answer in time
    succeeded: bool = False
    # attempt index -> the request Scheduler / Tasks stopped waiting for (its answer may come later)
    abandoned: dict[int, asyncio.Task[Answer]] = field(default_factory=dict)

    def late_answer(self, index: int) -> Answer | None:
        """What runonce answered attempt `index` after the attempt deadline ran out, if it did."""
        task = self.abandoned.get(index)
        return task.result() if task is not None and task.done() and not task.cancelled() else None


# -- the world -----------------------------------------------------------------------------------


class World:
    def __init__(self, config: Config, loop: VirtualTimeLoop, faults: dict[str, str] | None = None):
        self.config, self.loop = config, loop
        self.settings = config.settings()
        routes = self.routes = load_routes(self.settings)
        self.policies = {name: route.policy for name, route in routes.items()}
        self.guards = {name: route.guard for name, route in routes.items()}
        self.faults = Faults(config, loop, faults)
        self.downstreams = {
            route: Downstream(route, kind, seed=config.seed, run_length=config.run_length if route in OVERLAP else 0.0)
            for route, (_, kind) in ROUTES.items()
        }
        self.answers: list[Answer] = []
        self.violations: list[str] = []  # seen while the history runs (the rest are checked at the end)
        self.covered: Counter[str] = Counter()
        self.outcomes: dict[str, Outcome] = {}
        self.caught_up: list[CaughtUp] = []  # catch-up / backfill runs that ended (not crashed)
        self.caught_up_runs: set[str] = set()  # every run_id a catch-up / backfill touched
        self.audits: list[tuple[Answer, RunRecord | None]] = []  # each audit answer, and its run's record right after
        self.requests: dict[asyncio.Task[Answer], Instance] = {}
        self.frozen: set[asyncio.Task[Any]] = set()
        self.instances: list[Instance] = []
        self.slots: list[Instance | None] = []
        self.crashes = 0
        self._tmp = tempfile.mkdtemp(prefix="runonce-sim-", dir=_fast_tmp())
        self._memory = MemoryStore()
        self._collection = f"sim_{config.seed}_{uuid.uuid4().hex[:8]}"
        self._io_lock = asyncio.Lock()

    # stores

    def open_store(self) -> RunStore:
        """Another handle on the one shared store, as another process would open it."""
        if self.config.store == "memory":
            return self._memory
        if self.config.store == "sqlite":
            store = SQLiteStore(f"{self._tmp}/runs.db", timeout_seconds=self.config.store_timeout)
            store._executor.shutdown()
            store._executor = InlineExecutor()  # type: ignore[assignment]
            return store
        if self.config.store in SERVER_STORES:
            from runonce.stores import open_store

            return open_store(server_store_url(self.config.store), timeout_seconds=self.config.store_timeout)
        from runonce.stores.firestore import FirestoreStore

        store = FirestoreStore(
            project="runonce-sim", collection=self._collection, timeout_seconds=self.config.store_timeout
        )
        _arm_lost_commit(store)
        return store

    async def store_io(self, call: Callable[[], Awaitable[T]]) -> T:
        """Firestore, Spanner and Redis calls are real network calls: one at a time (a fixed order)
        with virtual time standing still while they run."""
        if self.config.store in ("memory", "sqlite"):
            return await call()
        async with self._io_lock:
            self.loop.io_busy += 1
            try:
                return await call()
            finally:
                self.loop.io_busy -= 1

    # instances

    async def start_instance(self, slot: int) -> None:
        instance = Instance(self, f"i{slot}.{len(self.instances)}")
        self.instances.append(instance)
        await instance.start()
        self.slots[slot] = instance

    def kill(self, instance: Instance) -> None:
        if instance.dead:
            return
        instance.dead = True
        self.crashes += 1
        slot = self.slots.index(instance)
        self.slots[slot] = None
        restart = random.Random(f"{self.config.seed}/{instance.name}/restart").uniform(0.5, 5.0)
        self.loop.call_later(restart, lambda: self.loop.create_task(self.start_instance(slot)))

    async def freeze(self) -> None:
        """kill -9: this coroutine never runs again, and no finally/except of it runs either (it is
        kept referenced until the history is checked, and a cancellation is swallowed here)."""
        task = asyncio.current_task()
        assert task is not None
        self.frozen.add(task)
        while True:
            try:
                await self.loop.create_future()
            except asyncio.CancelledError:
                continue

    # Scheduler and Cloud Tasks

    async def deliver(
        self, execution: Execution, headers: dict[str, str], rng: random.Random
    ) -> tuple[Answer | None, asyncio.Task[Answer] | None]:
        """One HTTP attempt: to a live instance, waiting at most the attempt deadline. Returns the
        answer, or None and the request left running when the deadline ran out first."""
        live = [i for i in self.slots if i is not None and not i.dead]
        if not live:
            return None, None  # no instance: connection refused
        instance = rng.choice(live)
        context = contextvars.copy_context()
        context.run(EXECUTION.set, execution.id)
        task = self.loop.create_task(instance.deliver(execution, headers), context=context)
        self.requests[task] = instance
        if rng.random() < 0.05:  # at-least-once: now and then the same attempt arrives twice
            twin = self.loop.create_task(instance.deliver(execution, headers), context=context)
            self.requests[twin] = instance
        done, _ = await asyncio.wait({task}, timeout=self.config.attempt_deadline)
        return (task.result(), None) if task in done else (None, task)

    async def run_execution(self, execution: Execution) -> None:
        policy = self.config.tasks if execution.tasks or execution.event else self.config.scheduler
        outcome = self.outcomes[execution.id] = Outcome(execution)
        first, retries = self.loop.time(), 0
        while True:
            rng = random.Random(f"{self.config.seed}/{execution.id}/{retries}")
            headers = dict(execution.headers)
            if execution.tasks:
                headers["X-CloudTasks-TaskRetryCount"] = str(retries)
                headers["X-CloudTasks-TaskExecutionCount"] = str(sum(1 for _, a in outcome.attempts if a is not None))
            now = self.loop.time()
            answer, abandoned = await self.deliver(execution, headers, rng)
            if abandoned is not None:
                outcome.abandoned[len(outcome.attempts)] = abandoned
            outcome.attempts.append((now, answer))
            if answer is not None and answer.ok:
                outcome.succeeded = True
                break
            if policy.gives_up(retries, self.loop.time() - first):
                break
            await asyncio.sleep(policy.backoff(retries))
            retries += 1
        if execution.tasks or execution.event:
            rng = random.Random(f"{self.config.seed}/{execution.id}/redelivery")
            if rng.random() < 0.3:  # Cloud Tasks and Pub/Sub deliver at least once: sometimes once more
                await asyncio.sleep(rng.uniform(0, 20.0))
                await self.deliver(execution, dict(execution.headers), rng)

    async def run_job(self, sequence: tuple[Execution, ...]) -> None:
        """A Scheduler job never has two executions outstanding: each waits for the one before."""
        for execution in sequence:
            await asyncio.sleep(max(0.0, execution.start - self.loop.time()))
            await self.run_execution(execution)

    async def run_task(self, execution: Execution) -> None:
        await asyncio.sleep(execution.start)
        await self.run_execution(execution)

    async def run_catch_up(self, catch_up: CatchUp) -> None:
        """The catch-up's fire times one after another on a live instance (a crash ends it: as a
        killed `runonce backfill`); then, for a re-run, the same again."""
        await asyncio.sleep(catch_up.start)
        for round_ in range(1 if catch_up.again is None else 2):
            if round_:
                await asyncio.sleep(catch_up.again or 0.0)
            live = [i for i in self.slots if i is not None and not i.dead]
            if not live:
                continue  # no instance up: this backfill could not start
            instance = random.Random(f"{self.config.seed}/{catch_up.id}/{round_}").choice(live)
            context = contextvars.copy_context()
            context.run(EXECUTION.set, catch_up.id)
            for time in catch_up.times:
                task = self.loop.create_task(instance.catch_up(catch_up, time, bool(round_)), context=context)
                self.requests[task] = instance  # type: ignore[assignment]
                while not task.done() and not instance.dead:  # a crash freezes it for good
                    await asyncio.wait({task}, timeout=1.0)
                if not task.done():
                    break
                self.caught_up.append(task.result())

    async def _on_live_instance(self, key: str, work: Callable[[Instance], Awaitable[T]]) -> T | None:
        """`work` on a live instance, until it ends or that instance crashes (None: frozen for good)."""
        live = [i for i in self.slots if i is not None and not i.dead]
        if not live:
            return None
        instance = random.Random(f"{self.config.seed}/{key}").choice(live)
        context = contextvars.copy_context()
        context.run(EXECUTION.set, key.split("/")[0])
        task = self.loop.create_task(work(instance), context=context)  # type: ignore[arg-type]
        self.requests[task] = instance  # type: ignore[index]
        while not task.done() and not instance.dead:  # a crash freezes it for good
            await asyncio.wait({task}, timeout=1.0)
        return task.result() if task.done() else None

    def _run_of(self, origin: str, route: str, answer: Answer) -> CaughtUp:
        """A backfill's or an audit catch-up's run, for the catch-up invariants (I9, I10), keyed by
        its route's job and fire time (its record is not read right after: no I11)."""
        job = self.routes[route].job
        assert job is not None
        catch_up = CatchUp(origin, route, job, (), answer.sent)
        return CaughtUp(catch_up, answer.body["schedule_time"], answer.body["run_id"], answer, (), False)

    async def run_backfill(self, backfill: Backfill) -> None:
        await asyncio.sleep(backfill.start)
        answers = await self._on_live_instance(f"{backfill.id}/0", lambda instance: instance.backfill(backfill))
        for answer in answers or ():
            self.answers.append(answer)
            self.covered[f"backfill runs {answer.status}"] += 1
            if answer.body.get("schedule_time"):
                self.caught_up.append(self._run_of(backfill.id, backfill.route, answer))

    async def run_audit(self, audit: Audit) -> None:
        """The audit job's execution, retried as Scheduler does until it gets a 200 (at most 4 tries)."""
        await asyncio.sleep(audit.start)
        schedule_time = _stamp(T0 + timedelta(seconds=round(self.loop.time() + audit.ahead)))
        for attempt in range(4):
            found = await self._on_live_instance(
                f"{audit.id}/{attempt}", lambda instance: instance.audit(audit, schedule_time)
            )
            if found is not None:
                answer, runs, record = found
                self.answers.append(answer)
                self.answers.extend(runs)
                self.audits.append((answer, record))
                for run in runs:
                    self.caught_up.append(self._run_of(audit.id, run.body["route"], run))
                self.covered[f"audit answers {answer.status}"] += 1
                self.covered["audit catch-up runs"] += len(runs)
                if answer.ok:
                    return
            await asyncio.sleep(2.0 * (attempt + 1))

    async def play(self) -> None:
        self.slots = [None] * self.config.instances
        for slot in range(self.config.instances):
            await self.start_instance(slot)
        parties = [self.run_job(seq) for seq in self.config.jobs] + [
            self.run_task(t) for t in (*self.config.task_executions, *self.config.events)
        ]
        parties += [self.run_catch_up(c) for c in self.config.catch_ups]
        parties += [self.run_backfill(b) for b in self.config.backfills]
        parties += [self.run_audit(a) for a in self.config.audits]
        await asyncio.gather(*parties)
        for _ in range(10_000):  # let every attempt still running (not crashed) finish
            running = [t for t, i in self.requests.items() if not t.done() and not i.dead]
            if not running:
                break
            await asyncio.sleep(1.0)
        else:
            raise RuntimeError(f"{len(running)} request(s) still running long after the last delivery")
        await asyncio.sleep(self.config.lag + self.config.dispatch_timeout)  # late downstream effects land

    async def records(self) -> list[RunRecord]:
        reader = self.open_store()
        try:
            return await self.store_io(lambda: reader.list(T0 + timedelta(seconds=self.loop.time()), limit=100_000))
        finally:
            if reader is not self._memory:
                await self.store_io(reader.close)

    async def close(self) -> None:
        for instance in self.instances:
            await self.store_io(instance.stop)
        shutil.rmtree(self._tmp, ignore_errors=True)


def _stamp(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def _sha256(payload: dict[str, Any]) -> str:
    from runonce.missed.audit import body_sha256

    return body_sha256(payload)


def _http_status(status: str) -> int:
    """The HTTP status of an error family's status word (runonce/api/answers.py)."""
    from runonce.api.answers import ANSWERS

    return next(answer.http_status for answer in ANSWERS.values() if answer.status == status)


SERVER_STORES = {"spanner": "RUNONCE_SIM_SPANNER_URL", "redis": "RUNONCE_SIM_REDIS_URL"}
"""Stores on a server the caller started, named by these variables (a fresh, empty store: every
history wipes it first, see `wipe_server_store`)."""


def server_store_url(store: str) -> str:
    import os

    url = os.environ.get(SERVER_STORES[store])
    if not url:
        raise RuntimeError(f"--store {store} needs {SERVER_STORES[store]} (python -m tests.sim starts one itself)")
    return url


async def wipe_server_store(store: str) -> None:
    """Histories share one Spanner table / Redis database, one after another: each starts empty."""
    url = server_store_url(store)
    if store == "redis":
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(url)
        await client.flushdb()
        await client.aclose()
        return
    from runonce.stores import open_store

    spanner = open_store(url)
    await asyncio.get_running_loop().run_in_executor(
        None,
        lambda: spanner._database.run_in_transaction(  # type: ignore[attr-defined]
            lambda txn: txn.execute_update(f"DELETE FROM {spanner.table} WHERE TRUE")
        ),  # type: ignore[attr-defined]
    )
    await spanner.close()


def _fast_tmp() -> str | None:
    """tmpfs when there is one: SQLite's FULL sync is a no-op there."""
    import os

    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _arm_lost_commit(store: Any) -> None:
    """Firestore only, at the store's Commit call: when the FaultyStore asks for it, the next commit
    that lands loses its answer and the client sends it again (as google-api-core's retry does), so
    the store sees AlreadyExists / FailedPrecondition for its own write."""
    real_commit = store._commit_call
    owner: list[FaultyStore] = []  # the FaultyStore wrapping this handle

    async def commit(*args: Any, **kwargs: Any) -> Any:
        result = await real_commit(*args, **kwargs)
        if owner:
            owner[0].landed += 1
        if owner and owner[0].lose_next_commit:
            owner[0].lose_next_commit = False
            return await real_commit(*args, **kwargs)
        return result

    store._commit_call = commit
    store._sim_owner = owner


@dataclass
class Report:
    config: Config
    faults: dict[str, str]
    violations: list[str]
    answers: int
    crashes: int
    covered: Counter[str] = field(default_factory=Counter)  # what the history exercised


async def play(config: Config, faults: dict[str, str] | None = None) -> Report:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualTimeLoop)
    world = World(config, loop, faults)
    if config.store in SERVER_STORES:
        await world.store_io(lambda: wipe_server_store(config.store))
    # Every catch-up and backfill dispatch goes through backfill.run_one: note its run as one that
    # runs a past time on purpose (I8) when it starts, not from the answer, which a crash may lose.
    dispatching = backfill_module.run_one
    backfill_module.run_one = _noting_past_runs(world, dispatching)
    try:
        await world.play()
        records = await world.records()
        violations = check(world, records)
    finally:
        backfill_module.run_one = dispatching
        await world.close()
    return Report(config, dict(world.faults.injected), violations, len(world.answers), world.crashes, world.covered)


def _noting_past_runs(world: World, dispatching: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def run_one_noted(runner: Any, run: ScheduledRun, route: Any) -> Any:
        world.caught_up_runs.add(run.run_id)
        return await dispatching(runner, run, route)

    return run_one_noted


def run_history(config: Config, faults: dict[str, str] | None = None) -> Report:
    loop = VirtualTimeLoop()
    # Every instance's app opens an httpx client that the simulated targets never use: share one
    # TLS context instead of loading the CA bundle each time (most of a history's cost otherwise).
    real = httpx_default.create_ssl_context
    httpx_default.create_ssl_context = lambda *args, **kwargs: _SSL
    try:
        return loop.run_until_complete(play(config, faults))
    finally:
        httpx_default.create_ssl_context = real
        for task in asyncio.all_tasks(loop):  # crashed attempts: checked already, now let them go
            with suppress(RuntimeError):
                task.get_coro().close()
        loop.close()


_SSL = ssl.create_default_context()
