"""terraform/'s dashboard, alert policies and log-based metrics (docs/operating.md), checked offline:
the dashboard JSON against the Monitoring API's `Dashboard` schema (monitoring.v1.json), every
policy against `AlertPolicy` (monitoring.v3.json) and every metric against `LogMetric`
(logging.v2.json), their switches evaluated by terraform itself, and every runbook's `runonce`
command against the real command line. The provider schema check of test_terraform.py covers
these resources too."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
import pytest
from deploy_tools import run, tool
from hcl_tree import META_ARGUMENTS, blocks, is_block, items, string
from test_terraform import BASE_VARS, TERRAFORM, TF_ENV, evaluate

from runonce.api.answers import ANSWERS
from runonce.cli import main
from runonce.schedules import parse_schedule
from runonce.schedules.zones import get_zone
from tests.support.discovery import Discovery, Violation

pytestmark = pytest.mark.deploy

ALERTS = [
    "missed_runs",
    "no_progress",
    "runs_unresolved",
    "target_failures",
    "store_unavailable",
    "service_errors",
    "scheduler_attempts_failing",
]
TILES = [
    "Deliveries by outcome",
    "Duplicates suppressed",
    "Skipped runs by reason (late, overlap)",
    "Missed runs (the audit)",
    "Unknown outcomes and unresolved runs",
    "Target errors by target type",
    "Lateness: schedule time to dispatch",
    "Cloud Run request latency p50 / p99",
    "Cloud Run instances",
    "Cloud Run 5xx responses",
    "runonce warnings and errors",
]
REPEATED = {"conditions", "aggregations", "labels", "links"}
"""HCL blocks that are arrays in the REST resource (the others are single objects)."""


def text(value: Any) -> str:
    """A python-hcl2 string as Terraform reads it: outer quotes off, `\\"` unescaped, heredoc markers off."""
    value = string(value)
    if isinstance(value, str):
        value = value.replace('\\"', '"').replace("\\n", "\n")
        if value.startswith("<<-EOT\n"):
            value = textwrap.dedent(value.removeprefix("<<-EOT\n").rsplit("EOT", 1)[0])
    return value


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def to_rest(body: dict, *, top: bool = True) -> dict[str, Any]:
    """A resource's HCL body as the REST resource it becomes (snake_case -> camelCase, blocks ->
    objects or arrays), leaving out meta-arguments and `project` (in the URL, not the body)."""
    rest: dict[str, Any] = {}
    for key, value in items(body):
        if top and (key in META_ARGUMENTS or key == "project"):
            continue
        if key == "label_extractors" and isinstance(value, dict):
            rest["labelExtractors"] = {k: text(v) for k, v in value.items()}
        elif is_block(value):
            converted = [to_rest(entry, top=False) for entry in value]
            rest[camel(key)] = converted if key in REPEATED else converted[0]
        elif isinstance(value, list):
            rest[camel(key)] = [text(v) for v in value]
        else:
            rest[camel(key)] = text(value)
    return rest


def check_rest(discovery: Discovery, value: Any, schema: dict, where: str) -> None:
    """`Discovery.check` that lets Terraform expressions stand for the value they will have: a
    string with `${...}` is checked as a string with the expression replaced by `1`, and stands for
    any value where the schema wants something else."""
    if "$ref" in schema:
        schema = discovery.schemas[schema["$ref"]]
    if isinstance(value, str) and "${" in value:
        if schema.get("type") == "string":
            discovery.check(re.sub(r"\$\{[^}]*\}", "1", value), schema, where, request=True)
        return
    if isinstance(value, dict) and schema.get("properties") is not None:
        for key, item in value.items():
            if key not in schema["properties"]:
                raise Violation(f"{where}: unknown field {key!r}")
            check_rest(discovery, item, schema["properties"][key], f"{where}.{key}")
        return
    if isinstance(value, list) and schema.get("type") == "array":
        for index, item in enumerate(value):
            check_rest(discovery, item, schema.get("items", {}), f"{where}[{index}]")
        return
    discovery.check(value, schema, where, request=True)


def resources(hcl_trees: dict[str, dict], type_name: str) -> dict[str, tuple[str, dict]]:
    found = {}
    for path, tree in hcl_trees.items():
        if path.startswith("terraform/examples/"):
            continue
        for kind, name, body in blocks(tree, "resource"):
            if kind == type_name:
                found[name] = (path, body)
    return found


# --- the dashboard ------------------------------------------------------------------------------


def dashboard() -> dict:
    return json.loads((TERRAFORM / "dashboard.json").read_text())


def test_the_dashboard_is_a_valid_mosaic_dashboard_with_a_route_filter() -> None:
    board = dashboard()
    Discovery("monitoring.v1").check(board, {"$ref": "Dashboard"}, "dashboard", request=True)
    assert {"labelKey": "route", "filterType": "METRIC_LABEL"} in board["dashboardFilters"]
    layout = board["mosaicLayout"]
    assert [tile["widget"]["title"] for tile in layout["tiles"]] == TILES
    cells: set[tuple[int, int]] = set()
    for tile in layout["tiles"]:  # inside the grid, no two tiles overlap
        assert tile.get("xPos", 0) + tile["width"] <= layout["columns"], tile["widget"]["title"]
        for x in range(tile.get("xPos", 0), tile.get("xPos", 0) + tile["width"]):
            for y in range(tile.get("yPos", 0), tile.get("yPos", 0) + tile["height"]):
                assert (x, y) not in cells, tile["widget"]["title"]
                cells.add((x, y))


def test_every_runonce_metric_the_dashboard_charts_is_made_by_the_module(hcl_trees: dict[str, dict]) -> None:
    local_values = {
        key: text(value) for t in hcl_trees.values() for entry in t.get("locals", []) for key, value in items(entry)
    }
    names = [text(body["name"]) for _, body in resources(hcl_trees, "google_logging_metric").values()]
    made = {re.sub(r"^\$\{local\.(\w+)\}$", lambda m: local_values[m.group(1)], name) for name in names}
    charted = set(re.findall(r"logging\.googleapis\.com/user/(runonce/\w+)", json.dumps(dashboard())))
    assert charted and charted <= made, charted - made
    # the only placeholder is the service name, which terraform and deploy/ both replace
    assert set(re.findall(r"\$\{(\w+)\}", json.dumps(dashboard()))) == {"service_name"}


def test_the_dashboard_resource_loads_the_file_and_is_switched_by_its_variable(hcl_trees: dict[str, dict]) -> None:
    [(_path, body)] = resources(hcl_trees, "google_monitoring_dashboard").values()
    assert body["count"] == "${var.dashboard ? 1 : 0}"
    assert 'file("${path.module}/dashboard.json")' in body["dashboard_json"]
    variables = {name: b for t in hcl_trees.values() for name, _, b in blocks(t, "variable")}
    assert variables["dashboard"]["default"] is True


# --- alert policies -----------------------------------------------------------------------------


def policies(hcl_trees: dict[str, dict]) -> dict[str, dict]:
    return {name: body for name, (_, body) in resources(hcl_trees, "google_monitoring_alert_policy").items()}


def test_there_is_one_policy_per_alert_each_switched_by_its_own_flag(hcl_trees: dict[str, dict]) -> None:
    found = policies(hcl_trees)
    assert sorted(found) == sorted(ALERTS)
    for name, body in found.items():
        switch = body.get("count") or body.get("for_each")
        assert f"local.alerts_on.{name}" in switch, name
        assert body["notification_channels"] == "${local.alert_channels}", name


def test_every_policy_is_a_valid_alert_policy(hcl_trees: dict[str, dict]) -> None:
    monitoring = Discovery("monitoring.v3")
    for name, body in policies(hcl_trees).items():
        check_rest(monitoring, to_rest(body), {"$ref": "AlertPolicy"}, name)


def test_every_log_metric_is_a_valid_log_metric(hcl_trees: dict[str, dict]) -> None:
    logging = Discovery("logging.v2")
    found = resources(hcl_trees, "google_logging_metric")
    assert {"deliveries", "lateness", "unresolved_runs", "store_unavailable", "service_errors"} <= set(found)
    for name, (_, body) in found.items():
        check_rest(logging, to_rest(body), {"$ref": "LogMetric"}, name)
    lateness = to_rest(found["lateness"][1])
    assert lateness["valueExtractor"] == "EXTRACT(jsonPayload.lateness_seconds)"
    assert lateness["metricDescriptor"]["valueType"] == "DISTRIBUTION"


def _commands(content: str) -> list[str]:
    return [span for span in re.findall(r"`([^`]+)`", content) if span.startswith("runonce ")]


def test_every_runbook_says_what_it_means_how_to_look_what_to_do_and_about_retries(
    hcl_trees: dict[str, dict],
) -> None:
    for name, body in policies(hcl_trees).items():
        [documentation] = body["documentation"]
        content = text(documentation["content"])
        assert text(documentation["mime_type"]) == "text/markdown", name
        for heading in ("**What it means.**", "**How to look.**", "**What to do.**", "**Retries.**"):
            assert heading in content, (name, heading)
        assert _commands(content), f"{name}: no runonce command to run"
        assert "resource.type=" in content, f"{name}: no log query"
        assert len(content) < 8192, name  # the API's limit


def test_every_runonce_command_in_a_runbook_exists_with_its_flags(hcl_trees: dict[str, dict]) -> None:
    """The on-call pastes these: a renamed command or flag must fail here, not at 3 a.m."""
    checked = 0
    for name, body in policies(hcl_trees).items():
        for command in _commands(text(body["documentation"][0]["content"])):
            words = re.sub(r"\$\{[^}]*\}", "X", command).split()[1:]
            group: click.Command = main
            while isinstance(group, click.Group) and words and words[0] in group.commands:
                group = group.commands[words.pop(0)]
            assert not isinstance(group, click.Group), f"{name}: {command!r} names no command"
            flags = {flag for param in group.params for flag in getattr(param, "opts", [])}
            for word in words:
                if word.startswith("--"):
                    assert word in flags, f"{name}: {command!r}: {group.name} has no {word}"
            checked += 1
    assert checked >= len(ALERTS)


def test_the_service_errors_filter_excludes_exactly_the_documented_5xx() -> None:
    documented = sorted({answer.status for answer in ANSWERS.values() if answer.http_status >= 500})
    source = (TERRAFORM / "log_metrics.tf").read_text()
    [listed] = re.findall(r"documented_5xx = (\[.*\])", source)
    assert sorted(json.loads(listed)) == documented


# --- switches and windows, evaluated by terraform ------------------------------------------------

OUTPUTS = ["alerts_on", "alert_channels", "no_progress_watch", "schedule_gap_seconds", "scheduler_attempt_threshold"]


@pytest.fixture(scope="module")
def alert_rules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("alert_rules")
    shutil.copy(TERRAFORM / "variables.tf", directory)
    shutil.copy(TERRAFORM / "alert_rules.tf", directory)
    (directory / "outputs.tf").write_text(
        "".join(f'output "{name}" {{\n  value = local.{name}\n}}\n' for name in OUTPUTS)
    )
    run([tool("terraform"), "init", "-input=false", "-no-color"], cwd=directory, env=TF_ENV)
    return directory


def test_every_alert_is_on_by_default_and_each_flag_turns_off_only_its_own(alert_rules: Path, tmp_path: Path) -> None:
    assert evaluate(alert_rules, tmp_path, BASE_VARS)["alerts_on"] == dict.fromkeys(ALERTS, True)
    for name in ALERTS:
        outputs = evaluate(alert_rules, tmp_path, {**BASE_VARS, "alerts": {name: False}})
        assert outputs["alerts_on"] == {other: other != name for other in ALERTS}, name


def test_without_the_audit_its_two_alerts_and_its_watch_are_off(alert_rules: Path, tmp_path: Path) -> None:
    outputs = evaluate(alert_rules, tmp_path, {**BASE_VARS, "audit": {"enabled": False}})
    assert {name for name, on in outputs["alerts_on"].items() if not on} == {"missed_runs", "runs_unresolved"}
    assert outputs["no_progress_watch"] == {}
    with_audit = evaluate(alert_rules, tmp_path, BASE_VARS)
    assert with_audit["no_progress_watch"] == {"runonce-audit": {"route": "_audit", "seconds": 1200}}


def test_one_channel_list_for_every_alert(alert_rules: Path, tmp_path: Path) -> None:
    channels = ["projects/my-project/notificationChannels/1", "projects/my-project/notificationChannels/2"]
    outputs = evaluate(
        alert_rules,
        tmp_path,
        {**BASE_VARS, "notification_channels": channels, "audit": {"notification_channels": [channels[1]]}},
    )
    assert outputs["alert_channels"] == channels
    refused = evaluate(alert_rules, tmp_path, {**BASE_VARS, "notification_channels": ["42"]}, check=False)
    assert refused.returncode != 0 and "notification_channels are full names" in refused.stderr


SCHEDULES = {
    "every-5": "*/5 * * * *",
    "every-7": "*/7 * * * *",  # 0, 7, ... 56: the gaps are 7 minutes and 4 (56 -> 0)
    "quarter-past": "15 * * * *",
    "lists": "0,10,45 * * * *",
    "office-hours": "30 8-18 * * *",
    "stepped-hours": "10,50 8-17/3 * * *",
    "twice-a-day": "0 9,21 * * *",
    "every-6h": "0 */6 * * *",
    "daily": "30 2 * * *",
    "weekdays": "*/5 * * * 1-5",
    "monthly": "0 3 1 * *",
}


def longest_gap(schedule: str, days: int = 3) -> int:
    """The schedule engine's answer: the longest gap between consecutive fire times (UTC)."""
    start = datetime(2026, 3, 2, tzinfo=UTC)  # a Monday
    fires = []
    for fire in parse_schedule(schedule).iter_after(start, get_zone("UTC")):
        if fire > start + timedelta(days=days):
            break
        fires.append(fire)
    return int(max((b - a).total_seconds() for a, b in itertools.pairwise(fires)))


