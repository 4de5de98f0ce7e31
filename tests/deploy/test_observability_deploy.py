"""deploy/observability.sh run for real (bash + gcloud against fake_gcp.py): terraform's log-based
metrics and dashboard made with gcloud's GA commands, the alert policies written and their exact
alpha commands printed, or created with --create-alerts; and what it sends equal to terraform's."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from fake_gcp import FakeGoogle
from hcl_tree import blocks
from test_deploy_scripts import DEPLOY, PROJECT, deploy, fake  # noqa: F401 - the fixtures
from test_observability import check_rest, text, to_rest

from tests.support.discovery import Discovery

pytestmark = pytest.mark.deploy

CHANNEL = f"projects/{PROJECT}/notificationChannels/42"
ARGS = ("--project", PROJECT, "--location", "europe-west1", "--jobs", "nightly,runonce-audit")
METRICS = [
    "deliveries",
    "lateness",
    "recovered_failures",
    "scheduler_attempts_failed",
    "service_errors",
    "store_unavailable",
    "unresolved_runs",
]
POLICIES = ["runs_unresolved", "scheduler_attempts_failing", "service_errors", "store_unavailable", "target_failures"]


def test_it_makes_the_metrics_and_dashboard_prints_the_alpha_commands_or_creates_them_then_changes_nothing(
    deploy,  # noqa: F811
    fake: FakeGoogle,  # noqa: F811
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    result = deploy("observability.sh", *ARGS, "--notification-channels", CHANNEL, "--out", str(out))
    assert sorted(name.removeprefix(f"projects/{PROJECT}/metrics/") for name in fake.state.log_metrics) == [
        f"runonce/{name}" for name in METRICS
    ]
    (name,) = fake.state.dashboards
    board = fake.state.dashboards[name]
    assert board["displayName"] == "runonce" and "${service_name}" not in json.dumps(board)
    assert (
        'resource.labels.service_name="runonce"' in board["mosaicLayout"]["tiles"][-1]["widget"]["logsPanel"]["filter"]
    )
    assert fake.state.alert_policies == {}, "gcloud has alert policies in alpha only: not made without --create-alerts"
    commands = [line for line in result.stdout.splitlines() if line.startswith("gcloud ")]
    assert commands == [
        f"gcloud alpha monitoring policies create --project={PROJECT} --policy-from-file={out}/policies/{policy}.json"
        for policy in POLICIES
    ]
    monitoring = Discovery("monitoring.v3")
    for policy_name in POLICIES:
        policy = json.loads((out / "policies" / f"{policy_name}.json").read_text())
        monitoring.check(policy, {"$ref": "AlertPolicy"}, policy_name, request=True)
        assert policy["notificationChannels"] == [CHANNEL]
        assert "**What to do.**" in policy["documentation"]["content"]
    assert "alpha track only" in result.stderr

    # with --create-alerts: each policy once, and a dashboard changed by hand brought back
    fake.state.dashboards[name]["mosaicLayout"]["tiles"] = []
    fake.requests.clear()
    deploy("observability.sh", *ARGS, "--notification-channels", CHANNEL, "--create-alerts")
    assert sorted(r.method_id for r in fake.mutations()) == [
        *["monitoring.projects.alertPolicies.create"] * len(POLICIES),
        "monitoring.projects.dashboards.patch",
    ]
    assert len(fake.state.dashboards[name]["mosaicLayout"]["tiles"]) == 11
    assert sorted(p["displayName"] for p in fake.state.alert_policies.values()) == [
        "runonce: Scheduler attempts failing",
        "runonce: claim store unavailable",
        "runonce: runs unresolved",
        "runonce: target failures",
        "runonce: undocumented 5xx answers",
    ]
    fake.requests.clear()
    deploy("observability.sh", *ARGS, "--notification-channels", CHANNEL, "--create-alerts")
    assert fake.mutations() == [], "a second run must change nothing"


def test_bad_input_is_refused_before_anything_changes(deploy, fake: FakeGoogle) -> None:  # noqa: F811
    result = deploy("observability.sh", "--project", PROJECT, "--jobs", "a b", expect=2)
    assert "--jobs must be comma-separated Scheduler job IDs" in result.stderr
    assert fake.requests == []


# --- the same as terraform ----------------------------------------------------------------------


def observability_lib():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(DEPLOY / "lib"))
    import observability

    return observability


SUBSTITUTE = {
    "${var.service_name}": "runonce",
    "${var.project_id}": PROJECT,
    "${local.scheduler_region}": "europe-west1",
    "${local.scheduler_attempt_threshold}": "5",
    "${var.target_failure_threshold}": "0",
}


def terraform_value(value, local_values: dict[str, str]):  # type: ignore[no-untyped-def]
    """A REST value from terraform with the module's expressions evaluated for the deploy defaults."""
    if isinstance(value, dict):
        return {k: terraform_value(v, local_values) for k, v in value.items()}
    if isinstance(value, list):
        return [terraform_value(v, local_values) for v in value]
    if not isinstance(value, str):
        return value
    whole = re.fullmatch(r"\$\{[^}]*\}", value) is not None
    for _ in range(3):  # locals refer to locals
        for expression, replacement in {**local_values, **SUBSTITUTE}.items():
            value = value.replace(expression, replacement)
    value = re.sub(r"\$\{google_logging_metric\.(\w+)\[0\]\.name\}", r"runonce/\1", value)
    value = re.sub(
        r"\$\{join\(\" OR \", \[for s in local.documented_5xx : .*?\]\)\}",
        '"failed" OR "unavailable" OR "unknown"',
        value,
    )
    value = re.sub(
        r"\$\{join\(\" OR \", \[for job in local.scheduler_jobs : .*?\]\)\}", '"nightly" OR "runonce-audit"', value
    )
    return int(value) if whole and value.isdigit() else value


