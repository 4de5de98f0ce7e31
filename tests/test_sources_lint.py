"""`runonce lint` on Pub/Sub push subscriptions and Eventarc triggers pointed at runonce (as
`gcloud pubsub subscriptions describe --format=json` and `gcloud eventarc triggers describe
--format=json` print them), and on Scheduler jobs pointed at event routes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runonce.lint import LintConfig, lint_files

ROUTES = """
routes:
  orders: {target: {type: log}, source: pubsub, allowed_callers: [push@p.iam.gserviceaccount.com]}
  uploads: {target: {type: log}, source: cloudevents}
  nightly: {target: {type: log}}
"""
URL = "https://runonce-abc-ew.a.run.app"


def subscription(**changes: Any) -> dict[str, Any]:
    """A push subscription as configured by docs/how-to/pubsub.md (and terraform/sources.tf)."""
    sub: dict[str, Any] = {
        "name": "projects/p/subscriptions/orders-runonce",
        "topic": "projects/p/topics/orders",
        "pushConfig": {
            "pushEndpoint": f"{URL}/v1/routes/orders:run",
            "oidcToken": {"serviceAccountEmail": "push@p.iam.gserviceaccount.com"},
        },
        "ackDeadlineSeconds": 60,
        "retryPolicy": {"minimumBackoff": "10s", "maximumBackoff": "600s"},
        "deadLetterPolicy": {"deadLetterTopic": "projects/p/topics/orders-dead", "maxDeliveryAttempts": 10},
    }
    sub.update(changes)
    return sub


def trigger(**changes: Any) -> dict[str, Any]:
    found: dict[str, Any] = {
        "name": "projects/p/locations/europe-west1/triggers/uploads-runonce",
        "eventFilters": [{"attribute": "type", "value": "google.cloud.storage.object.v1.finalized"}],
        "destination": {"cloudRun": {"service": "runonce", "region": "europe-west1", "path": "/v1/routes/uploads:run"}},
        "serviceAccount": "eventarc@p.iam.gserviceaccount.com",
    }
    found.update(changes)
    return found


def lint(tmp_path: Path, *documents: Any) -> list[tuple[str, str, str]]:
    paths = []
    (tmp_path / "routes.yaml").write_text(ROUTES)
    for n, document in enumerate(documents):
        path = tmp_path / f"doc{n}.json"
        path.write_text(json.dumps(document))
        paths.append(str(path))
    findings = lint_files([str(tmp_path / "routes.yaml"), *paths], LintConfig(dispatch_timeout_seconds=30))
    return [(f.subject, f.severity, f.code) for f in findings]


def test_a_well_configured_subscription_and_trigger_pass(tmp_path: Path) -> None:
    assert lint(tmp_path, subscription(), trigger()) == []
    assert lint(tmp_path, [subscription(), subscription(name="projects/p/subscriptions/b")]) == []


def test_what_would_refuse_or_redeliver_every_message_is_found(tmp_path: Path) -> None:
    sub = "subscription orders-runonce"
    no_token = subscription(pushConfig={"pushEndpoint": f"{URL}/v1/routes/orders:run"})
    assert (sub, "error", "no_oidc") in lint(tmp_path, no_token)
    wrapped = subscription()
    wrapped["pushConfig"]["noWrapper"] = {"writeMetadata": True}
    assert (sub, "error", "no_wrapper") in lint(tmp_path, wrapped)
    other = subscription()
    other["pushConfig"]["oidcToken"]["serviceAccountEmail"] = "else@p.iam.gserviceaccount.com"
    assert (sub, "error", "caller_not_allowed") in lint(tmp_path, other)
    to_scheduler = subscription()
    to_scheduler["pushConfig"]["pushEndpoint"] = f"{URL}/v1/routes/nightly:run"
    assert (sub, "error", "wrong_source") in lint(tmp_path, to_scheduler)
    unknown = subscription()
    unknown["pushConfig"]["pushEndpoint"] = f"{URL}/v1/routes/nope:run"
    assert (sub, "error", "unknown_route") in lint(tmp_path, unknown)
    elsewhere = subscription()
    elsewhere["pushConfig"]["pushEndpoint"] = "https://example.com/hook"
    assert (sub, "error", "not_runonce_uri") in lint(tmp_path, elsewhere)


def test_deadline_retry_and_dead_letter_gaps_are_warned(tmp_path: Path) -> None:
    bare = subscription()
    for key in ("ackDeadlineSeconds", "retryPolicy", "deadLetterPolicy"):
        bare.pop(key)
    found = lint(tmp_path, bare)
    codes = {code for _, severity, code in found if severity == "warning"}
    assert codes == {"ack_deadline_short", "no_retry_policy", "no_dead_letter"}  # 10 s default < 30 s dispatch
    assert all(severity == "warning" for _, severity, _ in found)


def test_a_trigger_needs_a_cloudevents_route_and_a_service_account(tmp_path: Path) -> None:
    name = "trigger uploads-runonce"
    assert (name, "error", "no_service_account") in lint(tmp_path, trigger(serviceAccount=None))
    wrong = trigger(destination={"cloudRun": {"service": "runonce", "path": "/v1/routes/orders:run"}})
    assert (name, "error", "wrong_source") in lint(tmp_path, wrong)


def test_a_scheduler_job_pointed_at_an_event_route_is_an_error(tmp_path: Path) -> None:
    job = {
        "name": "projects/my-project/locations/europe-west1/jobs/nightly",
        "schedule": "0 3 * * *",
        "httpTarget": {"uri": f"{URL}/v1/routes/orders:run", "oidcToken": {"serviceAccountEmail": "s@p.iam"}},
    }
    assert ("job nightly", "error", "wrong_source") in lint(tmp_path, job)
