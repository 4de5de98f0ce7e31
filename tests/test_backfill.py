"""Backfill (runonce/missed/backfill.py) and what `runonce backfill` refuses. The runs through the protocol against
real targets and stores are in tests/test_missed_runs_e2e.py; here the Runner is real and the store in memory."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runonce.missed.audit import RangeRefused, scheduled_runs
from runonce.missed.backfill import (
    NOT_STARTED,
    Outcome,
    older_than_retention,
    release_unknown,
    run_all,
    runs_to_backfill,
)
from runonce.routes import parse_routes
from runonce.run.runner import Runner
from runonce.stores.memory import MemoryStore
from runonce.targets import DispatchRequest, TargetFailed, TargetOutcomeUnknown
from runonce.targets.scripted import ScriptedTarget

NOW = datetime(2026, 3, 8, 12, 0, tzinfo=UTC)
ROUTES_TEXT = """
routes:
  minutely:
    target: {type: log}
    job: minutely-job
    schedule: "* * * * *"
    namespace: {project: proj-1, location: us-central1}
    body: {mode: full}
  hourly:
    target: {type: log}
    job: hourly-job
    schedule: "0 * * * *"
    namespace: {project: proj-1, location: us-central1}
  plain: {target: {type: log}}
"""
ROUTES = parse_routes(ROUTES_TEXT, "test")
ROUTE = ROUTES["minutely"]


def runner(target: ScriptedTarget, store: MemoryStore | None = None) -> Runner:
    return Runner(
        store or MemoryStore(),
        {"minutely": target},
        routes=ROUTES,
        lease=timedelta(seconds=300),
        retention=timedelta(days=1),
        dispatch_timeout=timedelta(seconds=30),
        clock=lambda: NOW,
    )


def test_the_range_is_half_open_and_never_in_the_future() -> None:
    runs = runs_to_backfill("minutely", ROUTE, NOW - timedelta(minutes=3), NOW, NOW)
    assert [run.time.minute for run in runs] == [57, 58, 59]
    with pytest.raises(RangeRefused) as refused:
        runs_to_backfill("minutely", ROUTE, NOW - timedelta(minutes=3), NOW + timedelta(seconds=1), NOW)
    assert refused.value.field == "to" and "future" in refused.value.reason
    with pytest.raises(RangeRefused) as refused:
        runs_to_backfill("minutely", ROUTE, NOW, NOW, NOW)
    assert refused.value.field == "from"


async def test_runs_start_oldest_first_at_most_concurrency_at_once_with_the_jobs_body() -> None:
    active = peak = 0

    async def slow(request: DispatchRequest) -> str:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.01)
        active -= 1
        return f"done/{request.run_id}"

    target = ScriptedTarget(slow)
    runs = runs_to_backfill("minutely", ROUTE, NOW - timedelta(minutes=10), NOW, NOW)
    outcomes = await run_all(runner(target), runs, ROUTE, concurrency=3)
    assert [o.outcome for o in outcomes] == ["processed"] * 10 and peak == 3
    assert [r.run_id for r in target.dispatched] == [run.run_id for run in runs]
    assert {r.payload["mode"] for r in target.dispatched} == {"full"} and outcomes[0].to_json()["resource"].startswith(
        "done/"
    )


async def test_a_stopped_backfill_starts_nothing_more_and_says_so() -> None:
    stop = asyncio.Event()
    target = ScriptedTarget()
    runs = runs_to_backfill("minutely", ROUTE, NOW - timedelta(minutes=5), NOW, NOW)
    outcomes = await run_all(runner(target), runs, ROUTE, concurrency=1, stop=stop, done=lambda outcome: stop.set())
    assert [o.outcome for o in outcomes] == ["processed"] + [NOT_STARTED] * 4
    assert len(target.dispatched) == 1 and not outcomes[1].ok


async def test_a_failed_run_is_reported_and_a_second_backfill_dispatches_it_again() -> None:
    store = MemoryStore()
    failing = ScriptedTarget()
    runs = runs_to_backfill("minutely", ROUTE, NOW - timedelta(minutes=2), NOW, NOW)

    async def refuse(request: DispatchRequest) -> str:
        raise TargetFailed("HTTP 400: bad request")

    failing.on_dispatch = refuse
    first = await run_all(runner(failing, store), runs, ROUTE, concurrency=2)
    assert [o.outcome for o in first] == ["failed", "failed"] and "HTTP 400" in first[0].to_json()["error"]
    second = await run_all(runner(ScriptedTarget(), store), runs, ROUTE, concurrency=2)
    assert [o.outcome for o in second] == ["processed", "processed"]
    third = await run_all(runner(ScriptedTarget(), store), runs, ROUTE, concurrency=2)
    assert [o.outcome for o in third] == ["duplicate", "duplicate"]


def test_runs_older_than_the_retention_are_flagged() -> None:
    runs = scheduled_runs(
        {"minutely": ROUTE}, NOW - timedelta(days=1, minutes=2), NOW - timedelta(days=1) + timedelta(minutes=2)
    )
    assert len(older_than_retention(runs, NOW, timedelta(days=1))) == 3  # 11:58, 11:59, 12:00 a day ago


# -- runonce backfill: refusals -------------------------------------------------------------------


@pytest.fixture
def cli_routes(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "routes.yaml"
    path.write_text(ROUTES_TEXT)
    monkeypatch.setenv("RUNONCE_ROUTES_FILE", str(path))
    return cli


def stamp(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_dry_run_prints_times_and_run_ids_and_touches_nothing(cli_routes) -> None:
    end = datetime.now(UTC).replace(second=0, microsecond=0)
    result = cli_routes(
        "backfill", "minutely", "--from", stamp(end - timedelta(minutes=3)), "--to", stamp(end), "--dry-run"
    )
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["SCHEDULE_TIME", "LOCAL_TIME", "RUN_ID", "OUTCOME"]
    expected = runs_to_backfill("minutely", ROUTE, end - timedelta(minutes=3), end, end)
    assert [row.split()[2] for row in rows] == [run.run_id for run in expected]
    assert {row.split()[3] for row in rows} == {"dry_run"}
    assert not cli_routes.db.exists()


END = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=1)


def span(route: str, length: timedelta, end: datetime = END) -> tuple[str, ...]:
    return (route, "--from", stamp(end - length), "--to", stamp(end))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (span("plain", timedelta(minutes=3)), "ROUTE: route 'plain' does not name its Scheduler 'job'"),
        (span("nope", timedelta(minutes=3)), "ROUTE: no route 'nope'"),
        (
            span("minutely", timedelta(minutes=3), datetime(2999, 1, 1, tzinfo=UTC)),
            "--to: 2999-01-01T00:00:00Z is in the future",
        ),
        (span("minutely", timedelta(minutes=1001)), "1001 fire times, over the 1000 one backfill runs without --yes"),
        (span("hourly", timedelta(days=1, hours=2)), "fire time(s) are older than RUNONCE_RETENTION_SECONDS (86400)"),
        (span("minutely", timedelta(minutes=-3)), "--from: must be before --to"),
        (span("minutely", timedelta(0)), "--from: must be before --to"),
        pytest.param(
            span("hourly", timedelta(minutes=10), END.replace(minute=30)),
            f"--from: route 'hourly' has no fire time from {stamp(END.replace(minute=20))} to "
            f"{stamp(END.replace(minute=30))}",
            id="no-fire-time",
        ),
    ],
)
def test_runonce_backfill_refuses_with_exit_2_naming_the_flag(cli_routes, args: tuple[str, ...], says: str) -> None:
    result = cli_routes("backfill", *args)
    assert result.exit_code == 2 and says in result.output, result.output
    assert not cli_routes.db.exists()


async def test_max_lateness_does_not_stop_a_backfill_of_past_times() -> None:
    """A backfill (and a catch-up) is an explicit run of past times: the route's lateness limit,
    which stops late Scheduler deliveries, does not apply (README, Scheduled-run guarantees)."""
    routes = parse_routes(
        ROUTES_TEXT.replace("body: {mode: full}", "body: {mode: full}\n    max_lateness_seconds: 60"), "t"
    )
    target = ScriptedTarget()
    late_route = Runner(
        MemoryStore(),
        {"minutely": target},
        routes=routes,
        lease=timedelta(seconds=300),
        retention=timedelta(days=1),
        dispatch_timeout=timedelta(seconds=30),
        clock=lambda: NOW,
    )
    runs = runs_to_backfill("minutely", ROUTE, NOW - timedelta(minutes=10), NOW - timedelta(minutes=5), NOW)
    outcomes = await run_all(late_route, runs, routes["minutely"], concurrency=1)
    assert [o.outcome for o in outcomes] == ["processed"] * 5 and len(target.dispatched) == 5


# -- backfill on an overlap route: one after another, through the route's guards -----------------

OVERLAP_ROUTES = """
routes:
  etl:
    target: {type: workflows, workflow: projects/proj-12345/locations/us-central1/workflows/w}
    job: etl-job
    schedule: "*/10 * * * *"
    namespace: {project: proj-1, location: us-central1}
    overlap: OVERLAP
