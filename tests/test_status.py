"""`runonce status` and GET /v1/status (runonce/missed/status.py): one row per route from a real store
(SQLite, and the Firestore emulator) holding a history with a missed fire time, a failed last run,
an `unknown` run and a healthy route. The clock is the test's."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

import runonce.status
from runonce.api.main import create_app
from runonce.cli import main
from runonce.missed.audit import body_sha256, scheduled_runs
from runonce.missed.status import RECENT_LIMIT, status
from runonce.routes import parse_routes
from runonce.settings import Settings
from runonce.stores import Finish, NewRun, RunStore
from runonce.stores.base import COMPLETED, FAILED, IN_PROGRESS, RunRecord
from runonce.stores.memory import MemoryStore
from runonce.stores.sqlite import SQLiteStore
from tests.support import oidc
from tests.support.auth_cases import ADMIN, AUDIENCE, SCHEDULER, bearer, token
from tests.support.stores import FIRESTORE_PROJECT, firestore_store

LEASE = timedelta(seconds=300)
RETENTION = timedelta(days=1)
NOW = datetime(2026, 3, 8, 12, 30, tzinfo=UTC)
SINCE = "6h"  # fire times 07:00 .. 12:00, all due (before NOW - the lease)
NAMESPACE = "namespace: {project: proj-1, location: us-central1}"
ROUTES_TEXT = f"""
routes:
  healthy: {{target: {{type: log}}, job: healthy-job, schedule: "0 * * * *", {NAMESPACE}}}
  gappy: {{target: {{type: log}}, job: gappy-job, schedule: "0 * * * *", {NAMESPACE}}}
  flaky: {{target: {{type: log}}, job: flaky-job, schedule: "0 * * * *", {NAMESPACE}}}
  stuck:
    target: {{type: log}}
    job: stuck-job
    schedule: "30 9 * * *"
    time_zone: Europe/Paris
    {NAMESPACE}
  adhoc: {{target: {{type: log}}}}