def test_no_progress_windows_follow_each_schedules_longest_gap(alert_rules: Path, tmp_path: Path) -> None:
    """terraform's gap, computed in HCL from the cron text, against runonce's own schedule engine;
    jobs whose window would pass Monitoring's longest absence (23.5 h) are left to missed runs."""
    jobs = {name: {"route": "demo", "schedule": schedule} for name, schedule in SCHEDULES.items()}
    outputs = evaluate(alert_rules, tmp_path, {**BASE_VARS, "jobs": jobs, "audit": {"enabled": False}})
    gaps = outputs["schedule_gap_seconds"]
    for name in ("weekdays", "monthly"):  # not every day: the HCL leaves them out
        assert name not in gaps
    for name, schedule in SCHEDULES.items():
        if name in gaps:
            assert gaps[name] == longest_gap(schedule), name
    watched = {name: spec["seconds"] for name, spec in outputs["no_progress_watch"].items()}
    assert watched == {name: max(120, -(-2 * gaps[name] // 60) * 60) for name in gaps if 2 * gaps[name] <= 84600}
    assert "every-5" in watched and watched["every-5"] == 600
    assert "daily" not in watched and "twice-a-day" not in watched


def test_a_paused_job_is_not_watched_and_the_scheduler_threshold_is_the_fewest_retries(
    alert_rules: Path, tmp_path: Path
) -> None:
    jobs = {
        "paused": {"route": "demo", "schedule": "*/5 * * * *", "paused": True},
        "eager": {"route": "demo", "schedule": "*/5 * * * *", "retry": {"retry_count": 2}},
    }
    outputs = evaluate(alert_rules, tmp_path, {**BASE_VARS, "jobs": jobs, "audit": {"enabled": False}})
    assert set(outputs["no_progress_watch"]) == {"eager"}
    assert outputs["scheduler_attempt_threshold"] == 2