"""


class Executions:
    """The downstream's executions: each runs until it has been asked about `polls` times."""

    def __init__(self, polls: int | None):
        self.polls = polls  # None: runs for ever
        self.asked: dict[str, int] = {}
        self.started: list[str] = []
        self.finished: list[str] = []

    async def dispatch(self, request: DispatchRequest) -> str:
        self.started.append(f"exec/{request.run_id}")
        return f"exec/{request.run_id}"

    async def is_running(self, resource: str) -> bool:
        self.asked[resource] = self.asked.get(resource, 0) + 1
        running = self.polls is None or self.asked[resource] <= self.polls
        if not running and resource not in self.finished:
            self.finished.append(resource)
        return running


async def backfill_over_http(overlap: str, executions: Executions, hours: int, **body) -> dict:
    import httpx

    from runonce.api.main import create_app
    from runonce.settings import Settings

    target = ScriptedTarget(executions.dispatch, running=executions.is_running)
    settings = Settings(routes=OVERLAP_ROUTES.replace("OVERLAP", overlap), auth="none", store="sqlite:///unused.db")
    app = create_app(settings, store=MemoryStore(), targets={"etl": target}, clock=lambda: NOW)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runonce") as client,
    ):
        start = NOW - timedelta(hours=1)
        response = await client.post(
            "/v1/routes/etl:backfill",
            json={"from": stamp(start), "to": stamp(start + timedelta(minutes=10 * hours)), **body},
        )
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    from runonce.missed import backfill

    monkeypatch.setattr(backfill, "POLL_SECONDS", 0.01, raising=False)