"""
ROUTES = parse_routes(ROUTES_TEXT, "test")


async def claim(store: RunStore, run_id: str, route: str, schedule_time: str | None, at: datetime):
    new = NewRun(
        run_id=run_id,
        route=route,
        source="scheduler" if schedule_time else "tasks",
        project="proj-1",
        location="us-central1",
        job=f"{route}-job",
        schedule_time=schedule_time,
        task=None if schedule_time else f"task-{run_id}",
        body_sha256=body_sha256({}),
    )
    return await store.claim(new, at, LEASE, RETENTION)


async def write_history(store: RunStore) -> dict[str, str]:
    """The history every test reads; returns the run_ids a test names."""
    named: dict[str, str] = {}
    start = NOW - timedelta(hours=6)
    for route in ("healthy", "gappy", "flaky"):
        runs = scheduled_runs({route: ROUTES[route]}, start - timedelta(hours=2), NOW)
        for i, run in enumerate(runs):
            if route == "gappy" and i == len(runs) - 3:
                named["gap"] = run.run_id
                continue  # 10:00: Scheduler never delivered it
            at = run.time + timedelta(seconds=1)
            held = await claim(store, run.run_id, route, run.delivery.schedule_time_text, at)
            last = i == len(runs) - 1
            if route == "flaky" and last:
                await store.finish(held, Finish(FAILED, last_error="target failed: 403 PERMISSION_DENIED"), at)
            else:
                await store.finish(held, Finish(COMPLETED, target={"type": "log", "resource": f"log/{i}"}), at)
    # stuck: today's 09:30 Paris (08:30Z) run answered `unknown`: its claim was kept and its lease ran out.
    [run] = scheduled_runs({"stuck": ROUTES["stuck"]}, start, NOW)
    held = await claim(store, run.run_id, "stuck", run.delivery.schedule_time_text, run.time)
    await store.finish(held, Finish(IN_PROGRESS, last_error="unknown: the target did not answer"), run.time)
    named["unknown"] = run.run_id
    # adhoc: Cloud Tasks runs, no schedule: one completed, and one whose lease is still live (not unresolved).
    done = await claim(store, "a" * 64, "adhoc", None, NOW - timedelta(hours=1))
    await store.finish(done, Finish(COMPLETED, target={"type": "log", "resource": "log/adhoc"}), NOW)
    await claim(store, "b" * 64, "adhoc", None, NOW - timedelta(seconds=60))
    return named


def expected(named: dict[str, str]) -> dict:
    return {
        "attention": True,
        "routes": [
            {
                "route": "adhoc",
                "schedule": None,
                "time_zone": None,
                "next_fire_time": None,
                "last_fire_time": None,
                "last_status": "in_progress",
                "last_success": "2026-03-08T11:30:00Z",
                "counts": {"completed": 1, "in_progress": 1},
                "missed": [],
                "unresolved": [],
            },
            {
                "route": "flaky",
                "schedule": "0 * * * *",
                "time_zone": "UTC",
                "next_fire_time": "2026-03-08T13:00:00Z",
                "last_fire_time": "2026-03-08T12:00:00Z",
                "last_status": "failed",
                "last_success": "2026-03-08T11:00:00Z",
                "counts": {"completed": 5, "failed": 1},
                "missed": ["2026-03-08T12:00:00Z"],  # the audit's rule: a failed run did not run
                "unresolved": [],
            },
            {
                "route": "gappy",
                "schedule": "0 * * * *",
                "time_zone": "UTC",
                "next_fire_time": "2026-03-08T13:00:00Z",
                "last_fire_time": "2026-03-08T12:00:00Z",
                "last_status": "completed",
                "last_success": "2026-03-08T12:00:00Z",
                "counts": {"completed": 5},
                "missed": ["2026-03-08T10:00:00Z"],
                "unresolved": [],
            },
            {
                "route": "healthy",
                "schedule": "0 * * * *",
                "time_zone": "UTC",
                "next_fire_time": "2026-03-08T13:00:00Z",
                "last_fire_time": "2026-03-08T12:00:00Z",
                "last_status": "completed",
                "last_success": "2026-03-08T12:00:00Z",
                "counts": {"completed": 6},
                "missed": [],
                "unresolved": [],
            },
            {
                "route": "stuck",
                "schedule": "30 9 * * *",
                "time_zone": "Europe/Paris",
                "next_fire_time": "2026-03-09T08:30:00Z",
                "last_fire_time": "2026-03-08T08:30:00Z",
                "last_status": "in_progress",
                "last_success": None,
                "counts": {"in_progress": 1},
                "missed": [],
                "unresolved": [{"run_id": named.get("unknown"), "status": "in_progress", "age_seconds": 4 * 3600}],
            },
        ],
    }


@pytest.fixture(params=["sqlite", "firestore"])
def store_env(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The store's RUNONCE_* settings in the environment, and a factory for a handle on it."""
    routes = tmp_path / "routes.yaml"
    routes.write_text(ROUTES_TEXT)
    monkeypatch.setenv("RUNONCE_ROUTES_FILE", str(routes))
    monkeypatch.setenv("RUNONCE_LEASE_SECONDS", str(int(LEASE.total_seconds())))
    monkeypatch.setenv("RUNONCE_RETENTION_SECONDS", str(int(RETENTION.total_seconds())))
    monkeypatch.setattr(runonce.status, "_now", lambda: NOW)
    if request.param == "sqlite":
        db = tmp_path / "runs.db"
        monkeypatch.setenv("RUNONCE_STORE", f"sqlite:///{db}")
        return lambda: SQLiteStore(str(db))
    request.getfixturevalue("firestore_emulator")
    collection = f"runs_{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("RUNONCE_STORE", "firestore")
    monkeypatch.setenv("RUNONCE_FIRESTORE_PROJECT", FIRESTORE_PROJECT)
    monkeypatch.setenv("RUNONCE_FIRESTORE_COLLECTION", collection)
    monkeypatch.setenv("RUNONCE_STORE_TIMEOUT_SECONDS", "30")  # a loaded machine: the emulator's first answers
    return lambda: firestore_store(collection, timeout_seconds=30)


@pytest.fixture
async def history(store_env: Callable[[], RunStore]) -> dict[str, str]:
    store = store_env()
    named = await write_history(store)
    await store.close()
    return named


