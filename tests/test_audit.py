"""The audit (runonce/missed/audit.py) and `runonce audit`: every fire time of a route as the run Scheduler would
have delivered, and which left no record. Against the real SQLite store; the clock is the test's."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from runonce.api.main import create_app
from runonce.metrics import Metrics
from runonce.missed.audit import (
    MAX_CATCH_UP_PER_ROUTE,
    AuditTarget,
    RangeRefused,
    audit,
    body_sha256,
    catch_up_runs,
    check_catch_up_windows,
    parse_duration,
    scheduled_runs,
)
from runonce.routes import parse_routes
from runonce.run.delivery import format_schedule_time
from runonce.settings import ConfigError, Settings
from runonce.stores import Finish, NewRun, RunStore
from runonce.stores.base import COMPLETED, FAILED, SKIPPED
from runonce.stores.sqlite import SQLiteStore
from runonce.targets import DispatchRequest
from tests.support.runs import new_run

LEASE = timedelta(seconds=300)
RETENTION = timedelta(days=1)
NOW = datetime(2026, 3, 8, 12, 0, tzinfo=UTC)
ROUTES_TEXT = """
routes:
  hourly:
    target: {type: log}
    job: hourly-job
    schedule: "0 * * * *"
    namespace: {project: proj-1, location: us-central1}
  nightly:
    target: {type: log}
    job: nightly-etl
    schedule: "30 2 * * *"
    time_zone: America/New_York
    namespace: {project: proj-1, location: us-central1}
    body: {mode: full}
  unaudited: {target: {type: log}, schedule: "* * * * *"}