async def test_http_backfill_on_a_skip_route_dispatches_the_first_and_skips_what_overlaps_it(quick_polls) -> None:
    executions = Executions(polls=None)  # the first execution runs for the whole backfill
    body = await backfill_over_http("skip", executions, 3)
    assert [run["outcome"] for run in body["runs"]] == ["processed", "skipped", "skipped"]
    assert len(executions.started) == 1 and body["runs"][0]["resource"] == executions.started[0]


async def test_http_backfill_on_a_skip_route_runs_each_once_the_previous_is_done(quick_polls) -> None:
    executions = Executions(polls=0)  # done by the time the next run asks
    body = await backfill_over_http("skip", executions, 4)
    assert [run["outcome"] for run in body["runs"]] == ["processed"] * 4 and len(executions.started) == 4


async def test_http_backfill_on_a_wait_route_starts_each_when_the_previous_has_finished(quick_polls) -> None:
    executions = Executions(polls=2)  # each execution is still running the first two times it is asked
    body = await backfill_over_http("wait", executions, 3)
    assert [run["outcome"] for run in body["runs"]] == ["processed"] * 3
    # In fire-time order, each started only after the one before it was seen finished.
    assert executions.started == [run["resource"] for run in body["runs"]]
    assert executions.finished[:2] == executions.started[:2]


