"""terraform/ with a job in a list of regions (docs/how-to/two-regions.md): regions.tf evaluated by
terraform offline, then each google_cloud_scheduler_job rendered from scheduler.tf's expressions
as written; the services, their audiences and the state moves read from main.tf."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from deploy_tools import run, tool
from hcl_tree import blocks, items, string, unquote
from test_terraform import BASE_VARS, TERRAFORM, TF_ENV, _resources, evaluate

pytestmark = pytest.mark.deploy

PROJECT_NUMBER = "123456789012"
OUTPUTS = ["regional_jobs", "service_regions", "scheduler_region"]
NIGHTLY = {"route": "etl", "schedule": "0 3 * * *", "time_zone": "Europe/Paris"}
TWO_REGIONS = {
    **BASE_VARS,
    "region": "us-central1",
    "additional_regions": ["us-east1"],
    "firestore_location": "nam5",
    "jobs": {"nightly": {**NIGHTLY, "regions": ["us-central1", "us-east1"]}, "hourly": {**NIGHTLY}},
}


@pytest.fixture(scope="module")
def regions_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """variables.tf + rules.tf + regions.tf: no provider needed, so terraform evaluates them for real."""
    directory = tmp_path_factory.mktemp("regions")
    for name in ("variables.tf", "rules.tf", "regions.tf"):
        shutil.copy(TERRAFORM / name, directory)
    (directory / "outputs.tf").write_text(
        "".join(f'output "{name}" {{\n  value = local.{name}\n}}\n' for name in OUTPUTS)
    )
    run([tool("terraform"), "init", "-input=false", "-no-color"], cwd=directory, env=TF_ENV)
    return directory


def service_url(hcl_trees: dict[str, dict], region: str) -> str:
    """main.tf's service URL of `region`, with a project number."""
    expression = hcl_trees["terraform/main.tf"]["locals"][0]["service_urls"]
    template = re.search(r'"(https://[^"]+)"', expression).group(1)
    return (
        template.replace("${var.service_name}", "runonce")
        .replace("${data.google_project.this.number}", PROJECT_NUMBER)
        .replace("${region}", region)
    )


def render(hcl_trees: dict[str, dict], outputs: dict) -> dict[str, dict]:
    """google_cloud_scheduler_job.this by key, as scheduler.tf's expressions make each one from
    regions.tf's regional_jobs (asserted to be exactly those expressions first)."""
    job = _resources(hcl_trees)["google_cloud_scheduler_job.this"]
    target = job["http_target"][0]
    assert job["for_each"] == "${local.regional_jobs}"
    assert (job["region"], job["name"], job["schedule"], job["time_zone"]) == (
        "${each.value.region}",
        "${each.value.name}",
        "${each.value.job.schedule}",
        "${each.value.job.time_zone}",
    )
    assert string(target["uri"]) == "${local.service_urls[each.value.service_region]}${each.value.path}"
    assert target["oidc_token"][0]["audience"] == "${local.service_urls[each.value.service_region]}"
    assert target["oidc_token"][0]["service_account_email"] == "${google_service_account.invoker.email}"
    rendered = {}
    for key, value in outputs["regional_jobs"].items():
        url = service_url(hcl_trees, value["service_region"])
        rendered[key] = {
            "region": value["region"],
            "name": value["name"],
            "schedule": value["job"]["schedule"],
            "time_zone": value["job"]["time_zone"],
            "uri": url + value["path"],
            "audience": url,
        }
    return rendered