"""
ROUTES = parse_routes(ROUTES_TEXT, "test")


async def record(store: RunStore, run, body: dict | None = None, now: datetime = NOW) -> None:
    """What a delivery of `run` leaves: a completed record under its run_id."""
    d = run.delivery
    new = NewRun(
        run_id=d.run_id,
        route=d.route,
        source=d.source,
        project=d.project,
        location=d.location,
        job=d.job,
        schedule_time=d.schedule_time_text,
        task=None,
        body_sha256=body_sha256(body if body is not None else {}),
    )
    claim = await store.claim(new, now, LEASE, RETENTION)
    await store.finish(claim, Finish(COMPLETED, target={"type": "log", "resource": "log/x"}), now)


@pytest.fixture
async def store(tmp_path: Path):
    store = SQLiteStore(str(tmp_path / "runs.db"))
    yield store
    await store.close()


def test_fire_times_follow_the_engine_across_a_dst_gap_in_the_routes_zone() -> None:
    runs = scheduled_runs(
        {"nightly": ROUTES["nightly"]}, datetime(2026, 3, 6, tzinfo=UTC), datetime(2026, 3, 10, tzinfo=UTC)
    )
    # 02:30 does not exist in New York on March 8: unix-cron runs at the transition (03:00 EDT)
    assert [format_schedule_time(run.time) for run in runs] == [
        "2026-03-06T07:30:00Z",
        "2026-03-07T07:30:00Z",
        "2026-03-08T07:00:00Z",
        "2026-03-09T06:30:00Z",
    ]
    assert runs[2].to_json()["local_time"] == "2026-03-08T03:00:00-04:00"


def test_a_fire_times_run_id_is_the_one_the_server_gives_schedulers_delivery() -> None:
    """The server, fed the headers and URL Scheduler sends, records the same run_id the audit looks for."""
    [run] = scheduled_runs(
        {"nightly": ROUTES["nightly"]}, datetime(2026, 3, 9, 6, tzinfo=UTC), datetime(2026, 3, 9, 7, tzinfo=UTC)
    )
    canonical = "runonce/v1|scheduler|proj-1|us-central1|nightly|nightly-etl|2026-03-09T06:30:00Z"
    assert run.run_id == hashlib.sha256(canonical.encode()).hexdigest()
    from runonce.stores.memory import MemoryStore

    app = create_app(
        Settings(routes=ROUTES_TEXT, auth="none"),
        store=MemoryStore(),
        clock=lambda: datetime(2026, 3, 9, 6, 30, 1, tzinfo=UTC),
    )

    async def deliver() -> dict:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runonce") as http,
        ):
            response = await http.post(
                "/v1/routes/nightly:run?project=proj-1&location=us-central1",
                json={"mode": "full"},
                headers={
                    "X-CloudScheduler-JobName": "nightly-etl",
                    "X-CloudScheduler-ScheduleTime": "2026-03-09T02:30:00-04:00",
                },
            )
            return response.json()

    assert asyncio.run(deliver())["run_id"] == run.run_id


async def test_the_audit_reports_exactly_the_fire_times_without_a_record(store: RunStore) -> None:
    start = NOW - timedelta(hours=6)
    runs = scheduled_runs({"hourly": ROUTES["hourly"]}, start, NOW)
    holes = {runs[1].run_id, runs[4].run_id}
    for run in runs:
        if run.run_id not in holes:
            await record(store, run)
    report = await audit(store, {"hourly": ROUTES["hourly"]}, start, NOW, NOW, lease=LEASE, retention=RETENTION)
    assert {run.run_id for run in report.missed} == holes
    # 06:00..11:00 are due; 12:00 is not in [start, now) and none is within the lease
    assert report.checked == 6 and [r.route for r in report.missed] == ["hourly", "hourly"]


async def test_fire_times_within_the_lease_of_now_are_not_due_yet(store: RunStore) -> None:
    now = NOW + timedelta(seconds=120)  # the 12:00 run may still be on its way
    report = await audit(
        store, {"hourly": ROUTES["hourly"]}, NOW - timedelta(hours=1), now, now, lease=LEASE, retention=RETENTION
    )
    assert [format_schedule_time(run.time) for run in report.missed] == ["2026-03-08T11:00:00Z"]
    later = now + LEASE
    report = await audit(
        store, {"hourly": ROUTES["hourly"]}, NOW - timedelta(hours=1), later, later, lease=LEASE, retention=RETENTION
    )
    assert [format_schedule_time(run.time) for run in report.missed] == ["2026-03-08T11:00:00Z", "2026-03-08T12:00:00Z"]


async def test_a_range_older_than_the_retention_is_refused_not_reported_missed(store: RunStore) -> None:
    with pytest.raises(RangeRefused) as refused:
        await audit(store, ROUTES, NOW - RETENTION, NOW, NOW, lease=LEASE, retention=RETENTION)
    assert refused.value.field == "from" and "RUNONCE_RETENTION_SECONDS=86400" in refused.value.reason
    assert "2026-03-07T12:00:01Z" in refused.value.reason  # the earliest auditable time
    report = await audit(
        store, ROUTES, NOW - RETENTION + timedelta(seconds=1), NOW, NOW, lease=LEASE, retention=RETENTION
    )
    assert report.checked == 23 + 1  # hourly 13:00..11:00, nightly once


async def test_a_range_with_nothing_due_is_refused(store: RunStore) -> None:
    with pytest.raises(RangeRefused) as refused:
        await audit(
            store, ROUTES, NOW - timedelta(seconds=60), NOW, NOW, lease=LEASE, retention=RETENTION, start_field="since"
        )
    assert refused.value.field == "since" and "not due yet" in refused.value.reason


async def test_a_failed_record_is_missed_with_why_and_any_other_state_is_not(store: RunStore) -> None:
    """`failed`: nothing was dispatched and Scheduler gave up (or will retry: the catch-up and that
    retry are one run); `in_progress` may have run (a retry reconciles it); `completed` and
    `skipped` are accounted for."""
    runs = scheduled_runs({"hourly": ROUTES["hourly"]}, NOW - timedelta(hours=5), NOW)
    claims = {}
    for run in runs[:4]:
        d = run.delivery
        claims[run.run_id] = await store.claim(
            NewRun(
                run_id=d.run_id,
                route=d.route,
                source=d.source,
                project=d.project,
                location=d.location,
                job=d.job,
                schedule_time=d.schedule_time_text,
                task=None,
                body_sha256=body_sha256({}),
            ),
            NOW - timedelta(hours=1),
            LEASE,
            RETENTION,
        )
    failed, _in_progress, completed, skipped = (claims[run.run_id] for run in runs[:4])
    await store.finish(
        failed, Finish(FAILED, last_error="the route's previous execution x is still running (overlap: wait)"), NOW
    )
    await store.finish(completed, Finish(COMPLETED, target={"type": "log", "resource": "log/x"}), NOW)
    await store.finish(skipped, Finish(SKIPPED, last_error="late: 2h"), NOW)
    report = await audit(
        store, {"hourly": ROUTES["hourly"]}, NOW - timedelta(hours=5), NOW, NOW, lease=LEASE, retention=RETENTION
    )
    assert [(run.run_id, run.why) for run in report.missed] == [
        (runs[0].run_id, "failed: the route's previous execution x is still running (overlap: wait)"),
        (runs[4].run_id, "no delivery"),
    ]
    assert report.missed[0].to_json()["why"].startswith("failed: ")


def test_durations() -> None:
    assert parse_duration("90", "since") == timedelta(seconds=90)
    assert parse_duration("1h30m", "since") == timedelta(minutes=90)
    assert parse_duration("7d", "since") == timedelta(days=7)
    for bad in ("", "0s", "1w", "-5", "1.5h", "h", "9" * 5000, "9" * 5000 + "d", "1" + "0" * 40 + "h"):
        with pytest.raises(RangeRefused) as refused:
            parse_duration(bad, "since")
        assert refused.value.field == "since"


# -- catch-up: which runs a policy dispatches -----------------------------------------------------

CATCH_UP = parse_routes(
    """
