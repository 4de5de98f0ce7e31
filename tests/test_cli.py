"""The `runonce` command line, driven through click's CliRunner against a real SQLite store."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runonce.stores import Finish
from runonce.stores.base import COMPLETED, SKIPPED
from runonce.stores.sqlite import SQLiteStore
from tests.support.procs import REPO
from tests.support.runs import LEASE, RETENTION, new_run


def seed(db: Path, *, finished: bool, skipped: bool = False) -> str:
    """One run, claimed now (live lease) and optionally completed (or skipped)."""

    async def go() -> str:
        store = SQLiteStore(str(db))
        now = datetime.now(UTC)
        claim = await store.claim(new_run(), now, LEASE, RETENTION)
        if finished:
            await store.finish(claim, Finish(COMPLETED, target={"type": "log", "resource": "log/x"}), now)
        if skipped:
            await store.finish(claim, Finish(SKIPPED, last_error="late: first claimed 7200s after …"), now)
        await store.close()
        return claim.record.run_id

    return asyncio.run(go())


KEY_ROUTES = """
routes:
  etl: {target: {type: log}}
  billing:
    target: {type: log}
    namespace: {project: billing-project, location: europe-west1}
  deduped: {target: {type: log}, forced_runs: dedupe}
"""


@pytest.fixture
def routes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    path = tmp_path / "routes.yaml"
    path.write_text(KEY_ROUTES)
    monkeypatch.setenv("RUNONCE_ROUTES_FILE", str(path))
    return path


def test_key_prints_the_run_id_of_a_scheduler_delivery(cli, routes: Path) -> None:
    result = cli(
        "key",
        "--route",
        "etl",
        "--job",
        "nightly",
        "--schedule-time",
        "2026-10-16T05:00:00-07:00",
        "--project",
        "proj-1",
        "--location",
        "us-central1",
        "--canonical",
    )
    canonical = "runonce/v1|scheduler|proj-1|us-central1|etl|nightly|2026-10-16T12:00:00Z"
    assert result.exit_code == 0
    assert result.output.splitlines() == [hashlib.sha256(canonical.encode()).hexdigest(), canonical]


def test_key_of_a_forced_run_and_of_a_task(cli, routes: Path) -> None:
    forced = cli(
        "key",
        "--route",
        "etl",
        "--job",
        "nightly",
        "--schedule-time",
        "2026-10-16T12:00:00Z",
        "--forced",
        "--canonical",
    )
    task = cli("key", "--route", "etl", "--queue", "exports", "--task", "t-1", "--canonical")
    assert forced.output.splitlines()[1] == "runonce/v1|scheduler-forced|||etl|nightly|2026-10-16T12:00:00Z"
    assert task.output.splitlines()[1] == "runonce/v1|tasks|||etl|exports|t-1"


def test_key_with_a_bad_value_exits_2_naming_the_flag(cli, routes: Path) -> None:
    result = cli("key", "--route", "etl", "--job", "nightly", "--schedule-time", "noon")
    assert result.exit_code == 2
    assert "--schedule-time" in result.output and "RFC 3339" in result.output and "X-Cloud" not in result.output
    result = cli("key", "--route", "etl", "--job", "night ly", "--schedule-time", "2026-10-16T12:00:00Z")
    assert result.exit_code == 2 and "--job" in result.output and "X-Cloud" not in result.output
    result = cli(
        "key", "--route", "etl", "--job", "nightly", "--schedule-time", "2026-10-16T12:00:00Z", "--project", "P"
    )
    assert result.exit_code == 2 and "--project" in result.output and "query" not in result.output
    result = cli("key", "--route", "etl", "--schedule-time", "2026-10-16T12:00:00Z")
    assert result.exit_code == 2 and "--job" in result.output and "X-Cloud" not in result.output


def test_key_uses_the_routes_namespace_like_the_server(cli, routes: Path) -> None:
    result = cli(
        "key", "--route", "billing", "--job", "nightly", "--schedule-time", "2026-10-16T12:00:00Z", "--canonical"
    )
    assert result.exit_code == 0, result.output
    assert (
        result.output.splitlines()[1]
        == "runonce/v1|scheduler|billing-project|europe-west1|billing|nightly|2026-10-16T12:00:00Z"
    )
    flags = cli(
        "key",
        "--route",
        "billing",
        "--job",
        "nightly",
        "--schedule-time",
        "2026-10-16T12:00:00Z",
        "--project",
        "other-project",
        "--canonical",
    )  # as the query string overrides the route
    assert flags.output.splitlines()[1].startswith("runonce/v1|scheduler|other-project|europe-west1|billing|")


def test_key_refuses_a_route_the_routes_file_does_not_have(cli, routes: Path) -> None:
    result = cli("key", "--route", "nope", "--job", "nightly", "--schedule-time", "2026-10-16T12:00:00Z")
    assert result.exit_code == 2 and "--route" in result.output and str(routes) in result.output


def test_key_of_a_force_run_on_a_deduping_route_is_the_scheduled_run(cli, routes: Path) -> None:
    args = ("--job", "nightly", "--schedule-time", "2026-10-16T12:00:00Z", "--canonical")
    assert (
        cli("key", "--route", "deduped", "--forced", *args).output.splitlines()[1].startswith("runonce/v1|scheduler|")
    )


def test_runs_show_and_list(cli) -> None:
    run_id = seed(cli.db, finished=True)
    shown = cli("runs", "show", run_id)
    assert shown.exit_code == 0 and json.loads(shown.output)["status"] == "completed"
    listed = cli("runs", "list", "--status", "completed")
    assert listed.exit_code == 0 and run_id in listed.output and "log/x" in listed.output
    header, row = listed.output.splitlines()
    assert header.split() == ["RUN_ID", "STATUS", "ROUTE", "JOB", "SCHEDULE_TIME/TASK", "RESOURCE"]
    assert row.index("completed") == header.index("STATUS")  # the columns line up
    assert cli("runs", "list", "--status", "failed").output.splitlines() == [header]


def test_runs_list_shows_skipped_runs(cli) -> None:
    run_id = seed(cli.db, finished=False, skipped=True)
    listed = cli("runs", "list", "--status", "skipped")
    assert listed.exit_code == 0, listed.output
    [row] = listed.output.splitlines()[1:]
    assert row.split()[:2] == [run_id, "skipped"]
    assert json.loads(cli("runs", "show", run_id).output)["last_error"].startswith("late: ")
    as_json = cli("runs", "list", "--json")
    assert json.loads(as_json.output.splitlines()[0])["run_id"] == run_id


def test_runs_show_unknown_run_fails(cli) -> None:
    seed(cli.db, finished=True)
    result = cli("runs", "show", "0" * 64)
    assert result.exit_code == 1 and "no run" in result.output


def test_runs_release_ends_a_live_lease(cli) -> None:
    run_id = seed(cli.db, finished=False)
    released = cli("runs", "release", run_id)
    assert released.exit_code == 0 and "attempt 2" in released.output

    async def lease_left() -> timedelta:
        store = SQLiteStore(str(cli.db))
        record = await store.get(run_id, datetime.now(UTC))
        await store.close()
        return record.lease_expires - datetime.now(UTC)

    assert asyncio.run(lease_left()) <= timedelta(0)
    again = cli("runs", "release", run_id)
    assert again.exit_code == 1 and "no live lease" in again.output


def test_bad_settings_stop_with_one_message_naming_the_variable(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNONCE_LEASE_SECONDS", "4")
    monkeypatch.setenv("RUNONCE_DISPATCH_TIMEOUT_SECONDS", "5")
    result = cli("runs", "list")
    assert result.exit_code == 1
    assert "RUNONCE_LEASE_SECONDS (4) must be at least RUNONCE_DISPATCH_TIMEOUT_SECONDS (5)" in result.output


def test_bad_store_url_is_refused(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNONCE_STORE", "postgres://x")
    result = cli("runs", "list")
    assert result.exit_code == 1 and "RUNONCE_STORE" in result.output and "sqlite:///PATH" in result.output


def test_serve_refuses_a_bad_routes_file(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text(
        "routes:\n  Bad Name:\n    target: {type: log}\n  etl:\n    target: {type: log}\n    colour: red\n"
    )
    monkeypatch.setenv("RUNONCE_ROUTES_FILE", str(routes))
    monkeypatch.setenv("RUNONCE_AUTH", "none")
    result = cli("serve", "--port", "0")
    assert result.exit_code == 1
    assert f"routes file {routes}: route name 'Bad Name'" in result.output
    assert f"routes file {routes}: route 'etl': field 'colour': Extra inputs are not permitted" in result.output


def test_serve_without_routes_says_how_to_configure_them(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNONCE_AUTH", "none")
    result = cli("serve")
    assert result.exit_code == 1 and "RUNONCE_ROUTES_FILE" in result.output


def test_serve_refuses_auth_none_on_cloud_run(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNONCE_AUTH", "none")
    monkeypatch.setenv("RUNONCE_ROUTES", '{"routes": {"demo": {"target": {"type": "log"}}}}')
    monkeypatch.setenv("K_SERVICE", "runonce")
    result = cli("serve")
    assert result.exit_code == 1 and "RUNONCE_ALLOW_UNAUTHENTICATED" in result.output


@pytest.fixture
def collector_restored():
    """Undo what a successful `serve` start-up does to this process's garbage collector."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    gc.enable()