@pytest.fixture(scope="module")
def terraform_rest(hcl_trees: dict[str, dict]) -> dict[str, dict[str, dict]]:
    local_values = {}
    for tree in hcl_trees.values():
        for entry in tree.get("locals", []):
            for key, value in entry.items():
                if isinstance(value, str) and not key.startswith("__"):
                    local_values[f"${{local.{key}}}"] = text(value)
    found: dict[str, dict[str, dict]] = {"google_logging_metric": {}, "google_monitoring_alert_policy": {}}
    for path, tree in hcl_trees.items():
        if path.startswith("terraform/examples/"):
            continue
        for kind, name, body in blocks(tree, "resource"):
            if kind in found:
                found[kind][name] = terraform_value(to_rest(body), local_values)
    return found


def test_the_scripts_metrics_are_terraforms(terraform_rest: dict[str, dict[str, dict]]) -> None:
    lib = observability_lib()
    made = lib.metrics("runonce", ["nightly", "runonce-audit"])
    assert sorted(made) == METRICS
    logging = Discovery("logging.v2")
    for name, body in made.items():
        logging.check(body, {"$ref": "LogMetric"}, name, request=True)
        expected = terraform_rest["google_logging_metric"][name]
        assert body == expected, name


def test_the_scripts_policies_are_terraforms(terraform_rest: dict[str, dict[str, dict]]) -> None:
    lib = observability_lib()
    made = lib.policies("runonce", PROJECT, "europe-west1", [CHANNEL], ["nightly", "runonce-audit"])
    assert sorted(made) == POLICIES
    for name, policy in made.items():
        expected = terraform_rest["google_monitoring_alert_policy"][name]
        check_rest(Discovery("monitoring.v3"), expected, {"$ref": "AlertPolicy"}, name)
        for field in ("displayName", "combiner", "conditions", "alertStrategy"):
            assert policy[field] == expected[field], (name, field)
        assert policy.get("severity") == expected.get("severity"), name
        assert policy["documentation"]["subject"] == expected["documentation"]["subject"], name
        assert policy["documentation"]["content"].strip() == expected["documentation"]["content"].strip(), name