routes:
  latest:
    target: {type: log}
    job: j-latest
    schedule: "0 * * * *"
    namespace: {project: proj-1, location: us-central1}
    catch_up: latest
  all:
    target: {type: log}
    job: j-all
    schedule: "*/5 * * * *"
    namespace: {project: proj-1, location: us-central1}
    catch_up: all
    catch_up_window_seconds: 7200
""",
    "test",
)


async def test_catch_up_latest_dispatches_only_the_latest_due_run_and_only_if_missed(store: RunStore) -> None:
    runs = await catch_up_runs(store, "latest", CATCH_UP["latest"], NOW, NOW, lease=LEASE, retention=RETENTION)
    assert [format_schedule_time(run.time) for run in runs] == ["2026-03-08T11:00:00Z"]
    await record(store, runs[0])
    # the older misses are superseded by the run that happened: nothing to dispatch
    assert await catch_up_runs(store, "latest", CATCH_UP["latest"], NOW, NOW, lease=LEASE, retention=RETENTION) == []


async def test_catch_up_all_dispatches_every_miss_of_the_window_oldest_first_bounded(store: RunStore) -> None:
    runs = await catch_up_runs(store, "all", CATCH_UP["all"], NOW, NOW, lease=LEASE, retention=RETENTION)
    assert len(runs) == MAX_CATCH_UP_PER_ROUTE
    assert format_schedule_time(runs[0].time) == "2026-03-08T10:00:00Z"  # the window: two hours back
    assert [run.time for run in runs] == sorted(run.time for run in runs)
    for run in runs:
        await record(store, run)
    following = await catch_up_runs(store, "all", CATCH_UP["all"], NOW, NOW, lease=LEASE, retention=RETENTION)
    assert format_schedule_time(following[0].time) == "2026-03-08T10:50:00Z"


async def test_catch_up_never_reaches_past_the_retention(store: RunStore) -> None:
    route = CATCH_UP["latest"]
    short = timedelta(minutes=30)  # the 11:00 run is older than the store keeps: absence proves nothing
    assert await catch_up_runs(store, "latest", route, NOW, NOW, lease=LEASE, retention=short) == []


def test_a_catch_up_window_the_retention_cannot_see_stops_start_up() -> None:
    assert check_catch_up_windows(CATCH_UP, 86400) == []
    [problem] = check_catch_up_windows(CATCH_UP, 3600)
    assert "route 'all'" in problem and "catch_up_window_seconds" in problem and "RUNONCE_RETENTION_SECONDS" in problem


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ("catch_up: all", "catch_up", "needs 'job'"),
        ("job: j", "job", "needs 'schedule' and 'namespace'"),
        ("job: j, schedule: '* * * * *'", "job", "needs 'namespace'"),
        ("catch_up_window_seconds: 60", "catch_up_window_seconds", "only with catch_up"),
        ("catch_up: sometimes", "catch_up", "'none', 'latest' or 'all'"),
        (
            "job: 'a b', schedule: '* * * * *', namespace: {project: proj-1, location: l}",
            "job",
            "is not an id of letters",
        ),
    ],
)
def test_bad_audit_fields_stop_start_up_naming_the_route_and_field(fields: str, field: str, reason: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_routes(f"routes: {{etl: {{target: {{type: log}}, {fields}}}}}", "routes.yaml")
    message = str(error.value)
    assert "route 'etl'" in message and f"field '{field}'" in message and reason in message, message


# -- runonce audit -------------------------------------------------------------------------------


@pytest.fixture
def audited(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The CLI on the hourly route, with the store holding every run of the last six hours but two."""
    path = tmp_path / "routes.yaml"
    path.write_text(ROUTES_TEXT)
    monkeypatch.setenv("RUNONCE_ROUTES_FILE", str(path))
    now = datetime.now(UTC)
    runs = scheduled_runs({"hourly": ROUTES["hourly"]}, now - timedelta(hours=6), now - LEASE)
    holes = [runs[0], runs[3]]

    async def seed() -> None:
        store = SQLiteStore(str(cli.db))
        for run in runs:
            if run not in holes:
                await record(store, run, now=now)
        await store.close()

    asyncio.run(seed())
    cli.holes, cli.due = holes, len(runs)  # 5 or 6 fire times, as now is within a lease after the hour or not
    return cli


