"""What the command line and the local log print for the cases a user meets first: a misspelt
route, a file that is not a Scheduler job, a delivery's log line on a terminal, a groc schedule's
note. Each says what it means in a line, and refuses as the other commands do."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runonce.logs import TextFormatter
from runonce.stores.sqlite import SQLiteStore
from tests.support.procs import REPO
from tests.support.runs import LEASE, RETENTION, new_run

ROUTES = "routes:\n  etl: {target: {type: log}}\n  billing: {target: {type: log}}\n"


@pytest.fixture
def routes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    path = tmp_path / "routes.yaml"
    path.write_text(ROUTES)
    monkeypatch.setenv("RUNONCE_ROUTES_FILE", str(path))
    return path


def _seed(db: Path) -> str:
    async def go() -> str:
        store = SQLiteStore(str(db))
        claim = await store.claim(new_run(route="etl"), datetime.now(UTC), LEASE, RETENTION)
        await store.close()
        return claim.record.run_id

    return asyncio.run(go())


def test_runs_list_refuses_a_route_that_is_not_configured_like_every_other_command(cli, routes: Path) -> None:
    run_id = _seed(cli.db)
    refused = cli("runs", "list", "--route", "etl-nightly")
    assert refused.exit_code == 2
    assert "--route: no route 'etl-nightly'" in refused.output and "it has billing, etl" in refused.output
    assert run_id not in refused.output
    for other in (
        ("status", "--route", "etl-nightly"),
        ("key", "--route", "etl-nightly", "--job", "j", "--schedule-time", "2026-10-16T12:00:00Z"),
    ):
        assert cli(*other).exit_code == 2  # the same refusal elsewhere

    listed = cli("runs", "list", "--route", "etl")
    assert listed.exit_code == 0 and run_id in listed.output
    empty = cli("runs", "list", "--route", "billing")  # configured, no runs yet: an empty table
    assert empty.exit_code == 0 and run_id not in empty.output and empty.output.startswith("RUN_ID")


def test_runs_list_with_a_route_and_no_routes_configured_reads_the_store_alone(
    cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator reading the store from elsewhere than the service has no routes file: the
    records are then all there is to say which routes exist, so the route is not checked."""
    monkeypatch.delenv("RUNONCE_ROUTES_FILE", raising=False)
    monkeypatch.delenv("RUNONCE_ROUTES", raising=False)
    run_id = _seed(cli.db)
    listed = cli("runs", "list", "--route", "etl")
    assert listed.exit_code == 0 and run_id in listed.output
    other = cli("runs", "list", "--route", "billing")
    assert other.exit_code == 0 and run_id not in other.output


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("README.md", (REPO / "README.md").read_text(), "not valid YAML or JSON: line "),
        ("broken.yaml", "jobs: [\n  {name: a\n", "not valid YAML or JSON: line "),
        ("tabs.yaml", "a:\n\tb: 1\n", "not valid YAML or JSON: line 2, column 1: "),
        ("bytes.json", b"\xff\xfe{}", "not UTF-8 text (byte 0xff at offset 0); save it as UTF-8"),
    ],
)
def test_lint_of_a_file_it_cannot_read_says_why_in_one_line(
    cli, routes: Path, tmp_path: Path, name: str, content: str | bytes, says: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = cli("lint", str(path))
    assert result.exit_code == 1
    [finding, summary] = result.output.splitlines()
    assert finding.startswith(f"{path}: -: error: {says}") and finding.endswith("[unreadable]"), finding
    assert summary == "1 file(s): 1 error(s), 0 warning(s)"


def _text_line(**fields: object) -> str:
    record = logging.LogRecord("runonce.access", logging.INFO, __file__, 1, "delivery %s: %s", ("r", "processed"), None)
    record.fields = fields
    return TextFormatter().format(record)


def test_a_delivery_line_on_a_terminal_names_nested_fields_as_cloud_logging_filters_do() -> None:
    line = _text_line(
        route="demo",
        target={"type": "log", "resource": "log/abc"},
        http_status=200,
        replayed=False,
        last_error="http 503: upstream said no",
        empty="",
        missing=None,
        httpRequest={"status": 200},
    )
    shown = 'route=demo target.type=log target.resource=log/abc http_status=200 replayed=false last_error="http 503: '
    assert line.endswith(shown + 'upstream said no"')
    assert "{" not in line and "httpRequest" not in line and "empty" not in line and "missing" not in line


@pytest.mark.parametrize(
    ("expr", "rule"),
    [
        ("every 5 minutes synchronized", "every 5 minutes of elapsed time from 00:00 local time"),
        ("every 90 minutes synchronized", "every 90 minutes of elapsed time from 00:00 local time"),
        ("every 2 hours from 08:00 to 18:00", "every 2 hours of elapsed time from 08:00 to 18:00 local time"),
        ("every 5 minutes", "runs are spaced by elapsed time; DST has no effect"),
        ("every day 02:15", "a local time the clock skips does not run that day"),
    ],
)
def test_a_groc_schedules_note_is_short_and_about_that_schedule(cli, expr: str, rule: str) -> None:
    result = cli("schedule", "next", expr, "--after", "2026-10-02T12:00:00Z", "--count", "1")
    assert result.exit_code == 0
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert notes[0] == "note: groc schedule: Cloud Scheduler does not guarantee X-CloudScheduler-ScheduleTime for it"
    assert notes[1].startswith(f"note: DST: {rule}")
    assert all(len(note) <= 130 for note in notes), notes
    if "from" not in expr:
        assert "window" not in result.stderr and " to " not in notes[1]