async def test_http_backfill_on_a_wait_route_gives_up_after_its_timeout_naming_what_is_left(quick_polls) -> None:
    executions = Executions(polls=None)
    body = await backfill_over_http("wait", executions, 3, timeout="1s")
    assert [run["outcome"] for run in body["runs"]] == ["processed", "waiting", "not_started"]
    assert len(executions.started) == 1


# -- runonce backfill: the same Runner and guards as serve ----------------------------------------


def overlap_settings(overlap: str, extra: str = ""):
    from runonce.settings import Settings

    text = OVERLAP_ROUTES.replace("OVERLAP", overlap) + extra
    return Settings(routes=text, auth="none", store="sqlite:///unused.db"), parse_routes(text, "t")


async def test_the_cli_backfills_runner_skips_what_overlaps_as_serve_does() -> None:
    """Before, `local_runner` built its Runner without the route guards: all three ran at once."""
    from runonce.missed.backfill import local_runner

    settings, routes = overlap_settings("skip")
    executions = Executions(polls=None)
    target = ScriptedTarget(executions.dispatch, running=executions.is_running)
    runs = runs_to_backfill("etl", routes["etl"], NOW - timedelta(hours=1), NOW - timedelta(minutes=30), NOW)
    async with local_runner(settings, routes, MemoryStore(), targets={"etl": target}) as local:
        outcomes = await run_all(local, runs, routes["etl"], concurrency=4)
    assert [o.outcome for o in outcomes] == ["processed", "skipped", "skipped"] and len(executions.started) == 1
    assert outcomes[1].result.body()["reason"] == "overlap"


async def test_the_cli_backfill_keeps_to_max_concurrent_dispatches() -> None:
    from runonce.missed.backfill import local_runner

    settings, routes = overlap_settings("allow", "    max_concurrent_dispatches: 2\n")
    active = peak = 0

    async def slow(request: DispatchRequest) -> str:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.01)
        active -= 1
        return f"exec/{request.run_id}"

    runs = runs_to_backfill("etl", routes["etl"], NOW - timedelta(hours=1), NOW, NOW)
    async with local_runner(settings, routes, MemoryStore(), targets={"etl": ScriptedTarget(slow)}) as local:
        outcomes = await run_all(local, runs, routes["etl"], concurrency=8)
    assert [o.outcome for o in outcomes] == ["processed"] * 6 and peak == 2


def test_a_runner_cannot_be_built_without_its_targets_route_rules() -> None:
    with pytest.raises(ValueError, match=r"no route rules for target\(s\) minutely"):
        Runner(
            MemoryStore(),
            {"minutely": ScriptedTarget()},
            routes={},
            lease=timedelta(seconds=300),
            retention=timedelta(days=1),
            dispatch_timeout=timedelta(seconds=30),
        )


async def test_a_backfill_outcome_says_no_why_and_an_audits_missed_run_does() -> None:
    """`why` is the audit's word for a missed run; a backfilled time was judged by no audit
    (before: `"why": "no delivery"` beside `"outcome": "duplicate"`)."""
    store = MemoryStore()
    runs = runs_to_backfill("minutely", ROUTE, NOW - timedelta(minutes=2), NOW, NOW)
    await run_all(runner(ScriptedTarget(), store), runs, ROUTE, concurrency=1)
    again = await run_all(runner(ScriptedTarget(), store), runs, ROUTE, concurrency=1)
    assert [row["outcome"] for row in map(Outcome.to_json, again)] == ["duplicate", "duplicate"]
    assert all("why" not in row for row in map(Outcome.to_json, again))


