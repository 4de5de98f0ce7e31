"""Route schedule policies through the real app: missing schedule times (reject | snap), force runs
(separate | dedupe | reject), Cloud Tasks counters on the run record, and backpressure (a route's
max_concurrent_dispatches; a target's 429 Retry-After), the last also against a real server."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from runonce.api.main import create_app
from runonce.routes import load_routes
from runonce.settings import ConfigError, Settings
from runonce.stores.memory import MemoryStore
from runonce.targets import DispatchRequest
from runonce.targets.scripted import ScriptedTarget
from tests.support.clock import Clock
from tests.support.downstream import Downstream
from tests.support.procs import start_server

ROUTES = """
routes:
  groc-snap:
    target: {type: log}
    schedule: every 5 minutes synchronized
    time_zone: America/New_York
    missing_schedule_time: snap
  cron-reject:
    target: {type: log}
    schedule: 30 2 * * *
    time_zone: America/New_York
  separate:
    target: {type: log}
  dedupe:
    target: {type: log}
    forced_runs: dedupe
  refuse:
    target: {type: log}
    forced_runs: reject
  tasks:
    target: {type: log}
  limited:
    target: {type: log}
    max_concurrent_dispatches: 3
"""


class Api:
    def __init__(self, client: httpx.AsyncClient, store: MemoryStore, targets: dict[str, ScriptedTarget], clock: Clock):
        self.client, self.store, self.targets, self.clock = client, store, targets, clock

    async def deliver(self, route: str, headers: dict[str, str]) -> httpx.Response:
        return await self.client.post(f"/v1/routes/{route}:run", headers=headers)


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    clock = Clock(datetime(2026, 3, 8, 6, 57, 0, tzinfo=UTC))  # 01:57 EST, just before the jump
    store = MemoryStore()
    targets = {
        name: ScriptedTarget()
        for name in ("groc-snap", "cron-reject", "separate", "dedupe", "refuse", "tasks", "limited")
    }
    app = create_app(
        Settings(routes=ROUTES, auth="none", store="sqlite:///unused.db"), store=store, targets=targets, clock=clock
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runonce") as client,
    ):
        yield Api(client, store, targets, clock)


def job(name: str = "nightly", time: str | None = None) -> dict[str, str]:
    headers = {"X-CloudScheduler-JobName": name}
    if time is not None:
        headers["X-CloudScheduler-ScheduleTime"] = time
    return headers


# -- missing schedule time ----------------------------------------------------------------------


async def test_snap_keys_a_headerless_delivery_by_the_latest_fire_time(api: Api) -> None:
    first = await api.deliver("groc-snap", job("every5"))
    assert first.status_code == 200, first.text
    record = await api.store.get(first.json()["run_id"], api.clock())
    assert record is not None and record.schedule_time == "2026-03-08T06:55:00Z" and record.source == "scheduler"
    # A retry 3 minutes later, still before the next fire time (07:00Z = 03:00 EDT): the same run.
    api.clock.advance(120)
    retry = await api.deliver("groc-snap", job("every5"))
    assert retry.json()["status"] == "duplicate" and retry.json()["run_id"] == first.json()["run_id"]
    # After the jump the next grid point is 03:00 EDT (elapsed time from the window start).
    api.clock.advance(60)
    after_jump = await api.deliver("groc-snap", job("every5"))
    record = await api.store.get(after_jump.json()["run_id"], api.clock())
    assert record is not None and record.schedule_time == "2026-03-08T07:00:00Z"
    # The header, when Scheduler sends it, wins over snapping.
    explicit = await api.deliver("groc-snap", job("every5", "2026-03-08T06:55:00Z"))
    assert explicit.json()["run_id"] == first.json()["run_id"]
    assert len(api.targets["groc-snap"].dispatched) == 2


async def test_reject_is_the_default_and_changes_nothing(api: Api) -> None:
    response = await api.deliver("cron-reject", job("nightly"))
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "X-CloudScheduler-ScheduleTime"
    assert "missing_schedule_time: snap" in response.json()["error"]["message"]
    assert await api.store.list(api.clock()) == [] and api.targets["cron-reject"].dispatched == []


def test_groc_route_with_reject_warns_at_start_up(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text("routes:\n  r:\n    target: {type: log}\n    schedule: every 10 minutes\n")
    with caplog.at_level(logging.WARNING, logger="runonce.routes"):
        load_routes(Settings(routes_file=str(path), auth="none"))
    assert (
        f"routes file {path}: route 'r': groc schedule 'every 10 minutes' with missing_schedule_time 'reject'"
        in caplog.text
    )


@pytest.mark.parametrize(
    "route, field, says",
    [
        ("schedule: '0 0 * * MON#2'", "schedule", "day-of-week field 'MON#2': '#'"),
        ("schedule: 'every 7 minutes synchronized'", "schedule", "divides 24 hours"),
        ("time_zone: Mars/Olympus", "time_zone", "'Mars/Olympus' is not a tz database zone name"),
        ("missing_schedule_time: snap", "", "missing_schedule_time 'snap' needs the job's 'schedule'"),
        ("forced_runs: sometimes", "forced_runs", "'separate', 'dedupe' or 'reject'"),
        ("max_concurrent_dispatches: 0", "max_concurrent_dispatches", "greater than or equal to 1"),
    ],
)
def test_bad_schedule_config_stops_start_up_naming_file_route_and_field(
    tmp_path: Path, route: str, field: str, says: str
) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(f"routes:\n  nightly:\n    target: {{type: log}}\n    {route}\n")
    with pytest.raises(ConfigError) as caught:
        create_app(Settings(routes_file=str(path), auth="none", store="sqlite:///unused.db"))
    message = str(caught.value)
    assert message.startswith(f"routes file {path}: route 'nightly': ")
    if field:
        assert f"field '{field}'" in message
    assert says in message and "Value error" not in message


# -- force runs -----------------------------------------------------------------------------------

FORCED = "2026-03-08T08:00:00Z"  # an hour after the clock: Scheduler's "next schedule time"


async def test_forced_runs_separate_is_its_own_run_and_dedupes_among_force_runs(api: Api) -> None:
    forced = await api.deliver("separate", job("hourly", FORCED))
    again = await api.deliver("separate", job("hourly", FORCED))
    assert again.json()["status"] == "duplicate" and again.json()["run_id"] == forced.json()["run_id"]
    api.clock.now = datetime(2026, 3, 8, 8, 0, 1, tzinfo=UTC)
    scheduled = await api.deliver("separate", job("hourly", FORCED))
    assert scheduled.json()["status"] == "processed" and scheduled.json()["run_id"] != forced.json()["run_id"]
    assert [r.source for r in api.targets["separate"].dispatched] == ["scheduler-forced", "scheduler"]


async def test_forced_runs_dedupe_treats_the_force_run_as_the_scheduled_run(api: Api) -> None:
    forced = await api.deliver("dedupe", job("hourly", FORCED))
    assert forced.json()["status"] == "processed"
    api.clock.now = datetime(2026, 3, 8, 8, 0, 1, tzinfo=UTC)
    scheduled = await api.deliver("dedupe", job("hourly", FORCED))
    assert scheduled.json()["status"] == "duplicate" and scheduled.json()["run_id"] == forced.json()["run_id"]
    assert [r.source for r in api.targets["dedupe"].dispatched] == ["scheduler"]


async def test_forced_runs_reject_is_409_with_an_explanation_and_the_scheduled_run_goes_through(api: Api) -> None:
    refused = await api.deliver("refuse", job("hourly", FORCED))
    assert refused.status_code == 409
    body = refused.json()
    assert body["status"] == "forced_run_refused" and body["error"]["field"] == "X-CloudScheduler-ScheduleTime"
    assert "force run" in body["error"]["message"] and "forced_runs: reject" in body["error"]["message"]
    assert await api.store.list(api.clock()) == []
    api.clock.now = datetime(2026, 3, 8, 8, 0, 1, tzinfo=UTC)
    assert (await api.deliver("refuse", job("hourly", FORCED))).json()["status"] == "processed"


# -- Cloud Tasks counters -----------------------------------------------------------------------------


async def test_cloud_tasks_counters_are_recorded_on_the_run_record(api: Api) -> None:
    headers = {
        "X-CloudTasks-QueueName": "exports",
        "X-CloudTasks-TaskName": "task-1",
        "X-CloudTasks-TaskRetryCount": "0",
        "X-CloudTasks-TaskExecutionCount": "0",
    }
    first = await api.deliver("tasks", headers)
    run_id = first.json()["run_id"]
    shown = (await api.client.get(f"/v1/runs/{run_id}")).json()
    assert (shown["task_retry_count"], shown["task_execution_count"]) == (0, 0)
    # A retry of a run that failed: the takeover records the delivery's counters.
    api.targets["tasks"].on_dispatch = _fail_once(api.targets["tasks"].on_dispatch)
    second_task = {**headers, "X-CloudTasks-TaskName": "task-2"}
    assert (await api.deliver("tasks", second_task)).status_code == 502
    retry = {**second_task, "X-CloudTasks-TaskRetryCount": "3", "X-CloudTasks-TaskExecutionCount": "2"}
    assert (await api.deliver("tasks", retry)).status_code == 200
    record = (await api.client.get(f"/v1/runs/{(await api.deliver('tasks', retry)).json()['run_id']}")).json()
    assert (record["task_retry_count"], record["task_execution_count"], record["attempts"]) == (3, 2, 2)


def _fail_once(dispatch):  # type: ignore[no-untyped-def]
    from runonce.targets import TargetFailed

    state = {"failed": False}

    async def handler(request: DispatchRequest) -> str:
        if not state["failed"]:
            state["failed"] = True
            raise TargetFailed("downstream said 500")
        return await dispatch(request)

    return handler


# -- backpressure ---------------------------------------------------------------------------------


async def test_route_concurrency_limit_throttles_under_load_and_releases_the_claim(api: Api) -> None:
    gate = asyncio.Event()
    active = {"now": 0, "max": 0}
    target = api.targets["limited"]

    async def slow(request: DispatchRequest) -> str:
        active["now"] += 1
        active["max"] = max(active["max"], active["now"])
        await gate.wait()
        active["now"] -= 1
        return f"done/{request.run_id}"

    target.on_dispatch = slow
    tasks = [asyncio.create_task(api.deliver("limited", job("burst", f"2026-03-08T06:{i:02d}:00Z"))) for i in range(20)]
    for _ in range(200):  # until every request has been answered or is waiting on the target
        await asyncio.sleep(0.01)
        if sum(t.done() for t in tasks) == 17:
            break
    gate.set()
    answers = await asyncio.gather(*tasks)
    statuses = sorted(r.status_code for r in answers)
    assert statuses == [200] * 3 + [429] * 17
    assert active["max"] == 3 and len(target.dispatched) == 3  # the 17 never reached the target
    throttled = [r for r in answers if r.status_code == 429]
    assert all(r.headers["Retry-After"] == "5" and r.json()["status"] == "throttled" for r in throttled)
    assert "max_concurrent_dispatches" in throttled[0].json()["error"]["message"]
    # The claims were released: each retry dispatches now that the route is idle.
    retry = await api.client.post("/v1/routes/limited:run", headers=dict(throttled[0].request.headers))
    assert retry.status_code == 200 and retry.json()["status"] == "processed"


@pytest.fixture
def downstream() -> Iterator[Downstream]:
    with Downstream() as server:
        yield server


async def _burst(url: str, route: str, count: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=30) as client:
        return list(
            await asyncio.gather(
                *(
                    client.post(f"{url}/v1/routes/{route}:run", headers=job("burst", f"2026-03-08T06:{i:02d}:00Z"))
                    for i in range(count)
                )
            )
        )


@pytest.mark.e2e
async def test_real_server_backpressure_and_target_retry_after(tmp_path: Path, downstream: Downstream) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text(
        "routes:\n"
        f"  slow:\n    target: {{type: http, url: '{downstream.url}/work'}}\n    max_concurrent_dispatches: 2\n"
        f"  busy:\n    target: {{type: http, url: '{downstream.url}/work'}}\n"
    )
    server = start_server(
        {
            "RUNONCE_ROUTES_FILE": str(routes),
            "RUNONCE_AUTH": "none",
            "RUNONCE_STORE": f"sqlite:///{tmp_path / 'runs.db'}",
        },
        tmp_path,
    )
    try:
        # 12 runs at once on a route limited to 2, each dispatch taking 0.5 s.
        downstream.set("/work", delay=0.5)
        answers = await _burst(server.url, "slow", 12)
        processed = [r for r in answers if r.status_code == 200]
        throttled = [r for r in answers if r.status_code == 429]
        assert len(processed) + len(throttled) == 12 and 2 <= len(processed) < 12
        assert downstream.max_active <= 2 and downstream.calls["/work"] == len(processed)
        assert all(r.headers["Retry-After"] == "5" for r in throttled)
        # The downstream says slow down: its Retry-After is passed on, and nothing is kept.
        downstream.set("/work", 429, retry_after="7")
        answers = await _burst(server.url, "busy", 12)
        assert [r.status_code for r in answers] == [429] * 12
        assert all(r.headers["Retry-After"] == "7" and r.json()["status"] == "throttled" for r in answers)
        # Once it recovers, every retry dispatches (the claims were released).
        downstream.set("/work", 200)
        answers = await _burst(server.url, "busy", 12)
        assert [r.json()["status"] for r in answers] == ["processed"] * 12
    finally:
        server.stop()
