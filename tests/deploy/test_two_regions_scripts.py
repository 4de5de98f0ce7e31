"""deploy/scheduler-job.sh with several locations (docs/how-to/two-regions.md), run with the real
gcloud against the fake Google APIs: the same job in each region, each calling runonce in its own
region, all keyed by the first region; the jobs it makes pass `runonce lint` as a pair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_gcp import FakeGoogle
from test_deploy_scripts import IMAGE, NUMBER, PROJECT, deploy, fake, routes_file  # noqa: F401 - the fixtures

from runonce.cli import main

pytestmark = pytest.mark.deploy

REGIONS = ["europe-west1", "europe-west4"]
JOB = ["--project", PROJECT, "--job", "nightly-etl", "--route", "etl", "--schedule", "0 3 * * *"]
JOB += ["--time-zone", "Europe/Paris", "--body", '{"mode": "full"}']


def url(region: str) -> str:
    return f"https://runonce-{NUMBER}.{region}.run.app"


def stored(google: FakeGoogle, region: str) -> dict:
    return google.state.jobs[f"projects/{PROJECT}/locations/{region}/jobs/nightly-etl"]


def test_one_job_in_two_regions_calls_each_regions_service_with_the_first_regions_namespace(
    deploy,  # noqa: F811
    fake: FakeGoogle,  # noqa: F811
    tmp_path: Path,
) -> None:
    deploy("scheduler-job.sh", *JOB, "--location", ",".join(REGIONS))

    creates = fake.find("cloudscheduler.projects.locations.jobs.create")
    assert [create.path for create in creates] == [f"v1/projects/{PROJECT}/locations/{r}/jobs" for r in REGIONS]
    for region in REGIONS:
        job = stored(fake, region)
        assert (job["schedule"], job["timeZone"]) == ("0 3 * * *", "Europe/Paris")
        target = job["httpTarget"]
        assert target["uri"] == f"{url(region)}/v1/routes/etl:run?project={PROJECT}&location=europe-west1"
        assert target["oidcToken"]["audience"] == url(region)
    assert stored(fake, REGIONS[0])["httpTarget"]["body"] == stored(fake, REGIONS[1])["httpTarget"]["body"]

    fake.requests.clear()
    deploy("scheduler-job.sh", *JOB, "--location", ",".join(REGIONS))
    assert fake.mutations() == [], "unchanged jobs must not be rewritten"

    # What the script made is the recipe `runonce lint` expects of a job in two regions.
    (tmp_path / "routes.yaml").write_text("routes:\n  etl:\n    target: {type: log}\n")
    (tmp_path / "jobs.json").write_text(json.dumps([stored(fake, region) for region in REGIONS]))
    files = [str(tmp_path / "routes.yaml"), str(tmp_path / "jobs.json")]
    result = CliRunner().invoke(main, ["lint", *files, "--format", "json"], catch_exceptions=False)
    codes = {finding["code"] for finding in json.loads(result.stdout)["findings"]}
    assert result.exit_code == 0 and not codes & {"regions_keyed_apart", "namespace_mismatch"}, result.stdout


def test_adding_a_region_leaves_the_first_regions_job_and_its_run_ids_alone(
    deploy,  # noqa: F811
    fake: FakeGoogle,  # noqa: F811
) -> None:
    deploy("scheduler-job.sh", *JOB, "--location", REGIONS[0])
    before = stored(fake, REGIONS[0])
    fake.requests.clear()
    deploy("scheduler-job.sh", *JOB, "--location", ",".join(REGIONS))

    assert [m.path for m in fake.mutations()] == [f"v1/projects/{PROJECT}/locations/{REGIONS[1]}/jobs"]
    assert stored(fake, REGIONS[0]) == before


@pytest.mark.parametrize(
    ("location", "extra", "message"),
    [
        ("europe-west1,europe-west1", [], "--location lists a region twice"),
        ("europe-west1,,europe-west4", [], "--location must be a region or a comma-separated list of regions"),
        ("europe-west1,europe-west4", ["--service-url", "https://r.example"], "each job calls runonce in its own"),
        ("europe-west1,europe-west4", ["--service-region", "europe-west1"], "each job calls runonce in its own"),
    ],
)
def test_a_bad_list_of_locations_exits_2_and_touches_nothing(
    deploy,  # noqa: F811
    fake: FakeGoogle,  # noqa: F811
    location: str,
    extra: list[str],
    message: str,
) -> None:
    result = deploy("scheduler-job.sh", *JOB, "--location", location, *extra, expect=2)
    assert message in result.stderr
    assert fake.mutations() == []


def test_cloud_run_iam_services_in_two_regions_share_one_self_check_grant(
    deploy,  # noqa: F811
    fake: FakeGoogle,  # noqa: F811
    routes_file: Path,  # noqa: F811
) -> None:
    """Each region's deploy keeps the regions already granted: the first region's service still
    passes its start-up check after the second region's deploy."""
    role = f"projects/{PROJECT}/roles/runonceServiceSelfCheck"
    common = ["--project", PROJECT, "--image", IMAGE, "--routes-file", str(routes_file), "--auth", "cloud_run_iam"]
    for region in REGIONS:
        deploy("deploy-service.sh", *common, "--region", region)

    (policy,) = [p for key, p in fake.state.policies.items() if key.endswith(f"projects/{PROJECT}")]
    grants = [b for b in policy["bindings"] if b["role"] == role]
    assert [(g["members"], g["condition"]["expression"]) for g in grants] == [
        (
            [f"serviceAccount:runonce@{PROJECT}.iam.gserviceaccount.com"],
            " || ".join(f'resource.name == "projects/{PROJECT}/locations/{r}/services/runonce"' for r in REGIONS),
        )
    ]
    fake.requests.clear()
    deploy("deploy-service.sh", *common, "--region", REGIONS[0])
    assert fake.find("cloudresourcemanager.projects.setIamPolicy") == []