def test_runonce_audit_prints_one_line_per_missed_run_and_exits_1(audited) -> None:
    result = audited("audit", "--route", "hourly", "--since", "6h")
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    for line, run in zip(lines, audited.holes, strict=True):
        assert line.split()[:3] == ["hourly", "job=hourly-job", format_schedule_time(run.time)]
        local = run.time.strftime("%Y-%m-%d %H:%M:%S+0000")
        assert f"({local} UTC)" in line and line.endswith(run.run_id), line
    assert f"2 missed of {audited.due} fire time(s) of 1 route(s)" in result.stderr


def test_runonce_audit_json_and_exit_0_when_nothing_is_missed(audited) -> None:
    result = audited("audit", "--route", "hourly", "--since", "6h", "--format", "json")
    report = json.loads(result.stdout)
    assert [run["run_id"] for run in report["missed"]] == [run.run_id for run in audited.holes]
    assert report["missed"][0]["job"] == "hourly-job" and report["checked"] == audited.due
    assert {run["why"] for run in report["missed"]} == {"no delivery"}
    start = format_schedule_time(audited.holes[0].time + timedelta(minutes=1))
    result = audited("audit", "--route", "hourly", "--from", start, "--to", format_schedule_time(audited.holes[1].time))
    assert result.exit_code == 0 and result.stdout == "", result.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--since", "2d"), "--since: "),
        (("--from", "2020-01-01T00:00:00Z"), "--from: "),
        (("--since", "1m"), "not due yet"),
        (("--since", "1h", "--from", "2026-01-01T00:00:00Z"), "give --since"),
        (("--since", "1h", "--to", "2026-01-01T00:00:00Z"), "--to goes with --from"),
        (
            ("--route", "unaudited", "--since", "1h"),
            "--route: route 'unaudited' does not name its Scheduler 'job' (routes with job: hourly, nightly)",
        ),
        (("--since", "soon"), "not a duration"),
        (("--since", "9" * 5000), "--since: a value of 5000 characters is not a duration"),
        (("--since", "99999999999999999999h"), "must be more than 0 and at most ten years"),
        (
            ("--from", "2026-01-02T00:00:00Z", "--to", "2026-01-01T00:00:00Z"),
            "--to: 2026-01-01T00:00:00Z is not after the start of the range 2026-01-02T00:00:00Z",
        ),
    ],
)
def test_runonce_audit_refuses_what_it_cannot_answer_with_exit_2(audited, args: tuple[str, ...], says: str) -> None:
    result = audited("audit", *args)
    assert result.exit_code == 2 and says in result.output, result.output


