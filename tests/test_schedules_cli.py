"""`runonce schedule next` and `runonce lint`, through the real `runonce` click group; the example
Scheduler jobs are first held to the Job schema of Google's discovery document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import googleapiclient
import pytest
from click.testing import CliRunner

from runonce.cli import main

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
JOBS = sorted((EXAMPLES / "scheduler").glob("*.json"))
DISCOVERY = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents" / "cloudscheduler.v1.json"
NOW = "2026-11-30T00:00:00Z"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("RUNONCE_ROUTES_FILE", "RUNONCE_ROUTES", "RUNONCE_LEASE_SECONDS", "RUNONCE_RETENTION_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


def run(runner: CliRunner, *args: str) -> Any:
    return runner.invoke(main, list(args), catch_exceptions=False)


# -- schedule next --------------------------------------------------------------------------------


def test_schedule_next_prints_rfc3339_lines_and_flags_dst(runner: CliRunner) -> None:
    result = run(
        runner,
        "schedule",
        "next",
        "30 2 * * *",
        "--tz",
        "America/New_York",
        "--after",
        "2026-03-07T12:00:00Z",
        "--count",
        "3",
    )
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "2026-03-08T03:00:00-04:00  # skipped local time: 02:30 does not exist on 2026-03-08 (clocks jump to 03:00); "
        "runs at the jump",
        "2026-03-09T02:30:00-04:00",
        "2026-03-10T02:30:00-04:00",
    ]
    result = run(
        runner,
        "schedule",
        "next",
        "30 1 * * *",
        "--tz",
        "Europe/London",
        "--after",
        "2026-10-24T12:00:00Z",
        "--count",
        "2",
    )
    assert result.stdout.splitlines()[0].startswith(
        "2026-10-25T01:30:00+01:00  # ambiguous local time: 01:30 occurs twice"
    )


def test_schedule_next_groc_says_the_header_is_not_guaranteed(runner: CliRunner) -> None:
    result = run(
        runner,
        "schedule",
        "next",
        "every day 01:45",
        "--tz",
        "Australia/Lord_Howe",
        "--after",
        "2026-04-04T04:30:00Z",
        "--count",
        "2",
    )
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "2026-04-05T01:45:00+11:00  # ambiguous local time: 01:45 occurs twice on 2026-04-05; this is the first pass, "
        "runs again in the second",
        "2026-04-05T01:45:00+10:30  # ambiguous local time: 01:45 occurs twice on 2026-04-05; this is the second pass",
    ]
    assert "does not guarantee X-CloudScheduler-ScheduleTime" in result.stderr


@pytest.mark.parametrize(
    "args, says",
    [
        (
            ["0 0 * * MON#2"],
            "Invalid value for 'EXPR': day-of-week field 'MON#2': '#' (nth weekday of the month) is not supported",
        ),
        (["0 0 L * *"], "Invalid value for 'EXPR': day-of-month field 'L': 'L' (last day) is not supported"),
        (
            ["*/90 * * * *"],
            "Invalid value for 'EXPR': minute field '*/90': step 90 is larger than the field's largest value 59",
        ),
        (
            ["every 7 minutes synchronized"],
            "Invalid value for 'EXPR': groc: 'synchronized' needs an interval that divides 24 hours",
        ),
        (
            ["0 9 * * *", "--tz", "Mars/Olympus"],
            "Invalid value for '--tz': 'Mars/Olympus' is not a tz database zone name",
        ),
        (
            ["0 9 * * *", "--after", "2026-03-08T06:00:00"],
            "Invalid value for '--after': '2026-03-08T06:00:00' has no offset",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_field(runner: CliRunner, args: list[str], says: str) -> None:
    result = run(runner, "schedule", "next", *args)
    assert result.exit_code == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: ") and says in last


# -- lint -------------------------------------------------------------------------------------------


def _check(value: Any, schema: dict[str, Any], schemas: dict[str, Any], where: str) -> None:
    if "$ref" in schema:
        schema = schemas[schema["$ref"]]
    kind = schema.get("type")
    if kind == "object" and "properties" in schema:
        assert isinstance(value, dict), where
        for key, item in value.items():
            assert key in schema["properties"], f"{where}.{key} is not a field of {schema.get('id')}"
            _check(item, schema["properties"][key], schemas, f"{where}.{key}")
    elif kind == "object":  # a map (additionalProperties)
        assert isinstance(value, dict), where
        for key, item in value.items():
            _check(item, schema.get("additionalProperties", {}), schemas, f"{where}.{key}")
    elif kind == "string":
        assert isinstance(value, str), where
        if "enum" in schema:
            assert value in schema["enum"], f"{where}: {value!r} not in {schema['enum']}"
        if schema.get("format") == "google-duration":
            assert value.endswith("s") and float(value[:-1]) >= 0, where
    elif kind == "integer":
        assert isinstance(value, int), where
    elif kind == "boolean":
        assert isinstance(value, bool), where


@pytest.mark.parametrize("path", JOBS, ids=lambda p: p.name)
def test_example_jobs_follow_the_discovery_documents_job_schema(path: Path) -> None:
    schemas = json.loads(DISCOVERY.read_text())["schemas"]
    _check(json.loads(path.read_text()), {"$ref": "Job"}, schemas, path.name)


def test_lint_reports_each_finding_with_file_and_job_and_exits_1_on_errors(runner: CliRunner) -> None:
    files = [str(EXAMPLES / "routes-scheduled.yaml"), *map(str, JOBS)]
    result = run(runner, "lint", *files, "--format", "json", "--now", NOW)
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    found = {(Path(f["file"]).name, f["subject"], f["severity"], f["code"]) for f in report["findings"]}
    assert {
        ("month-end-report.json", "job month-end-report", "error", "invalid_schedule"),
        ("month-end-report.json", "job month-end-report", "error", "unknown_route"),
        ("month-end-report.json", "job month-end-report", "error", "no_oidc"),
        ("month-end-report.json", "job month-end-report", "error", "retries_outlive_retention"),
        ("month-end-report.json", "job month-end-report", "warning", "deadline_over_lease"),
        ("nightly-etl.json", "job nightly-etl", "warning", "dst_skipped"),
        ("every-5-minutes.json", "job every-5-minutes", "warning", "dst_repeated"),
    } <= found
    assert report["errors"] == 4 and not any(f[1] == "job nightly-etl" and f[2] == "error" for f in found)
    dst = [f["message"] for f in report["findings"] if f["subject"] == "job nightly-etl"]
    assert dst == [
        "'30 2 * * *': 2027-03-14 in America/New_York: the clock skips 02:30; runs once at 03:00, the first minute "
        "after the jump, instead",
        "'30 2 * * *': 2028-03-12 in America/New_York: the clock skips 02:30; runs once at 03:00, the first minute "
        "after the jump, instead",
    ]


def test_lint_with_warnings_only_exits_0_and_prints_one_line_each(runner: CliRunner) -> None:
    result = run(
        runner,
        "lint",
        str(EXAMPLES / "routes-scheduled.yaml"),
        str(EXAMPLES / "scheduler" / "nightly-etl.json"),
        "--now",
        NOW,
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[-1] == "2 file(s): 0 error(s), 6 warning(s)"
    assert all(": warning: " in line for line in lines[:-1])


def test_lint_compares_with_the_lease_and_retention_from_settings_or_flags(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = str(EXAMPLES / "scheduler" / "nightly-etl.json")  # 3 retries: 5+10+20 s of backoff + 4 × 180 s
    assert "deadline_over_lease" in run(runner, "lint", job, "--lease-seconds", "120", "--now", NOW).stdout
    monkeypatch.setenv("RUNONCE_RETENTION_SECONDS", "700")
    result = run(runner, "lint", job, "--now", NOW)
    assert result.exit_code == 1 and "retries can arrive up to 755s after the first attempt" in result.stdout
    assert run(runner, "lint", job, "--retention-seconds", "755", "--now", NOW).exit_code == 0


def test_lint_groc_job_whose_route_rejects_missing_times(runner: CliRunner, tmp_path: Path) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text(
        "routes:\n  every-5-minutes:\n    target: {type: log}\n    namespace: "
        "{project: acme-data, location: us-central1}\n"
    )
    result = run(runner, "lint", str(routes), str(EXAMPLES / "scheduler" / "every-5-minutes.json"), "--now", NOW)
    assert "groc_without_snap" in result.stdout and result.exit_code == 0


@pytest.mark.parametrize(
    "change, code",
    [
        ({"httpTarget": {"uri": "https://example.com/hooks/etl", "oidcToken": {}}}, "not_runonce_uri"),
        ({"httpTarget": {"uri": "https://h/v1/routes/nightly-etl:run?region=x", "oidcToken": {}}}, "bad_query"),
        (
            {"httpTarget": {"uri": "https://h/v1/routes/nightly-etl:run", "httpMethod": "GET", "oidcToken": {}}},
            "bad_method",
        ),
        ({"httpTarget": {"uri": "https://h/v1/routes/nightly-etl:run", "body": "WzFd", "oidcToken": {}}}, "bad_body"),
        ({"pubsubTarget": {"topicName": "projects/p/topics/t"}, "httpTarget": None}, "not_http_target"),
        ({"timeZone": "Mars/Olympus"}, "invalid_time_zone"),
        ({"schedule": "0 3 * * *"}, "schedule_mismatch"),
    ],
)
def test_lint_job_errors(runner: CliRunner, tmp_path: Path, change: dict[str, Any], code: str) -> None:
    job = {**json.loads((EXAMPLES / "scheduler" / "nightly-etl.json").read_text()), **change}
    job = {k: v for k, v in job.items() if v is not None}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    result = run(runner, "lint", str(EXAMPLES / "routes-scheduled.yaml"), str(path), "--now", NOW)
    assert result.exit_code == 1 and f"[{code}]" in result.stdout, result.stdout


def test_lint_uses_the_configured_routes_file_when_none_is_given(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNONCE_ROUTES_FILE", str(EXAMPLES / "demo-routes.yaml"))
    result = run(runner, "lint", str(EXAMPLES / "scheduler" / "nightly-etl.json"), "--now", NOW)
    assert "route 'nightly-etl', which the routes file does not define (routes: demo)" in result.stdout


def test_lint_warns_with_the_numbers_when_retries_outlast_the_schedule_interval(
    runner: CliRunner, tmp_path: Path
) -> None:
    job = json.loads((EXAMPLES / "scheduler" / "nightly-etl.json").read_text())
    job.update(
        {
            "schedule": "*/10 * * * *",
            "attemptDeadline": "60s",
            "retryConfig": {
                "retryCount": 5,
                "minBackoffDuration": "20s",
                "maxBackoffDuration": "300s",
                "maxDoublings": 4,
            },
        }
    )
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    result = run(runner, "lint", str(path), "--now", NOW)
    # 20 + 40 + 80 + 160 + 300 s of backoff + 6 attempts of 60 s = 960 s > 600 s between runs.
    assert "[retries_overlap_next_run]" in result.stdout, result.stdout
    assert (
        "retried for up to 960s (5 retries" in result.stdout
        and "longer than the 600s between its runs" in result.stdout
    )
    job["schedule"] = "*/30 * * * *"
    path.write_text(json.dumps(job))
    assert "retries_overlap_next_run" not in run(runner, "lint", str(path), "--now", NOW).stdout


def _readme_sessions() -> list[tuple[str, list[str]]]:
    """(command, output lines) of every `$ runonce …` in the README's console blocks under ## Schedules."""
    section = (REPO / "README.md").read_text().split("\n## Schedules\n", 1)[1].split("\n## ", 1)[0]
    sessions: list[tuple[str, list[str]]] = []
    for block in section.split("```console\n")[1:]:
        for line in block.split("\n```", 1)[0].splitlines():
            if line.startswith("$ runonce "):
                sessions.append((line[len("$ runonce ") :], []))
            else:
                sessions[-1][1].append(line)
    return sessions


@pytest.mark.parametrize("command, expected", _readme_sessions(), ids=lambda v: v if isinstance(v, str) else "")
def test_readme_shows_the_real_output(
    runner: CliRunner, command: str, expected: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import shlex

    monkeypatch.chdir(REPO)
    result = runner.invoke(main, shlex.split(command), prog_name="runonce", catch_exceptions=False)
    assert result.output.splitlines() == expected