def run_cli(*args: str):
    return CliRunner().invoke(main, ["status", *args], catch_exceptions=False)


def test_json_shows_every_route_and_exits_1_when_one_needs_attention(history: dict[str, str]) -> None:
    result = run_cli("--since", SINCE, "--format", "json")
    assert json.loads(result.output) == expected(history)
    assert result.exit_code == 1


def test_the_table_has_a_row_per_route_and_says_what_needs_attention(history: dict[str, str]) -> None:
    result = run_cli("--since", SINCE)
    lines = result.output.splitlines()
    assert lines[0].split() == [
        "ROUTE",
        "SCHEDULE",
        "TIME_ZONE",
        "NEXT_FIRE",
        "LAST_FIRE",
        "LAST",
        "LAST_SUCCESS",
        "RUNS",
        "ATTENTION",
    ]
    rows = {line.split()[0]: " ".join(line.split()) for line in lines[1:6]}  # columns are padded to align
    assert list(rows) == ["adhoc", "flaky", "gappy", "healthy", "stuck"]
    assert rows["healthy"].split()[-2:] == ["completed=6", "-"]
    assert rows["gappy"].endswith("completed=5 1 missed")
    assert rows["flaky"].endswith("completed=5 failed=1 1 missed, last failed")
    assert "30 9 * * * Europe/Paris 2026-03-09T08:30:00Z 2026-03-08T08:30:00Z in_progress -" in rows["stuck"]
    assert rows["stuck"].endswith("1 unresolved")
    assert lines[6:] == [
        "flaky: missed fire time 2026-03-08T12:00:00Z",
        "gappy: missed fire time 2026-03-08T10:00:00Z",
        f"stuck: unresolved run {history['unknown']} (in_progress, 14400s since its latest attempt)",
        "5 route(s) from 2026-03-08T06:30:00Z to 2026-03-08T12:30:00Z: 3 need(s) attention",
    ]
    assert result.exit_code == 1


def test_a_healthy_route_alone_exits_0(history: dict[str, str]) -> None:
    result = run_cli("--route", "healthy", "--since", SINCE, "--format", "json")
    assert json.loads(result.output) == {"attention": False, "routes": [expected(history)["routes"][3]]}
    assert result.exit_code == 0
    assert run_cli("--route", "adhoc").exit_code == 0  # a live lease is not unresolved


def test_the_default_window_is_the_retention_and_a_wider_one_is_refused(history: dict[str, str]) -> None:
    result = run_cli("--route", "healthy", "--format", "json")
    # retention 1 day: every fire time the history holds (05:00 .. 12:00)
    assert json.loads(result.output)["routes"][0]["counts"] == {"completed": 8}
    refused = run_cli("--since", "2d")
    assert refused.exit_code == 2
    assert "--since: 172800s reaches back past what the store keeps (RUNONCE_RETENTION_SECONDS=86400)" in (
        refused.output
    )
    unknown = run_cli("--route", "nope")
    assert unknown.exit_code == 2 and "--route: no route 'nope'" in unknown.output
    huge = run_cli("--since", "9" * 5000)
    assert huge.exit_code == 2 and (huge.exception is None or isinstance(huge.exception, SystemExit))
    assert "--since: a value of 5000 characters is not a duration" in huge.output and "9" * 50 not in huge.output