def test_runonce_audit_without_a_store_reports_every_due_run(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(ROUTES_TEXT)
    monkeypatch.setenv("RUNONCE_ROUTES_FILE", str(path))
    result = cli("audit", "--route", "hourly", "--since", "3h")
    assert result.exit_code == 1 and len(result.stdout.splitlines()) in (2, 3) and "no store" in result.stderr
    assert not cli.db.exists()


def test_runonce_audit_shows_plain_progress_lines_when_stderr_is_no_terminal(audited) -> None:
    result = audited("audit", "--route", "hourly", "--since", "6h")
    progress = [line for line in result.stderr.splitlines() if line.startswith("audit: ")]
    assert progress and progress[-1] == f"audit: {audited.due}/{audited.due} fire times looked up", result.stderr


# -- what can refuse an audit is refused before its run is claimed --------------------------------

WIDE_ROUTES = """
routes:
  minutely:
    target: {type: log}
    job: minutely-job
    schedule: "* * * * *"
    namespace: {project: proj-1, location: us-central1}
"""


async def test_an_audit_too_wide_to_compute_is_refused_before_its_run_is_claimed() -> None:
    """The audit's answer agrees with its record: a 400 leaves no `completed` audit run behind
    (before, the run was recorded completed with nothing reported)."""
    from runonce.stores.memory import MemoryStore

    store = MemoryStore()
    settings = Settings(routes=WIDE_ROUTES, auth="none", retention_seconds=40 * 86400)
    app = create_app(settings, store=store, clock=lambda: NOW)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runonce") as http,
    ):
        headers = {"X-CloudScheduler-JobName": "runonce-audit", "X-CloudScheduler-ScheduleTime": "2026-03-08T12:00:00Z"}
        refused = await http.post("/v1/audit:run", json={"since": "30d"}, headers=headers)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["field"] == "body.since" and "more than 20000 fire times" in refused.text
        for huge in ("9" * 5000, "9" * 4400 + "m"):  # past int()'s 4,300 digits: a 400, not a 500
            oversized = await http.post("/v1/audit:run", json={"since": huge}, headers=headers)
            assert oversized.status_code == 400, oversized.text[:300]
            assert oversized.json()["error"]["field"] == "body.since" and "9" * 50 not in oversized.text
        assert await store.list(NOW, route="_audit") == []
        fine = await http.post("/v1/audit:run", json={"since": "10m"}, headers=headers)
        assert fine.status_code == 200 and fine.json()["status"] == "processed"


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ("catch_up: latest", "the default, RUNONCE_RETENTION_SECONDS: 3.456e+06s"),
        ("catch_up: all, catch_up_window_seconds: 1500000", "catch_up_window_seconds: 1.5e+06s"),
    ],
)
def test_a_catch_up_window_with_more_fire_times_than_an_audit_computes_stops_start_up(fields: str, says: str) -> None:
    """Every audit would refuse such a window: the route would never be caught up while each audit's
    record said done. Start-up refuses it, naming the route, the field and a window that fits."""
    text = WIDE_ROUTES.replace(
        "    namespace: {project: proj-1, location: us-central1}\n",
        "    namespace: {project: proj-1, location: us-central1}\n    " + fields.replace(", ", "\n    ") + "\n",
    )
    with pytest.raises(ConfigError) as refused:
        create_app(Settings(routes=text, auth="none", retention_seconds=40 * 86400))
    message = str(refused.value)
    assert "route 'minutely': field 'catch_up_window_seconds'" in message and says in message, message
    assert "more than 20000 fire times of '* * * * *'" in message
    fits = int(message.rsplit("at most ", 1)[1])
    assert 19000 * 60 < fits < 20000 * 60
    narrowed = text.replace("catch_up_window_seconds: 1500000", f"catch_up_window_seconds: {fits}")
    if "catch_up_window_seconds" not in narrowed:
        narrowed = narrowed.replace("catch_up: latest", f"catch_up: latest\n    catch_up_window_seconds: {fits}")
    create_app(Settings(routes=narrowed, auth="none", retention_seconds=40 * 86400))  # starts


async def test_a_catch_up_that_cannot_be_computed_is_logged_as_an_error_never_silent(store: RunStore, caplog) -> None:
    """Past start-up's check (say, routes handed to catch_up directly), the audit still answers and
    the route's catch-up is an ERROR line naming why."""
    import logging

    from runonce.missed.backfill import catch_up
    from runonce.run.runner import Runner

    text = WIDE_ROUTES.replace("    job: minutely-job", "    job: minutely-job\n    catch_up: all")
    routes = parse_routes(text, "t")
    runner = Runner(
        store, {}, routes=routes, lease=LEASE, retention=timedelta(days=40), dispatch_timeout=timedelta(seconds=30)
    )
    with caplog.at_level(logging.ERROR, logger="runonce.catch_up"):
        caught = await catch_up(runner, store, routes, NOW, NOW, lease=LEASE, retention=timedelta(days=40))
    assert caught == []
    [line] = [r for r in caplog.records if r.name == "runonce.catch_up"]
    assert line.levelname == "ERROR" and "catch-up of route minutely skipped" in line.getMessage()
    assert "more than 20000 fire times" in line.getMessage()


