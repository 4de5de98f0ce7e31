"""Four `runonce serve` processes on ONE store (the Firestore emulator, a real redis-server, the
Spanner emulator) under a Cloud-Tasks-shaped burst: every run delivered 2 or 3 times, concurrently,
to different instances, retried as Cloud Tasks retries until each copy gets a 200. The `http`
target's downstream counts calls per Idempotency-Key: one execution per run, every record
`completed`, no answer outside the status table. Then again with one instance killed (SIGKILL)
mid-burst: what it held is retried after its lease, and still executes once."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Iterator
from datetime import timedelta

import pytest

from runonce import errors
from runonce.run.delivery import Delivery
from runonce.run.runner import Rules, Runner
from runonce.stores import RunStore
from runonce.targets.scripted import ScriptedTarget
from tests.support.burst import (
    LOCATION,
    PROJECT,
    QUEUE,
    ROUTE,
    Burst,
    Outcome,
    calls_so_far,
    executions,
    records,
    server_env,
    start_instances,
)
from tests.support.downstream import Downstream
from tests.support.procs import ServerProcess
from tests.support.stores import server_store_env, with_server

pytestmark = pytest.mark.e2e

INSTANCES = 4
RUNS = 150
LEASE_SECONDS = 9.0
"""Short, so the test waits little for the killed instance's leases (settings: >= dispatch + 2 x store + 1)."""


@pytest.fixture(scope="module", params=["firestore", "redis", "spanner"])
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[ServerProcess], Downstream]]:
    """Four instances on one store, for both tests of that store (the kill test runs last)."""
    with Downstream() as downstream:
        env = server_env(server_store_env(request.param, request), downstream, LEASE_SECONDS)
        servers = start_instances(env, tmp_path_factory.mktemp(request.param), INSTANCES)
        try:
            yield servers, downstream
        finally:
            for server in servers:
                server.stop()


def seed() -> int:
    value = int(os.environ.get("RUNONCE_TEST_SEED", random.randrange(2**32)))
    print(f"burst seed: {value} (RUNONCE_TEST_SEED={value} replays the same plan)")
    return value


def assert_only_retryable_5xx(outcome: Outcome) -> None:
    """Nothing failed: every non-200 answer is one Cloud Tasks retries into a 200 (409 in progress;
    503 store unavailable, nothing dispatched; 504 outcome unknown, claim kept), none a 500 or 502."""
    assert {answer for answer in outcome.answers if answer[0] != 200} <= RETRYABLE, outcome.answers


RETRYABLE = {(409, "in_progress"), (503, "unavailable"), (504, "unknown")}


def test_a_burst_of_duplicates_over_four_instances_executes_each_run_once(cluster) -> None:
    servers, downstream = cluster
    burst = Burst(servers, RUNS, seed(), prefix="calm")
    before = calls_so_far(downstream)
    outcome = asyncio.run(burst.run())

    assert outcome.outside_table == []
    assert len(outcome.run_ids) == RUNS, outcome.answers
    assert_only_retryable_5xx(outcome)
    calls, keys = executions(downstream, before)
    assert set(keys) == set(outcome.run_ids.values()), "a run the downstream never executed, or one it did not expect"
    # One call per run, but for a run whose finish timed out (504: the claim is kept) and was
    # dispatched again after its lease with the same Idempotency-Key: an overloaded store's doing.
    assert RUNS <= calls <= RUNS + outcome.answers[(504, "unknown")], keys.most_common(3)
    assert records(servers[1], list(outcome.run_ids.values())) == {"completed": RUNS}
    print(f"{outcome.deliveries} deliveries in {outcome.seconds:.1f}s: {dict(outcome.answers)}")


def test_an_instance_killed_mid_burst_leaves_nothing_stuck_and_nothing_run_twice(cluster) -> None:
    servers, downstream = cluster
    burst = Burst(servers, RUNS, seed(), prefix="kill", kill_after=RUNS // 3)
    before = calls_so_far(downstream)
    outcome = asyncio.run(burst.run())

    assert burst.killed == {0} and servers[0].proc.returncode == -9
    assert outcome.outside_table == []
    assert_only_retryable_5xx(outcome)
    assert len(outcome.run_ids) == RUNS, outcome.answers
    calls, keys = executions(downstream, before)
    run_ids = set(outcome.run_ids.values())
    assert set(keys) == run_ids, "a run the downstream never executed, or one it did not expect"
    # Calls: a run the killed instance had dispatched is dispatched again after its lease, with the
    # same Idempotency-Key, which the downstream dedupes: one execution per key.
    assert len(keys) == RUNS and calls >= RUNS
    assert records(servers[1], list(run_ids)) == {"completed": RUNS}
    print(
        f"{outcome.deliveries} deliveries in {outcome.seconds:.1f}s, {outcome.lost} connections lost, "
        f"{calls} downstream calls for {len(keys)} executions: {dict(outcome.answers)}"
    )


# -- store requests per delivery: the figures docs/capacity.md quotes -------------------------------------------


@pytest.fixture(params=["firestore", "redis", "spanner"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """conftest's `store` fixture, on the three shared stores only."""
    return with_server(request)


def requests_sent(kind: str, store: RunStore) -> int:
    """Requests the store's client sent so far (each store counts them where they leave the process);
    Spanner's `replace` is one read-write transaction: a read and a commit."""
    if kind == "firestore":
        return sum(store.round_trips.values())  # type: ignore[attr-defined]
    if kind == "redis":
        return int(store.round_trips)  # type: ignore[attr-defined]
    calls = store.calls  # type: ignore[attr-defined]
    return int(calls["load"] + calls["insert"] + 2 * calls["replace"])


REQUESTS = {"firestore": (2, 2), "redis": (2, 1), "spanner": (3, 2)}
"""(per fresh run, per duplicate of a completed run), as docs/capacity.md states them."""


async def test_store_requests_per_fresh_run_and_per_duplicate(store_kind: str, store: RunStore) -> None:
    runner = Runner(
        store,
        {ROUTE: ScriptedTarget()},
        routes={ROUTE: Rules()},
        lease=timedelta(seconds=60),
        retention=timedelta(days=1),
        dispatch_timeout=timedelta(seconds=10),
    )

    def task(name: str) -> Delivery:
        return Delivery(source="tasks", project=PROJECT, location=LOCATION, route=ROUTE, job=QUEUE, task=name)

    for attempt in range(5):  # warm: connections, sessions, scripts (a cold emulator may time out first)
        try:
            await runner.run(task(f"warm-{attempt}"), {}, "0" * 64)
            break
        except errors.Unavailable:
            continue
    before = requests_sent(store_kind, store)
    fresh = await runner.run(task("fresh"), {}, "0" * 64)
    after_fresh = requests_sent(store_kind, store)
    duplicate = await runner.run(task("fresh"), {}, "0" * 64)
    after_duplicate = requests_sent(store_kind, store)

    assert (fresh.replayed, duplicate.replayed) == (False, True)
    assert (after_fresh - before, after_duplicate - after_fresh) == REQUESTS[store_kind]