class CountingStore(MemoryStore):
    """A real store that records every read it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, object]] = []

    async def list(self, now, route=None, status=None, limit=50) -> list[RunRecord]:  # type: ignore[no-untyped-def]
        self.reads.append(("list", (route, status, limit)))
        return await super().list(now, route=route, status=status, limit=limit)

    async def get_many(self, run_ids, now) -> dict[str, RunRecord]:  # type: ignore[no-untyped-def]
        self.reads.append(("get_many", len(run_ids)))
        return await super().get_many(run_ids, now)

    async def load(self, run_id: str):  # type: ignore[no-untyped-def]
        self.reads.append(("load", run_id))
        return await super().load(run_id)


async def test_it_reads_the_windows_fire_times_by_key_and_a_bounded_list() -> None:
    store = CountingStore()
    await write_history(store)
    store.reads.clear()
    report = await status(
        store, {"healthy": ROUTES["healthy"]}, NOW, since=timedelta(hours=6), lease=LEASE, retention=RETENTION
    )
    assert report.routes[0].counts == {"completed": 6}
    lists = [args for kind, args in store.reads if kind == "list"]
    assert lists and all(limit <= RECENT_LIMIT for _route, _status, limit in lists)
    assert ("get_many", 6) in store.reads
    # the 6 fire times by key, in the store's one batch read (or one load each): nothing else
    assert len([kind for kind, _ in store.reads if kind == "load"]) in (0, 6)


@pytest.fixture
async def api(certs: oidc.CertsServer, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    store = SQLiteStore(str(tmp_path / "runs.db"))
    await write_history(store)
    settings = Settings(
        routes=ROUTES_TEXT,
        auth="oidc",
        audience=[AUDIENCE],
        allowed_callers=[SCHEDULER],
        admin_callers=[ADMIN],
        oidc_certs_url=certs.url,
        lease_seconds=LEASE.total_seconds(),
        retention_seconds=RETENTION.total_seconds(),
    )
    app = create_app(settings, store=store, clock=lambda: NOW)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runonce") as client,
    ):
        yield client


async def test_the_endpoint_answers_admins_only(api: httpx.AsyncClient, google_key: oidc.SigningKey) -> None:
    anonymous = await api.get("/v1/status")
    as_scheduler = await api.get("/v1/status", headers=bearer(token(google_key)))
    as_admin = await api.get("/v1/status", params={"since": SINCE}, headers=bearer(token(google_key, email=ADMIN)))
    assert (anonymous.status_code, as_scheduler.status_code, as_admin.status_code) == (401, 403, 200)
    assert "routes" not in anonymous.json() and "routes" not in as_scheduler.json()
    body = as_admin.json()
    assert body["attention"] is True and [row["route"] for row in body["routes"]] == [
        "adhoc",
        "flaky",
        "gappy",
        "healthy",
        "stuck",
    ]
    assert body["routes"][4]["unresolved"][0]["age_seconds"] == 4 * 3600


async def test_the_endpoint_narrows_to_one_route_and_refuses_bad_input(
    api: httpx.AsyncClient, google_key: oidc.SigningKey
) -> None:
    admin = bearer(token(google_key, email=ADMIN))
    one = await api.get("/v1/status", params={"route": "healthy", "since": SINCE}, headers=admin)
    assert one.status_code == 200
    assert one.json() == {"attention": False, "routes": [expected({})["routes"][3]]}
    missing = await api.get("/v1/status", params={"route": "nope"}, headers=admin)
    assert missing.status_code == 404
    too_wide = await api.get("/v1/status", params={"since": "2d"}, headers=admin)
    assert too_wide.status_code == 400 and too_wide.json()["error"]["field"] == "since"
    for huge in ("9" * 5000, "9" * 5000 + "d", "1" + "0" * 30 + "s"):  # past int()'s 4,300 digits, or any range
        refused = await api.get("/v1/status", params={"since": huge}, headers=admin)
        assert refused.status_code == 400, refused.text[:300]
        error = refused.json()["error"]
        assert error["field"] == "since" and "ten years" in error["message"] and len(error["message"]) < 200


def test_a_store_that_does_not_exist_yet_is_read_as_empty_and_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text(ROUTES_TEXT)
    monkeypatch.setenv("RUNONCE_ROUTES_FILE", str(routes))
    monkeypatch.setenv("RUNONCE_STORE", f"sqlite:///{tmp_path / 'never.db'}")
    monkeypatch.setattr(runonce.status, "_now", lambda: NOW)
    result = CliRunner().invoke(main, ["status", "--route", "healthy", "--since", SINCE, "--format", "json"])
    assert result.exit_code == 1  # every fire time due is missed: nothing has run here
    assert len(json.loads(result.stdout)["routes"][0]["missed"]) == 6
    assert "no store at" in result.stderr and not (tmp_path / "never.db").exists()