async def test_an_audit_delivery_without_a_schedule_time_is_refused_before_its_run_is_claimed() -> None:
    """A Cloud Tasks delivery (found by the fuzz): before, its run was claimed and the audit raised,
    answering 504 `unknown` with the claim kept."""
    from runonce.stores.memory import MemoryStore

    store = MemoryStore()
    app = create_app(Settings(routes=WIDE_ROUTES, auth="none"), store=store, clock=lambda: NOW)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runonce") as http,
    ):
        headers = {"X-CloudTasks-QueueName": "q", "X-CloudTasks-TaskName": "t"}
        refused = await http.post("/v1/audit:run?project=proj-1&location=us-central1", json={}, headers=headers)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["field"] == "X-CloudScheduler-ScheduleTime"
        assert await store.list(NOW, route="_audit") == []


# -- the range's edges ----------------------------------------------------------------------------


async def test_an_audit_of_an_empty_range_is_refused_naming_its_end(store: RunStore) -> None:
    at = NOW - timedelta(hours=1)
    with pytest.raises(RangeRefused) as refused:
        await audit(store, ROUTES, at, at, NOW, lease=LEASE, retention=RETENTION)
    assert refused.value.field == "to" and "is not after the start of the range" in refused.value.reason


async def test_an_audit_starting_at_now_minus_the_lease_has_nothing_due_and_is_refused(store: RunStore) -> None:
    with pytest.raises(RangeRefused) as refused:
        await audit(store, {"hourly": ROUTES["hourly"]}, NOW - LEASE, NOW, NOW, lease=LEASE, retention=RETENTION)
    assert refused.value.field == "from" and "not due yet" in refused.value.reason


async def test_an_audit_from_just_after_a_fire_time_reports_the_later_fire_times(store: RunStore) -> None:
    """`--since` counts from a clock with microseconds: the range starts mid-second after 09:00."""
    start = NOW - timedelta(hours=3) + timedelta(microseconds=500_000)
    report = await audit(store, {"hourly": ROUTES["hourly"]}, start, NOW, NOW, lease=LEASE, retention=RETENTION)
    assert [format_schedule_time(run.time) for run in report.missed] == ["2026-03-08T10:00:00Z", "2026-03-08T11:00:00Z"]