def test_serve_starts_serving_with_the_collector_on_and_start_up_frozen(
    cli, monkeypatch: pytest.MonkeyPatch, collector_restored
) -> None:
    """Start-up runs without collections (issue 14: ~0.1 s of a cold start), but the server must
    collect again once it serves, or every cycle a delivery leaves would stay in memory."""
    import runonce.cli
    from runonce.api.server import DrainingServer

    collections_in_start_up: list[int] = []
    seen: dict = {}
    start_up = runonce.cli._start_up
    in_start_up = False

    def watched_start_up(*args):  # type: ignore[no-untyped-def]
        nonlocal in_start_up
        in_start_up = True
        try:
            return start_up(*args)
        finally:
            in_start_up = False

    def count(phase: str, info: dict) -> None:
        if phase == "start" and in_start_up:
            collections_in_start_up.append(info["generation"])

    def serving(self) -> None:  # instead of uvicorn's loop: how the collector stands when serving begins
        seen.update(enabled=gc.isenabled(), frozen=gc.get_freeze_count(), threshold=gc.get_threshold())

    monkeypatch.setattr(runonce.cli, "_start_up", watched_start_up)
    monkeypatch.setattr(DrainingServer, "run", serving)
    monkeypatch.setenv("RUNONCE_AUTH", "none")
    monkeypatch.setenv("RUNONCE_ROUTES", '{"routes": {"demo": {"target": {"type": "log"}}}}')
    gc.callbacks.append(count)
    try:
        result = cli("serve", "--port", "0")
    finally:
        gc.callbacks.remove(count)
    assert result.exit_code == 0, result.output
    assert collections_in_start_up == []  # settings, routes, create_app: thousands of objects, no pass
    assert seen["enabled"] is True
    assert seen["frozen"] > 10_000  # this process's objects, start-up's among them
    assert seen["threshold"] == (20_000, 20, 20)