@pytest.fixture
def wait_route(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quick_polls):
    """The CLI on an `overlap: wait` route whose target (built by `local_runner`) is scripted."""
    from runonce.missed import backfill

    path = tmp_path / "routes.yaml"
    path.write_text(OVERLAP_ROUTES.replace("OVERLAP", "wait"))
    monkeypatch.setenv("RUNONCE_ROUTES_FILE", str(path))
    cli.executions = Executions(polls=None)
    target = ScriptedTarget(cli.executions.dispatch, running=cli.executions.is_running)
    monkeypatch.setattr(backfill, "build_target", lambda config, context: target)
    return cli


def test_runonce_backfill_gives_up_after_timeout_naming_what_is_left(wait_route) -> None:
    end = END.replace(minute=0)
    result = wait_route(
        "backfill", "etl", "--from", stamp(end - timedelta(minutes=30)), "--to", stamp(end), "--timeout", "1s"
    )
    assert result.exit_code == 1, result.output
    started = wait_route.executions.started
    assert len(started) == 1
    second = stamp(end - timedelta(minutes=20))
    assert (
        f"backfill etl: {second} waits: the route's previous execution {started[0]} is still running" in result.stderr
    )
    assert (
        f"gave up after --timeout 1s: 2 fire time(s) left, from {second}: the route's previous execution "
        f"{started[0]} is still running (overlap: wait)" in result.stderr
    ), result.stderr
    outcomes = [line.split()[3] for line in result.stdout.splitlines()[1:]]
    assert outcomes == ["processed", "waiting", "not_started"]


def test_runonce_backfill_shows_one_plain_line_per_run_when_stderr_is_no_terminal(wait_route) -> None:
    wait_route.executions.polls = 0
    end = END.replace(minute=0)
    result = wait_route("backfill", "etl", "--from", stamp(end - timedelta(minutes=30)), "--to", stamp(end))
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("backfill etl: ")]
    assert lines == [
        f"backfill etl: {n}/3 {stamp(end - timedelta(minutes=30 - 10 * (n - 1)))} processed" for n in (1, 2, 3)
    ]


def test_runonce_backfill_refuses_a_bad_timeout(cli_routes) -> None:
    result = cli_routes("backfill", *span("minutely", timedelta(minutes=3)), "--timeout", "soon")
    assert result.exit_code == 2 and "--timeout: 'soon' is not a duration" in result.output, result.output


# -- how many at once, waiting runs, skipped runs, unknown outcomes --------------------------------


@pytest.mark.parametrize(
    ("extra", "concurrency"),
    [("", 1), ("    max_concurrent_dispatches: 3\n", 1), ("    max_concurrent_dispatches: 1\n", 4)],
    ids=["asked-for-1", "asked-for-1-route-takes-3", "asked-for-4-route-takes-1"],
)
async def test_a_backfill_runs_one_at_a_time_when_asked_for_one_or_the_route_allows_one(
    extra: str, concurrency: int
) -> None:
    from runonce.missed.backfill import local_runner

    settings, routes = overlap_settings("allow", extra)
    active = peak = 0

    async def yielding(request: DispatchRequest) -> str:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0)  # let any other worker start its run meanwhile
        active -= 1
        return f"exec/{request.run_id}"

    runs = runs_to_backfill("etl", routes["etl"], NOW - timedelta(hours=1), NOW - timedelta(minutes=30), NOW)
    async with local_runner(settings, routes, MemoryStore(), targets={"etl": ScriptedTarget(yielding)}) as local:
        outcomes = await run_all(local, runs, routes["etl"], concurrency=concurrency)
    assert [o.outcome for o in outcomes] == ["processed"] * 3 and peak == 1