def test_runonce_audit_of_more_fire_times_than_it_computes_names_the_range_flags(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(WIDE_ROUTES)
    monkeypatch.setenv("RUNONCE_ROUTES_FILE", str(path))
    monkeypatch.setenv("RUNONCE_RETENTION_SECONDS", str(40 * 86400))
    result = cli("audit", "--since", "15d")
    assert result.exit_code == 2 and "--from/--to: more than 20000 fire times" in result.output, result.output


def test_a_duration_of_at_most_ten_years_is_accepted() -> None:
    ten_years = timedelta(days=3650)
    assert parse_duration("3650d", "since") == ten_years
    assert parse_duration(str(int(ten_years.total_seconds())), "since") == ten_years
    for bad in ("3650d1s", str(int(ten_years.total_seconds()) + 1)):
        with pytest.raises(RangeRefused) as refused:
            parse_duration(bad, "since")
        assert refused.value.field == "since" and "at most ten years" in refused.value.reason


# -- catch-up's edges -----------------------------------------------------------------------------


async def test_a_route_without_catch_up_is_never_caught_up_however_much_it_missed(store: RunStore) -> None:
    assert ROUTES["hourly"].catch_up == "none"
    assert await catch_up_runs(store, "hourly", ROUTES["hourly"], NOW, NOW, lease=LEASE, retention=RETENTION) == []


async def test_catch_up_never_dispatches_a_fire_time_as_old_as_the_retention(store: RunStore) -> None:
    """A record claimed at 11:00 expires at 11:00 + retention, now: its absence proves nothing."""
    one_hour = timedelta(hours=1)
    route = CATCH_UP["latest"]  # hourly; window: the retention
    assert await catch_up_runs(store, "latest", route, NOW, NOW, lease=LEASE, retention=one_hour) == []
    longer = one_hour + timedelta(seconds=1)  # the 11:00 record would still be kept
    [run] = await catch_up_runs(store, "latest", route, NOW, NOW, lease=LEASE, retention=longer)
    assert format_schedule_time(run.time) == "2026-03-08T11:00:00Z"


# -- the report's JSON and lines ------------------------------------------------------------------


async def test_the_audits_json_names_its_range_its_routes_and_each_runs_time_zone(store: RunStore) -> None:
    start = datetime(2026, 3, 8, 6, 0, tzinfo=UTC)
    report = await audit(store, ROUTES, start, NOW, NOW, lease=LEASE, retention=RETENTION)
    body = json.loads(json.dumps(report.to_json()))
    assert (body["from"], body["to"], body["routes"]) == (
        "2026-03-08T06:00:00Z",
        "2026-03-08T11:55:00Z",
        ["hourly", "nightly"],
    )
    [nightly] = [run for run in body["missed"] if run["route"] == "nightly"]
    assert nightly["time_zone"] == "America/New_York" and nightly["local_time"] == "2026-03-08T03:00:00-04:00"
    assert {run["time_zone"] for run in body["missed"] if run["route"] == "hourly"} == {"UTC"}


def test_a_missed_runs_line_shows_its_local_time_in_the_routes_zone() -> None:
    [run] = scheduled_runs(
        {"nightly": ROUTES["nightly"]}, datetime(2026, 3, 9, 6, tzinfo=UTC), datetime(2026, 3, 9, 7, tzinfo=UTC)
    )
    assert "  2026-03-09T06:30:00Z  (2026-03-09 02:30:00-0400 America/New_York)  " in run.line(), run.line()


# -- the audit job's run --------------------------------------------------------------------------


async def deliver_audit_job(settings: Settings, store: RunStore, body: dict) -> httpx.Response:
    """Scheduler's delivery of the audit job's 12:00 run, with `body`, to an app on `store` at NOW."""
    app = create_app(settings, store=store, clock=lambda: NOW)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runonce") as http,
    ):
        headers = {"X-CloudScheduler-JobName": "runonce-audit", "X-CloudScheduler-ScheduleTime": "2026-03-08T12:00:00Z"}
        return await http.post("/v1/audit:run", json=body, headers=headers)


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"since": 600}, "body.since", "must be a duration string"),
        ({"since": "soon"}, "body.since", "not a duration"),
        ({"until": "1h"}, "body.until", "unknown field"),
        ({"since": "10m", "until": "1h", "zone": "UTC"}, "body.until", "unknown field"),
    ],
)
async def test_an_audit_body_other_than_a_since_duration_is_refused_naming_the_field(
    body: dict, field: str, says: str
) -> None:
    from runonce.stores.memory import MemoryStore

    store = MemoryStore()
    refused = await deliver_audit_job(Settings(routes=ROUTES_TEXT, auth="none"), store, body)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["field"] == field and says in error["message"], error
    assert await store.list(NOW, route="_audit") == []


async def test_an_audit_job_reaching_past_the_retention_reports_what_the_store_still_keeps() -> None:
    """`since` longer than the retention: the audit reports from the earliest auditable time on,
    rather than nothing."""
    from runonce.stores.memory import MemoryStore

    settings = Settings(routes=ROUTES_TEXT, auth="none", retention_seconds=86400)
    answer = await deliver_audit_job(settings, MemoryStore(), {"since": "2d"})
    assert answer.status_code == 200, answer.text
    missed = [(run["route"], run["schedule_time"]) for run in answer.json()["missed"]]
    assert len(missed) == 23 + 1 and missed[0] == ("hourly", "2026-03-07T13:00:00Z")  # hourly 13:00..11:00
    assert ("nightly", "2026-03-08T07:00:00Z") in missed


def audit_job(store: RunStore) -> AuditTarget:
    """The audit as the target of its job's run, on the test's routes, store and clock."""
    return AuditTarget(store, ROUTES, lease=LEASE, retention=RETENTION, clock=lambda: NOW, metrics=Metrics())


def audit_run(schedule_time: str) -> DispatchRequest:
    return DispatchRequest(
        run_id="a" * 64, route="_audit", job="runonce-audit", schedule_time=schedule_time, source="scheduler"
    )


async def left_in_progress(store: RunStore, n: int, at: datetime, lease: timedelta = LEASE) -> str:
    """A run of `hourly` claimed at `at` whose attempt never finished (it stays `in_progress`)."""
    run_id = f"{n:064x}"
    new = replace(new_run(run_id, body_sha256({}), route="hourly"), schedule_time=format_schedule_time(at))
    await store.claim(new, at, lease, RETENTION)
    return run_id


