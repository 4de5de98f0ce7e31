"""terraform/sources.tf and sources_rules.tf: Pub/Sub push subscriptions and Eventarc triggers
pointed at runonce, with the invoker's OIDC token (audience: the service URL), a retry policy and a
dead-letter topic, the agents' grants; and their rules, evaluated offline by terraform itself."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from deploy_tools import REPO, run, tool
from hcl_tree import blocks, string

pytestmark = pytest.mark.deploy

TERRAFORM = REPO / "terraform"
TF_ENV = {**os.environ, "TF_CLI_CONFIG_FILE": "/dev/null", "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1"}
ROUTES = {
    "orders": {"target": {"type": "log"}, "source": "pubsub"},
    "uploads": {"target": {"type": "log"}, "source": "cloudevents"},
    "nightly": {"target": {"type": "log"}},
}
BASE_VARS = {
    "project_id": "my-project",
    "region": "europe-west1",
    "image": "example.com/runonce@sha256:" + "a" * 64,
    "routes": ROUTES,
    "push_subscriptions": {"orders-runonce": {"route": "orders", "topic": "orders"}},
    "eventarc_triggers": {
        "uploads-runonce": {
            "route": "uploads",
            "event_filters": {"type": "google.cloud.storage.object.v1.finalized", "bucket": "uploads"},
        }
    },
}


@pytest.fixture(scope="module")
def rules_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("source-rules")
    for name in ("variables.tf", "rules.tf", "sources_rules.tf"):
        shutil.copy(TERRAFORM / name, directory)
    outputs = ["push_topics", "dead_letter_topics", "storage_triggers"]
    (directory / "outputs.tf").write_text("".join(f'output "{n}" {{\n  value = local.{n}\n}}\n' for n in outputs))
    run([tool("terraform"), "init", "-input=false", "-no-color"], cwd=directory, env=TF_ENV)
    return directory


def apply(directory: Path, tmp_path: Path, variables: dict, *, check: bool = True):
    var_file = tmp_path / "vars.tfvars.json"
    var_file.write_text(json.dumps(variables))
    state = tmp_path / "terraform.tfstate"
    args = ["apply", "-auto-approve", "-input=false", "-no-color", f"-var-file={var_file}", f"-state={state}"]
    result = run([tool("terraform"), *args], cwd=directory, env=TF_ENV, check=check)
    if not check:
        return result
    outputs = run([tool("terraform"), "output", "-json", "-no-color", f"-state={state}"], cwd=directory, env=TF_ENV)
    return {name: value["value"] for name, value in json.loads(outputs.stdout).items()}


def test_the_example_sources_pass_and_derive_their_topics(rules_module: Path, tmp_path: Path) -> None:
    outputs = apply(rules_module, tmp_path, BASE_VARS)
    assert outputs["push_topics"] == {"orders-runonce": "projects/my-project/topics/orders"}
    assert outputs["dead_letter_topics"] == {"orders-runonce": "projects/my-project/topics/orders-runonce-dead-letter"}
    assert list(outputs["storage_triggers"]) == ["uploads-runonce"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"push_subscriptions": {"s-1": {"route": "nightly", "topic": "t"}}},
            'push_subscriptions.s-1: route "nightly" has source "scheduler" and would refuse every push (400)',
        ),
        (
            {"push_subscriptions": {"s-1": {"route": "nope", "topic": "t"}}},
            'push_subscriptions.s-1: route "nope" is not in routes',
        ),
        (
            {"push_subscriptions": {"s-1": {"route": "orders", "topic": "t", "ack_deadline_seconds": 20}}},
            "ack_deadline_seconds (20) must be at least dispatch_timeout_seconds + 15 = 45",
        ),
        (
            {"eventarc_triggers": {"t1": {"route": "orders", "event_filters": {"type": "x"}}}},
            'eventarc_triggers.t1: route "orders" has source "pubsub" and would refuse every event (400)',
        ),
        (
            {"eventarc_triggers": {"t1": {"route": "uploads", "event_filters": {"bucket": "b"}}}},
            'event_filters needs a "type"',
        ),
        (
            {"push_subscriptions": {"s-1": {"route": "orders", "topic": "t", "dead_letter_topic": "dead"}}},
            "dead_letter_topic must be a topic's full name",
        ),
    ],
    ids=["scheduler-route", "unknown-route", "short-ack-deadline", "trigger-to-pubsub-route", "no-type", "dead-letter"],
)
def test_a_source_that_would_refuse_or_redeliver_stops_the_plan(
    rules_module: Path, tmp_path: Path, change: dict, message: str
) -> None:
    result = apply(rules_module, tmp_path, {**BASE_VARS, **change}, check=False)
    assert result.returncode != 0
    assert message in " ".join(result.stderr.split()), result.stderr


def test_subscriptions_and_triggers_sign_as_the_invoker_for_the_service_url(hcl_trees: dict[str, dict]) -> None:
    tree = hcl_trees["terraform/sources.tf"]
    [(_, _, subscription)] = [b for b in blocks(tree, "resource") if b[0] == "google_pubsub_subscription"]
    push = subscription["push_config"][0]
    assert string(push["push_endpoint"]) == "${local.service_url}/v1/routes/${each.value.route}:run"
    token = push["oidc_token"][0]
    assert string(token["service_account_email"]) == "${google_service_account.invoker.email}"
    assert string(token["audience"]) == "${local.service_url}"  # RUNONCE_AUDIENCE (main.tf)
    assert subscription["retry_policy"] and subscription["dead_letter_policy"]
    [(_, _, trigger)] = [b for b in blocks(tree, "resource") if b[0] == "google_eventarc_trigger"]
    assert string(trigger["service_account"]) == "${google_service_account.invoker.email}"
    assert string(trigger["destination"][0]["cloud_run_service"][0]["path"]) == "/v1/routes/${each.value.route}:run"
    main = json.dumps(hcl_trees["terraform/main.tf"])
    assert "RUNONCE_AUDIENCE" in main and "RUNONCE_ALLOWED_CALLERS" in main
    granted = {(b[0], b[1]) for b in blocks(tree, "resource")}
    for grant in (
        ("google_service_account_iam_member", "pubsub_signs_as_invoker"),
        ("google_pubsub_topic_iam_member", "pubsub_dead_letters"),
        ("google_pubsub_subscription_iam_member", "pubsub_dead_letters"),
        ("google_project_iam_member", "invoker_receives_events"),
        ("google_project_iam_member", "storage_publishes_events"),
    ):
        assert grant in granted, grant