def test_a_job_in_two_regions_is_one_job_id_and_schedule_per_region_with_one_namespace(
    regions_module: Path, tmp_path: Path, hcl_trees: dict[str, dict]
) -> None:
    jobs = render(hcl_trees, evaluate(regions_module, tmp_path, TWO_REGIONS))

    assert set(jobs) == {"nightly", "nightly@us-east1", "hourly"}
    nightly = [jobs["nightly"], jobs["nightly@us-east1"]]
    assert [job["region"] for job in nightly] == ["us-central1", "us-east1"]
    for job in nightly:
        assert (job["name"], job["schedule"], job["time_zone"]) == ("nightly", "0 3 * * *", "Europe/Paris")
        # Each region's job calls its own region's service, with that service as the audience...
        url = f"https://runonce-{PROJECT_NUMBER}.{job['region']}.run.app"
        assert job["audience"] == url
        parts = urlsplit(job["uri"])
        assert f"{parts.scheme}://{parts.netloc}" == url and parts.path == "/v1/routes/etl:run"
        # ...and both carry the first region's namespace: one run_id per fire time.
        assert parse_qs(parts.query) == {"project": ["my-project"], "location": ["us-central1"]}
    assert jobs["hourly"]["uri"] == (
        f"https://runonce-{PROJECT_NUMBER}.us-central1.run.app/v1/routes/etl:run?project=my-project&location=us-central1"
    )


def test_a_single_region_job_keeps_its_address_url_and_run_ids(
    regions_module: Path, tmp_path: Path, hcl_trees: dict[str, dict]
) -> None:
    """Without regions (and without additional_regions) every job renders as it did before jobs took
    regions: keyed by its ID (no state moves), in the Scheduler region, the same URL byte for byte
    (so the same run_ids), and one service keyed "primary" (the state move main.tf declares)."""
    variables = {**BASE_VARS, "scheduler_region": "europe-west2", "jobs": {"nightly": NIGHTLY, "b": NIGHTLY}}
    outputs = evaluate(regions_module, tmp_path, variables)
    jobs = render(hcl_trees, outputs)

    assert outputs["service_regions"] == {"primary": "europe-west1"}
    assert set(jobs) == {"nightly", "b"}
    for name, job in jobs.items():
        assert job["region"] == "europe-west2"
        assert job["uri"] == (
            f"https://runonce-{PROJECT_NUMBER}.europe-west1.run.app/v1/routes/etl:run"
            "?project=my-project&location=europe-west2"
        ), name
    # Listing the Scheduler region alone is the same job.
    listed = evaluate(
        regions_module, tmp_path, {**variables, "jobs": {"nightly": {**NIGHTLY, "regions": ["europe-west2"]}}}
    )
    assert render(hcl_trees, listed)["nightly"] == jobs["nightly"]
    # Adding a region keeps the first region's job, its key and its URL: its run_ids do not change.
    grown = {
        **variables,
        "additional_regions": ["europe-west4"],
        "firestore_location": "eur3",
        "jobs": {"nightly": {**NIGHTLY, "regions": ["europe-west2", "europe-west4"]}},
    }
    two = render(hcl_trees, evaluate(regions_module, tmp_path, grown))
    assert two["nightly"] == jobs["nightly"]
    assert two["nightly@europe-west4"]["uri"] == (
        f"https://runonce-{PROJECT_NUMBER}.europe-west4.run.app/v1/routes/etl:run?project=my-project&location=europe-west2"
    )