def unresolved_lines(caplog: pytest.LogCaptureFixture) -> list[dict]:
    return [r.fields for r in caplog.records if r.name == "runonce.audit" and r.fields.get("outcome") == "unresolved"]


async def test_an_audit_reports_every_unresolved_run_up_to_its_limit_oldest_first(
    store: RunStore, caplog: pytest.LogCaptureFixture
) -> None:
    """More than a store listing's default page (50): every one gets its line, the oldest first."""
    stuck = [await left_in_progress(store, n, NOW - 3 * LEASE - timedelta(minutes=n)) for n in range(60)]
    with caplog.at_level(logging.WARNING, logger="runonce.audit"):
        await audit_job(store).dispatch(audit_run("2026-03-08T12:00:00Z"))
    assert [line["run_id"] for line in unresolved_lines(caplog)] == stuck[::-1]


async def test_an_audit_reports_a_run_unresolved_once_its_lease_has_run_out(
    store: RunStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A run claimed with a longer lease (a lease setting changed since) counts only when that lease
    ends: at its end exactly, it does."""
    ended = await left_in_progress(store, 1, NOW - 4 * LEASE, lease=4 * LEASE)
    await left_in_progress(store, 2, NOW - 4 * LEASE, lease=4 * LEASE + timedelta(seconds=1))
    with caplog.at_level(logging.WARNING, logger="runonce.audit"):
        await audit_job(store).dispatch(audit_run("2026-03-08T12:00:00Z"))
    assert [line["run_id"] for line in unresolved_lines(caplog)] == [ended]


async def test_a_late_retry_of_an_audit_older_than_the_store_keeps_reports_nothing(
    store: RunStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Its whole range is past the retention: no record there proves a miss, so none is reported."""
    job = audit_job(store)
    with caplog.at_level(logging.WARNING, logger="runonce.audit"):
        said = await job.dispatch(audit_run("2026-03-06T12:00:00Z"))
    assert said.startswith("audit: nothing to report") and "2026-03-06T11:55:00Z" in said, said
    assert job.reports == {} and [r for r in caplog.records if r.name == "runonce.audit"] == []


# -- start-up's catch-up checks -------------------------------------------------------------------


def test_every_catch_up_window_as_long_as_the_retention_or_longer_stops_start_up() -> None:
    routes = parse_routes(
        """
routes:
  all:
    target: {type: log}
    job: j-all
    schedule: "*/5 * * * *"
    namespace: {project: proj-1, location: us-central1}
    catch_up: all
    catch_up_window_seconds: 7200
  all-longer:
    target: {type: log}
    job: j-all-longer
    schedule: "*/5 * * * *"
    namespace: {project: proj-1, location: us-central1}
    catch_up: all
    catch_up_window_seconds: 7201
""",
        "test",
    )
    problems = check_catch_up_windows(routes, 7200)
    assert [problem.split(":")[0] for problem in problems] == ["route 'all'", "route 'all-longer'"], problems
    assert all("must be below RUNONCE_RETENTION_SECONDS" in problem for problem in problems)
    assert check_catch_up_windows(routes, 7202) == []


def test_a_too_wide_catch_up_window_stops_start_up_after_routes_that_do_not_catch_up() -> None:
    text = WIDE_ROUTES.replace("    job: minutely-job", "    job: minutely-job\n    catch_up: latest")
    routes = parse_routes(text + ROUTES_TEXT.split("routes:\n", 1)[1], "test")  # hourly sorts first
    [problem] = check_catch_up_windows(routes, 40 * 86400, NOW)
    assert problem.startswith("route 'minutely': field 'catch_up_window_seconds'"), problem


def test_a_catch_up_window_that_fits_only_without_the_dst_margin_stops_start_up() -> None:
    """A window of 19,940 minutely fire times, plus the two hours a DST day may add, is over 20,000."""
    text = WIDE_ROUTES.replace(
        "    job: minutely-job", f"    job: minutely-job\n    catch_up: all\n    catch_up_window_seconds: {19_940 * 60}"
    )
    [problem] = check_catch_up_windows(parse_routes(text, "test"), 40 * 86400, NOW)
    assert "holds more than 20000 fire times" in problem, problem
