"""A delivery's and an audit's cost do not grow with the history a store keeps: on every store, the
requests (and the work behind them, where the store shows it) of a fresh delivery on an `overlap`
route, and of an audit of 30 fire times, are the same with 50 records of the route as with 5,000.
bench/bench_history.py measures the time and CPU at 100 against 100,000."""

from __future__ import annotations

from datetime import timedelta

from runonce.missed.audit import missing, scheduled_runs
from runonce.run.delivery import Delivery
from runonce.run.guarantees import RouteGuard
from runonce.run.runner import Rules, Runner
from runonce.stores import RunStore
from runonce.targets.scripted import ScriptedTarget
from tests.support.clock import Clock
from tests.support.history import BODY, LEASE, RETENTION, ROUTE, ROUTES, Meter, history, seed


async def _idle(resource: str) -> bool:
    return False  # every earlier execution has finished


async def cost(store: RunStore, meter: Meter, clock: Clock, minute: int) -> tuple[dict[str, int], dict[str, int]]:
    """(a fresh delivery's cost, an audit's cost) on `store` now."""
    runner = Runner(
        store,
        {ROUTE: ScriptedTarget(running=_idle)},
        lease=LEASE,
        retention=RETENTION,
        dispatch_timeout=timedelta(seconds=30),
        clock=clock,
        routes={ROUTE: Rules(RouteGuard("skip"))},
    )
    delivery = Delivery(
        source="scheduler",
        project="proj-1",
        location="us-central1",
        route=ROUTE,
        job="nightly",  # type: ignore[arg-type]
        schedule_time=clock() - timedelta(seconds=minute),
    )
    await meter.start()
    result = await runner.run(delivery, {}, BODY)
    delivered = await meter.read()
    assert result.status == "processed"

    now = clock()
    runs = scheduled_runs(ROUTES, now - LEASE - timedelta(minutes=30), now - LEASE)
    assert len(runs) == 30
    await meter.start()
    assert len(await missing(store, runs, now)) == 30  # none of them ran
    audited = await meter.read()
    return delivered, audited


async def test_a_delivery_and_an_audit_cost_the_same_with_100_times_the_history(store: RunStore) -> None:
    clock = Clock()
    meter = Meter(store)
    await seed(store, history(50, clock(), RETENTION))
    small = await cost(store, meter, clock, 1)
    await seed(store, history(4950, clock(), RETENTION, start=50))  # older runs of the same route
    large = await cost(store, meter, clock, 2)
    print(f"{type(store).__name__}: 50 records: {small}; 5,000 records: {large}")

    for (at_small, at_large), what in zip(zip(small, large, strict=True), ("delivery", "audit"), strict=True):
        assert at_large["requests"] == at_small["requests"], what
        assert at_large["work"] <= at_small["work"] * 1.1, (what, at_small, at_large)
