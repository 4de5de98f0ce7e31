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
import uuid
from collections.abc import Iterator

import pytest

from tests.support.burst import Burst, calls_so_far, executions, records, server_env, start_instances
from tests.support.downstream import Downstream
from tests.support.procs import ServerProcess
from tests.support.stores import FIRESTORE_PROJECT, redis_url, spanner_table_url

pytestmark = pytest.mark.e2e

INSTANCES = 4
RUNS = 150
LEASE_SECONDS = 9.0
"""Short, so the test waits little for the killed instance's leases (settings: >= dispatch + 2 x store + 1)."""


def store_env(kind: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """RUNONCE_STORE (and options) for a fresh namespace on the session's server of `kind`."""
    if kind == "firestore":
        request.getfixturevalue("firestore_emulator")
        return {
            "RUNONCE_STORE": "firestore",
            "RUNONCE_FIRESTORE_PROJECT": FIRESTORE_PROJECT,
            "RUNONCE_FIRESTORE_COLLECTION": f"runs_{uuid.uuid4().hex[:12]}",
        }
    if kind == "redis":
        return {"RUNONCE_STORE": redis_url(request.getfixturevalue("redis_server"))}
    return {"RUNONCE_STORE": spanner_table_url(request.getfixturevalue("spanner_database"))}


@pytest.fixture(scope="module", params=["firestore", "redis", "spanner"])
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[ServerProcess], Downstream]]:
    """Four instances on one store, for both tests of that store (the kill test runs last)."""
    with Downstream() as downstream:
        env = server_env(store_env(request.param, request), downstream, LEASE_SECONDS)
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


def test_a_burst_of_duplicates_over_four_instances_executes_each_run_once(cluster) -> None:
    servers, downstream = cluster
    burst = Burst(servers, RUNS, seed(), prefix="calm")
    before = calls_so_far(downstream)
    outcome = asyncio.run(burst.run())

    assert outcome.outside_table == []
    assert len(outcome.run_ids) == RUNS, outcome.answers
    assert {status for status, _ in outcome.answers} <= {200, 409}, outcome.answers  # nothing failed or 5xx
    calls, keys = executions(downstream, before)
    assert calls == RUNS and set(keys) == set(outcome.run_ids.values()), keys.most_common(3)
    assert records(servers[1], list(outcome.run_ids.values())) == {"completed": RUNS}
    print(f"{outcome.deliveries} deliveries in {outcome.seconds:.1f}s: {dict(outcome.answers)}")


def test_an_instance_killed_mid_burst_leaves_nothing_stuck_and_nothing_run_twice(cluster) -> None:
    servers, downstream = cluster
    burst = Burst(servers, RUNS, seed(), prefix="kill", kill_after=RUNS // 3)
    before = calls_so_far(downstream)
    outcome = asyncio.run(burst.run())

    assert burst.killed == {0} and servers[0].proc.returncode == -9
    assert outcome.outside_table == []
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