def test_serve_that_refuses_its_config_leaves_the_collector_as_it_was(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    threshold, frozen = gc.get_threshold(), gc.get_freeze_count()
    monkeypatch.setenv("RUNONCE_AUTH", "none")
    result = cli("serve")  # no routes configured
    assert result.exit_code == 1 and "RUNONCE_ROUTES_FILE" in result.output
    assert gc.isenabled() and gc.get_threshold() == threshold and gc.get_freeze_count() == frozen


def test_uvicorn_factory_reports_bad_config_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from runonce.api.main import app_from_environment

    monkeypatch.setenv("RUNONCE_AUTH", "none")
    monkeypatch.setenv("RUNONCE_ROUTES", "routes: {}")
    with pytest.raises(SystemExit) as stopped:
        app_from_environment()
    assert str(stopped.value).startswith("runonce: RUNONCE_ROUTES: field 'routes'")


def run_cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`runonce ARGS` in a subprocess with only `env` as settings, no Google credentials anywhere (no
    ADC file, no emulator, no metadata server), and a deadline: a command that should refuse to
    start but starts anyway fails the test instead of hanging it."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RUNONCE_", "GOOGLE_", "FIRESTORE_", "GCE_", "CLOUDSDK_")) and k != "PORT"
    }
    gcloud = tmp_path / "gcloud-config"
    gcloud.mkdir(exist_ok=True)
    base.update(
        CLOUDSDK_CONFIG=str(gcloud),
        GCE_METADATA_HOST="127.0.0.1:9",
        GCE_METADATA_IP="127.0.0.1:9",
        GCE_METADATA_DETECT_RETRIES="1",  # the refused port is an answer: one probe, not three with back-off
        RUNONCE_AUTH="none",
        RUNONCE_ROUTES='{"routes": {"demo": {"target": {"type": "log"}}}}',
    )
    base.update(env)
    base = {name: value for name, value in base.items() if value}  # an empty value unsets it
    return subprocess.run(
        [sys.executable, "-m", "runonce.cli", *args],
        cwd=tmp_path,
        env={**base, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.subprocess
@pytest.mark.parametrize("args", [("serve", "--port", "0"), ("runs", "list"), ("runs", "show", "0" * 64)])
def test_firestore_without_credentials_says_how_to_fix_it_in_one_line(tmp_path: Path, args: tuple[str, ...]) -> None:
    done = run_cli(tmp_path, *args, RUNONCE_STORE="firestore")
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "gcloud auth application-default login" in done.stderr and "FIRESTORE_EMULATOR_HOST" in done.stderr


@pytest.mark.subprocess
@pytest.mark.parametrize("port", ["abc", "70000", "-1"])
def test_a_bad_port_variable_is_one_line(tmp_path: Path, port: str) -> None:
    done = run_cli(tmp_path, "serve", PORT=port, RUNONCE_STORE=f"sqlite:///{tmp_path / 'runs.db'}")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "PORT" in done.stderr and "Traceback" not in done.stderr


def test_a_rule_across_settings_is_reported_without_a_doubled_prefix(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNONCE_RETENTION_SECONDS", "10")
    result = cli("runs", "list")
    assert result.exit_code == 1
    assert "bad settings: RUNONCE_RETENTION_SECONDS (10)" in result.output and "settings: settings" not in result.output


@pytest.mark.parametrize(
    "args", [("runs", "list"), ("runs", "list", "--json"), ("runs", "show", "0" * 64), ("runs", "release", "0" * 64)]
)
def test_reading_runs_never_creates_a_store(cli, args: tuple[str, ...]) -> None:
    result = cli(*args)
    assert not cli.db.exists()
    assert f"no store at {cli.db}" in result.output
    assert result.exit_code == (0 if args[1] == "list" else 1)


@pytest.mark.parametrize("run_id", ["__x__", "..", "A" * 64])
def test_runs_show_refuses_what_is_not_a_run_id(cli, run_id: str) -> None:
    seed(cli.db, finished=True)
    result = cli("runs", "show", run_id)
    assert result.exit_code == 2 and "64 lowercase hex" in result.output


# --- a bad routes file: serve and lint refuse it in the same one line ---------------------------

WORKFLOW = "projects/my-project/locations/us-central1/workflows/etl"
IMPOSSIBLE_TIMES = [
    "2026-02-30",
    "2025-02-29",
    "2026-04-31",
    "2026-13-01",
    "2026-00-10",
    "0000-01-01",
    "2026-01-31T25:00:00Z",
    "2026-01-31 23:60:00",
    "2026-01-31t12:00:00.5+24:00",
    "2026-1-1 9:99:00",
]
"""Values YAML resolves as a date or a timestamp that datetime refuses to build."""
PLACES = {
    "target.labels.day": "target: {type: workflows, workflow: WF, labels: {day: VALUE}}",
    "target.argument.at": "target:\n      type: workflows\n      workflow: WF\n      argument:\n        at: VALUE",
    "target.argument.days[1]": "target: {type: workflows, workflow: WF, argument: {days: [x, VALUE]}}",
}


def lint_and_serve(cli, monkeypatch: pytest.MonkeyPatch, path: Path, **env: str) -> tuple[str, str]:
    """What `runonce lint PATH` and `runonce serve` (RUNONCE_ROUTES_FILE=PATH) refuse the file with:
    each exits 1 with exactly one line (lint's finding, then its count)."""
    monkeypatch.setenv("RUNONCE_AUTH", "none")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("RUNONCE_ROUTES", raising=False)
    monkeypatch.delenv("RUNONCE_ROUTES_FILE", raising=False)
    linted = cli("lint", str(path))
    assert linted.exit_code == 1, linted.output
    [finding, summary] = linted.output.splitlines()
    assert summary == "1 file(s): 1 error(s), 0 warning(s)"
    prefix = f"{path}: -: error: "
    assert finding.startswith(prefix) and finding.endswith(("[unreadable]", "[invalid_routes]")), finding
    monkeypatch.setenv("RUNONCE_ROUTES_FILE", str(path))
    served = cli("serve", "--port", "0")
    assert served.exit_code == 1, served.output
    [refusal] = served.output.splitlines()
    assert refusal.startswith("Error: "), refusal
    return finding.removeprefix(prefix).rsplit(" [", 1)[0], refusal.removeprefix("Error: ")


@pytest.mark.parametrize("value", [*IMPOSSIBLE_TIMES, "!!timestamp yesterday"])
@pytest.mark.parametrize("field", sorted(PLACES))
def test_a_date_or_time_yaml_cannot_build_is_refused_in_one_line_asking_to_quote_it(
    cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, field: str, value: str
) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text("routes:\n  r1:\n    " + PLACES[field].replace("WF", WORKFLOW).replace("VALUE", value) + "\n")
    linted, served = lint_and_serve(cli, monkeypatch, path)
    assert linted == served
    bare = value.removeprefix("!!timestamp ")
    assert served.startswith(f"routes file {path}: route 'r1': field '{field}': line "), served
    assert f"{bare} reads as a date or time but is not one (" in served
    assert served.endswith(f"quote it if it is text: '{bare}'"), served


@pytest.mark.parametrize("depth", [65, 200, 1200, 5000])
@pytest.mark.parametrize("form", ["json", "yaml"])
def test_a_file_nested_too_deep_is_refused_by_lint_as_by_serve(
    cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, depth: int, form: str
) -> None:
    path = tmp_path / f"routes.{form}"
    nested = "[" * depth + "]" * depth
    path.write_text(
        f'{{"routes": {{"r1": {{"target": {{"type": "log"}}, "x": {nested}}}}}}}'
        if form == "json"
        else "routes: " + nested
    )
    linted, served = lint_and_serve(cli, monkeypatch, path)
    assert linted == served
    assert served.startswith(f"routes file {path}: ") and "nested more than 64 deep" in served, served


CATCHING_UP = (
    "    target: {type: log}\n    namespace: {project: my-project, location: us-central1}\n"
    "    job: j1\n    schedule: '0 * * * *'\n    catch_up: latest\n"
)


@pytest.mark.parametrize(("count", "retention"), [(1, "86400"), (2, "86400"), (3, "7200")])
def test_catch_up_windows_past_the_retention_are_refused_in_one_line_by_lint_as_by_serve(
    cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, count: int, retention: str
) -> None:
    path = tmp_path / "routes.yaml"
    names = [f"r{index}" for index in range(1, count + 1)]
    path.write_text(
        "routes:\n"
        + "".join(f"  {name}:\n{CATCHING_UP}    catch_up_window_seconds: {retention}\n" for name in names)
        + f"  fine:\n{CATCHING_UP}    catch_up_window_seconds: 60\n"
    )
    linted, served = lint_and_serve(cli, monkeypatch, path, RUNONCE_RETENTION_SECONDS=retention)
    assert linted == served
    refusals = served.split("; ")
    assert len(refusals) == count
    for name, refusal in zip(names, refusals, strict=True):
        assert refusal == (
            f"routes file {path}: route {name!r}: field 'catch_up_window_seconds': {retention} must be below "
            f"RUNONCE_RETENTION_SECONDS ({retention}): older runs have no record left, so a catch-up could run "
            "them again"
        )
    workers = cli("serve", "--port", "0", "--workers", "2")  # refused once, before any worker starts
    assert workers.exit_code == 1 and workers.output == f"Error: {served}\n"


def test_lint_passes_a_catch_up_window_below_the_retention_it_reads_from_the_environment(
    cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(f"routes:\n  r1:\n{CATCHING_UP}    catch_up_window_seconds: 7199\n")
    monkeypatch.setenv("RUNONCE_RETENTION_SECONDS", "7200")
    assert cli("lint", str(path)).output == "1 file(s): 0 error(s), 0 warning(s)\n"
    flagged = cli("lint", "--retention-seconds", "7199", str(path))  # the flag in place of the setting
    assert flagged.exit_code == 1 and "7199 must be below RUNONCE_RETENTION_SECONDS (7199)" in flagged.output


@pytest.mark.subprocess
@pytest.mark.parametrize("name", ["date", "depth", "catch-up"])
def test_a_bad_routes_file_is_one_line_on_stderr_from_the_installed_command(tmp_path: Path, name: str) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(
        {
            "date": "routes:\n  r1:\n    target: {type: log, labels: {day: 2026-02-30}}\n",
            "depth": '{"routes": ' + "[" * 1200 + "]" * 1200 + "}",
            "catch-up": f"routes:\n  a:\n{CATCHING_UP}    catch_up_window_seconds: 86400\n"
            f"  b:\n{CATCHING_UP}    catch_up_window_seconds: 90000\n",
        }[name]
    )
    served = run_cli(tmp_path, "serve", "--port", "0", RUNONCE_ROUTES="", RUNONCE_ROUTES_FILE=str(path))
    linted = run_cli(tmp_path, "lint", str(path), RUNONCE_ROUTES="")
    assert served.returncode == 1 and linted.returncode == 1, (served.stderr, linted.stdout)
    assert served.stderr.count("\n") == 1 and "Traceback" not in served.stderr + linted.stderr, served.stderr
    assert linted.stderr == "" and len(linted.stdout.splitlines()) == 2, linted.stdout
    assert f"{path}: -: error: {served.stderr.removeprefix('Error: ').rstrip()} [" in linted.stdout