async def overlap_backfill(
    executions: Executions, overlap: str = "wait", until: datetime = NOW - timedelta(minutes=30), **options
) -> tuple[list[Outcome], list[str]]:
    """Backfill etl's fire times from 11:00 to `until` (three by default) on an `overlap` route, one
    at a time; the run_ids told `waiting`."""
    from runonce.missed.backfill import local_runner

    settings, routes = overlap_settings(overlap)
    target = ScriptedTarget(executions.dispatch, running=executions.is_running)
    runs = runs_to_backfill("etl", routes["etl"], NOW - timedelta(hours=1), until, NOW)
    told: list[str] = []
    async with local_runner(settings, routes, MemoryStore(), targets={"etl": target}) as local:
        outcomes = await run_all(
            local, runs, routes["etl"], concurrency=1, waiting=lambda o: told.append(o.run.run_id), **options
        )
    return outcomes, told


async def test_a_backfill_without_a_timeout_does_not_retry_a_waiting_run_and_starts_no_more(quick_polls) -> None:
    executions = Executions(polls=2)  # would be done by the third time it is asked
    outcomes, told = await overlap_backfill(executions)
    assert [o.outcome for o in outcomes] == ["processed", "waiting", NOT_STARTED]
    assert len(executions.started) == 1 and told == []


async def test_a_backfill_without_a_timeout_does_not_retry_even_if_the_clock_has_not_moved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A coarse clock (some platforms tick every ~16 ms) can read the same when the backfill begins
    and when a run answers `waiting`: no time has passed, yet with no timeout there is no retry."""
    executions = Executions(polls=1)  # done by the second time it is asked
    with monkeypatch.context() as patch:
        patch.setattr(asyncio.get_running_loop(), "time", lambda: 1000.0)
        outcomes, told = await overlap_backfill(executions)
    assert [o.outcome for o in outcomes] == ["processed", "waiting", NOT_STARTED]
    assert len(executions.started) == 1 and told == []


async def test_a_backfill_tells_each_waiting_run_once_however_often_it_is_tried_again(quick_polls) -> None:
    executions = Executions(polls=3)  # each execution is still running the first three times it is asked
    outcomes, told = await overlap_backfill(executions, timeout=timedelta(seconds=60))
    assert [o.outcome for o in outcomes] == ["processed"] * 3
    assert told == [o.run.run_id for o in outcomes[1:]] and len(executions.asked) == 2


async def test_a_skipped_backfill_run_reports_its_reason_and_message_in_the_json() -> None:
    executions = Executions(polls=None)
    outcomes, _ = await overlap_backfill(executions, "skip", until=NOW - timedelta(minutes=40))
    first, skipped = (outcome.to_json() for outcome in outcomes)
    assert "reason" not in first and "message" not in first
    assert (skipped["outcome"], skipped["reason"]) == ("skipped", "overlap")
    assert executions.started[0] in skipped["message"]


async def test_runs_a_backfill_left_unknown_are_released_and_the_next_backfill_reconciles_them_at_once() -> None:
    store = MemoryStore()
    runs = runs_to_backfill("minutely", ROUTE, NOW - timedelta(minutes=3), NOW, NOW)

    async def cut_short(request: DispatchRequest) -> str:
        if request.run_id != runs[0].run_id:
            raise TargetOutcomeUnknown("the dispatch was cut short; the target may have acted")
        return f"done/{request.run_id}"

    first = await run_all(runner(ScriptedTarget(cut_short), store), runs, ROUTE, concurrency=1)
    assert [o.outcome for o in first] == ["processed", "unknown", "unknown"]
    assert await release_unknown(store, first, NOW) == [run.run_id for run in runs[1:]]

    async def found(request: DispatchRequest) -> str | None:
        return f"done/{request.run_id}"

    again = ScriptedTarget(reconcile=found)
    second = await run_all(runner(again, store), runs, ROUTE, concurrency=1)
    assert [o.outcome for o in second] == ["duplicate", "processed", "processed"]
    assert [r.run_id for r in again.reconciled] == [run.run_id for run in runs[1:]] and again.dispatched == []
