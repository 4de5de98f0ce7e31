"""`runonce lint` on the same Scheduler job in two regions (docs/how-to/two-regions.md): the
recipe passes, and a pair whose regions would each run every fire time is an error, read from the
jobs as `gcloud scheduler jobs list --format=json` prints them, through the real `runonce` group."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from runonce.cli import main

NOW = "2026-11-30T00:00:00Z"
ROUTES = """
routes:
  nightly-etl:
    target: {type: log}
    namespace: {project: acme-prod, location: us-central1}
  other:
    target: {type: log}
"""


def job(region: str, query: str = "?project=acme-prod&location=us-central1", **changes: Any) -> dict[str, Any]:
    """The Job resource of `nightly-etl` in `region`, calling runonce in that region."""
    resource = {
        "name": f"projects/acme-prod/locations/{region}/jobs/nightly-etl",
        "schedule": "0 3 * * *",
        "timeZone": "Etc/UTC",
        "attemptDeadline": "60s",
        "retryConfig": {"retryCount": 5, "minBackoffDuration": "20s", "maxBackoffDuration": "300s", "maxDoublings": 4},
        "httpTarget": {
            "uri": f"https://runonce-123.{region}.run.app/v1/routes/nightly-etl:run{query}",
            "httpMethod": "POST",
            "oidcToken": {
                "serviceAccountEmail": "runonce-invoker@acme-prod.iam.gserviceaccount.com",
                "audience": f"https://runonce-123.{region}.run.app",
            },
        },
    }
    return resource | changes


@pytest.fixture
def lint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for name in ("RUNONCE_ROUTES_FILE", "RUNONCE_ROUTES", "RUNONCE_LEASE_SECONDS", "RUNONCE_RETENTION_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "routes.yaml").write_text(ROUTES)

    def run(*jobs: dict[str, Any]) -> tuple[int, list[dict[str, str]]]:
        (tmp_path / "jobs.json").write_text(json.dumps(list(jobs)))
        files = [str(tmp_path / "routes.yaml"), str(tmp_path / "jobs.json")]
        result = CliRunner().invoke(main, ["lint", *files, "--format", "json", "--now", NOW], catch_exceptions=False)
        return result.exit_code, json.loads(result.stdout)["findings"]

    return run


def codes(findings: list[dict[str, str]]) -> set[tuple[str, str]]:
    return {(finding["severity"], finding["code"]) for finding in findings}


def test_the_recipe_passes_without_a_namespace_warning(lint) -> None:
    """Both regions' URLs carry the first region's namespace: the second region's job names a
    location it does not live in, on purpose, and lint knows the pair."""
    exit_code, findings = lint(job("us-central1"), job("us-east1"))
    assert exit_code == 0, findings
    assert not {code for _, code in codes(findings)} & {"namespace_mismatch", "regions_keyed_apart"}


def test_the_route_namespace_alone_keys_both_regions_alike(lint) -> None:
    exit_code, findings = lint(job("us-central1", query=""), job("us-east1", query=""))
    assert exit_code == 0, findings


def test_each_region_keying_its_own_location_is_an_error(lint) -> None:
    exit_code, findings = lint(
        job("us-central1", query="?project=acme-prod&location=us-central1"),
        job("us-east1", query="?project=acme-prod&location=us-east1"),
    )
    assert exit_code == 1
    [error] = [f for f in findings if f["code"] == "regions_keyed_apart"]
    assert error["subject"] == "job nightly-etl"
    assert "us-central1: acme-prod/us-central1/nightly-etl" in error["message"]
    assert "us-east1: acme-prod/us-east1/nightly-etl" in error["message"]


def test_one_region_with_the_query_and_one_with_the_route_namespace_of_another_location_is_an_error(lint) -> None:
    exit_code, findings = lint(
        job("us-east1", query="?project=acme-prod&location=us-east1"), job("us-central1", query="")
    )
    assert (exit_code, ("error", "regions_keyed_apart") in codes(findings)) == (1, True)


def test_regions_calling_different_routes_are_keyed_apart(lint) -> None:
    other = job("us-east1")
    other["httpTarget"] = {
        **other["httpTarget"],
        "uri": other["httpTarget"]["uri"].replace("nightly-etl:run", "other:run"),
    }
    exit_code, findings = lint(job("us-central1"), other)
    assert (exit_code, ("error", "regions_keyed_apart") in codes(findings)) == (1, True)


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"schedule": "0 4 * * *"}, "regions_schedule_differs"),
        ({"timeZone": "Europe/Paris"}, "regions_schedule_differs"),
        (
            {"body": base64.b64encode(b'{"mode": "full"}').decode()},
            "regions_body_differs",
        ),
    ],
)
def test_regions_firing_at_other_times_or_with_another_body_are_errors(lint, change: dict, code: str) -> None:
    second = job("us-east1")
    if "body" in change:
        second["httpTarget"] = {**second["httpTarget"], **change}
    else:
        second.update(change)
    exit_code, findings = lint(job("us-central1"), second)
    assert exit_code == 1 and ("error", code) in codes(findings), findings


def test_same_zone_spelled_twice_and_the_same_id_in_another_project_are_not_findings(lint) -> None:
    elsewhere = job("us-east1", query="?project=acme-dev&location=us-east1")
    elsewhere["name"] = "projects/acme-dev/locations/us-east1/jobs/nightly-etl"
    exit_code, findings = lint(job("us-central1"), job("us-east1", timeZone="UTC"), elsewhere)
    assert exit_code == 0, findings
    assert codes(findings) == set(), findings


def test_a_single_job_naming_another_location_still_warns(lint) -> None:
    exit_code, findings = lint(job("us-east1"))
    assert exit_code == 0
    assert ("warning", "namespace_mismatch") in codes(findings)