def test_the_service_runs_in_every_region_with_its_own_audience_and_moves_state_instead_of_replacing(
    regions_module: Path, tmp_path: Path, hcl_trees: dict[str, dict]
) -> None:
    outputs = evaluate(regions_module, tmp_path, TWO_REGIONS)
    assert outputs["service_regions"] == {"primary": "us-central1", "us-east1": "us-east1"}

    resources = _resources(hcl_trees)
    service = resources["google_cloud_run_v2_service.this"]
    assert (service["for_each"], service["location"]) == ("${local.service_regions}", "${each.value}")
    dynamic = {
        unquote(label): body
        for entry in service["template"][0]["containers"][0]["dynamic"]
        for label, body in items(entry)
    }
    env = dynamic["env"]
    assert env["for_each"] == ("${merge(local.container_env, {RUNONCE_AUDIENCE = local.service_urls[each.value]})}"), (
        "each region's service accepts tokens for its own URL"
    )
    invoker = resources["google_cloud_run_v2_service_iam_member.invoker"]
    assert invoker["for_each"] == "${google_cloud_run_v2_service.this}"
    moved = {(m["from"], m["to"]) for m in hcl_trees["terraform/main.tf"]["moved"]}
    assert moved == {
        ("${google_cloud_run_v2_service.this}", '${google_cloud_run_v2_service.this["primary"]}'),
        (
            "${google_cloud_run_v2_service_iam_member.invoker}",
            '${google_cloud_run_v2_service_iam_member.invoker["primary"]}',
        ),
    }
    # Nothing still names the service without its key (it would fail to plan).
    for path, tree in hcl_trees.items():
        for kind in ("resource", "data", "output"):
            for _, _, body in blocks(tree, kind):
                assert not re.search(r"google_cloud_run_v2_service\.this\.", str(body)), path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"jobs": {"nightly": {**NIGHTLY, "regions": ["us-central1", "asia-east1"]}}},
            "jobs.nightly.regions: asia-east1 has no runonce service",
        ),
        ({"additional_regions": ["us-central1", "us-east1"]}, "additional_regions repeats region (us-central1)"),
        (
            {
                "routes": {
                    "etl": {"target": {"type": "log"}, "namespace": {"project": "my-project", "location": "us-east1"}}
                }
            },
            'jobs.nightly: route "etl" has namespace my-project/us-east1, but the job\'s regions all carry '
            "my-project/us-central1",
        ),
        ({"firestore_location": None}, "firestore_location is us-central1, one region"),
        ({"firestore_location": "us-east1"}, "firestore_location is us-east1, one region"),
        ({"store": "spanner"}, "the Spanner instance config regional-us-central1 is one region"),
        ({"store": "spanner", "spanner_instance_config": "regional-us-east1"}, "regional-us-east1 is one region"),
        ({"store": "redis", "network": "default"}, "a Memorystore instance lives in one region"),
        ({"jobs": {"nightly": {**NIGHTLY, "regions": []}}}, "jobs[*].regions must be a non-empty list"),
        ({"jobs": {"nightly": {**NIGHTLY, "regions": ["us-east1", "us-east1"]}}}, "distinct Google Cloud regions"),
        ({"additional_regions": ["us-east1-b"]}, "additional_regions must be distinct Google Cloud regions"),
    ],
)
def test_a_two_region_setup_that_cannot_survive_a_region_stops_the_plan(
    regions_module: Path, tmp_path: Path, change: dict, message: str
) -> None:
    result = evaluate(regions_module, tmp_path, {**TWO_REGIONS, **change}, check=False)
    assert result.returncode != 0
    assert message in " ".join(result.stderr.split()), result.stderr


@pytest.mark.parametrize(
    "change",
    [
        {"store": "spanner", "spanner_instance_config": "nam3"},
        {"store": "spanner", "create_spanner_instance": False},  # an existing instance: its config is the user's
        {"firestore_location": "eur3", "region": "europe-west1", "additional_regions": ["europe-west4"], "jobs": {}},
        {"create_firestore_database": False, "firestore_location": None},
        {
            "routes": {
                "etl": {"target": {"type": "log"}, "namespace": {"project": "my-project", "location": "us-central1"}}
            }
        },
    ],
)
def test_multi_region_stores_pass(regions_module: Path, tmp_path: Path, change: dict) -> None:
    evaluate(regions_module, tmp_path, {**TWO_REGIONS, **change})


def test_no_local_value_is_defined_twice_across_the_module(hcl_trees: dict[str, dict]) -> None:
    """terraform refuses a module that defines a local in two files (regions.tf's next to the
    others'); without the provider only this test can say so."""
    seen: dict[str, str] = {}
    twice = []
    for path, tree in sorted(hcl_trees.items()):
        if path.count("/") != 1:
            continue  # terraform/examples/… are modules of their own
        for entry in tree.get("locals", []):
            for name, _ in items(entry):
                if name in seen:
                    twice.append(f"local.{name}: {seen[name]} and {path}")
                seen[name] = path
    assert twice == []
