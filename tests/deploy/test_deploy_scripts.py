"""deploy/ scripts run for real: bash + the real gcloud CLI, against a fake of Google's APIs that
captures each REST request and holds it to the discovery documents (fake_gcp.py)."""

from __future__ import annotations

import base64
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from deploy_tools import REPO, gcloud_env, smoke_env, tool
from fake_gcp import Captured, FakeGoogle

from runonce.routes import parse_routes
from tests.support import oidc
from tests.support.procs import free_port, start_server

pytestmark = pytest.mark.deploy

DEPLOY = REPO / "deploy"
PROJECT = "demo-project"
NUMBER = "123456789012"
REGION = "europe-west1"
URL = f"https://runonce-{NUMBER}.{REGION}.run.app"
RUNTIME = f"runonce@{PROJECT}.iam.gserviceaccount.com"
INVOKER = f"runonce-invoker@{PROJECT}.iam.gserviceaccount.com"
IMAGE_NAME = f"{REGION}-docker.pkg.dev/{PROJECT}/runonce/runonce"
IMAGE = f"{IMAGE_NAME}:0.1.0"
DIGEST_1, DIGEST_2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
ROUTES_YAML = f"""\
# every target type, as docs/how-to/targets/ writes them
routes:
  etl:
    target: {{type: workflows, workflow: projects/wf-proj/locations/{REGION}/workflows/etl, argument: {{mode: full}}}}
    allowed_callers: [{INVOKER}]
  batch:
    target: {{type: cloud_run_job, job: projects/{PROJECT}/locations/{REGION}/jobs/batch}}
  build:
    target: {{type: cloud_build_trigger, trigger: projects/cb-proj/locations/global/triggers/nightly}}
  hook:
    target: {{type: http, url: "https://hooks-xyz.a.run.app/run", audience: "https://hooks-xyz.a.run.app"}}
  demo:
    target: {{type: log}}
  rollup:
    target: {{type: bigquery_job, project: bq-proj, location: US,
              configuration: {{query: {{query: "SELECT @run_id"}}}}}}
"""


@pytest.fixture
def fake() -> Iterator[FakeGoogle]:
    with FakeGoogle(PROJECT, NUMBER) as server:
        server.push_image(IMAGE_NAME, "0.1.0", DIGEST_1)
        yield server
        assert server.violations == [], "gcloud sent requests that break Google's API descriptions"


@pytest.fixture
def routes_file(tmp_path: Path) -> Path:
    path = tmp_path / "routes.yaml"
    path.write_text(ROUTES_YAML)
    return path


@pytest.fixture
def deploy(fake: FakeGoogle, tmp_path: Path):
    """Run a deploy/ script with the real gcloud, every Google API pointed at the fake."""
    env = gcloud_env(fake.port, tmp_path)

    def run(script: str, *args: str, extra_env: dict[str, str] | None = None, expect: int = 0):
        result = subprocess.run(
            ["bash", str(DEPLOY / script), *args],
            env={**env, **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == expect, f"{script} exited {result.returncode}:\n{result.stderr}"
        return result

    return run


def policy_bindings(request: Captured) -> list[tuple[str, tuple[str, ...], str | None]]:
    return [
        (b["role"], tuple(b["members"]), (b.get("condition") or {}).get("expression"))
        for b in request.body["policy"]["bindings"]
    ]


# --- lint, help and bad input ------------------------------------------------------------------


def test_shellcheck_finds_nothing() -> None:
    scripts = [str(p) for p in sorted(DEPLOY.glob("*.sh"))] + [str(DEPLOY / "lib" / "common.sh")]
    result = subprocess.run(
        [tool("shellcheck"), "-x", "-P", "SCRIPTDIR", *scripts, str(REPO / ".ci" / "deploy-checks")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("script", ["setup.sh", "deploy-service.sh", "scheduler-job.sh", "audit-job.sh"])
def test_help_documents_every_flag_the_script_parses(deploy, script: str) -> None:
    result = deploy(script, "--help")
    source = (DEPLOY / script).read_text()
    parsed = set(re.findall(r"^\s+(--[a-z-]+)\)", source, re.MULTILINE))
    assert parsed, script
    for flag in parsed:
        assert flag in result.stdout, f"{script} --help does not mention {flag}"
    assert "set -euo pipefail" in source


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("setup.sh", ["--region", REGION], "missing --project (or PROJECT_ID)"),
        (
            "deploy-service.sh",
            ["--project", PROJECT, "--region", REGION, "--routes-file", "/nonexistent"],
            "missing --image (or IMAGE)",
        ),
        (
            "scheduler-job.sh",
            ["--project", PROJECT, "--location", REGION, "--job", "j", "--route", "etl", "--schedule", "0 3 * * * *"],
            "--schedule must be a unix-cron expression with 5 fields",
        ),
        (
            "scheduler-job.sh",
            [
                "--project",
                PROJECT,
                "--location",
                REGION,
                "--job",
                "j",
                "--route",
                "etl",
                "--schedule",
                "0 3 * * *",
                "--retry-count",
                "2",
            ],
            "retries span 60 s, less than the lease + attempt deadline = 360 s",
        ),
        (
            "scheduler-job.sh",
            [
                "--project",
                PROJECT,
                "--location",
                REGION,
                "--job",
                "j",
                "--route",
                "etl",
                "--schedule",
                "0 3 * * *",
                "--attempt-deadline",
                "30",
            ],
            "--attempt-deadline (30) must be at least the dispatch timeout + 15 = 45 s",
        ),
        (
            "scheduler-job.sh",
            [
                "--project",
                PROJECT,
                "--location",
                REGION,
                "--job",
                "j",
                "--route",
                "etl",
                "--schedule",
                "0 3 * * *",
                "--body",
                "[1]",
            ],
            "--body must be a JSON object",
        ),
        (
            "setup.sh",
            ["--project", PROJECT, "--region", REGION, "--routes-file", "ROUTES", "--bogus"],
            "unknown argument '--bogus'",
        ),
        (
            "scheduler-job.sh",
            [
                "--project",
                PROJECT,
                "--location",
                REGION,
                "--job",
                "j",
                "--route",
                "etl",
                "--schedule",
                "0 3 * * *",
                "--retention-seconds",
                "900",
            ],
            "--retention-seconds (900) must exceed the longest retry window (960 s: 5 retries",
        ),
        (
            "deploy-service.sh",
            [
                "--project",
                PROJECT,
                "--region",
                REGION,
                "--image",
                IMAGE,
                "--routes-file",
                "ROUTES",
                "--firestore-database",
                'x"\nRUNONCE_AUTH: none',
            ],
            "--firestore-database must be (default) or 4-63 lower-case letters",
        ),
        (
            "deploy-service.sh",
            ["--project", "My Project", "--region", REGION, "--image", IMAGE, "--routes-file", "ROUTES"],
            "--project must be a project ID",
        ),
        (
            "deploy-service.sh",
            ["--project", PROJECT, "--region", REGION, "--image", "docker.io/me/runonce:1", "--routes-file", "ROUTES"],
            "--image must be in Artifact Registry",
        ),
        (
            "deploy-service.sh",
            [
                "--project",
                PROJECT,
                "--region",
                REGION,
                "--image",
                IMAGE,
                "--routes-file",
                "ROUTES",
                "--lease-seconds",
                "40",
            ],
            "--lease-seconds (40) must be at least --dispatch-timeout-seconds (30) + 2 x the store timeout (5) + 1 = "
            "41",
        ),
        (
            "scheduler-job.sh",
            [
                "--project",
                PROJECT,
                "--location",
                REGION,
                "--job",
                "j",
                "--route",
                "etl",
                "--schedule",
                "0 3 * * *",
                "--lease-seconds",
                "100",
                "--dispatch-timeout-seconds",
                "95",
            ],
            "--lease-seconds (100) must be at least --dispatch-timeout-seconds (95) + 2 x the store timeout (5) + 1 = "
            "106",
        ),
        (
            "setup.sh",
            [
                "--project",
                PROJECT,
                "--region",
                REGION,
                "--routes-file",
                "ROUTES",
                "--store",
                "spanner://projects/demo-project/instances/i1",
            ],
            "--store must be firestore, spanner://projects/P/instances/I/databases/D[?table=T] or redis://",
        ),
        (
            "deploy-service.sh",
            [
                "--project",
                PROJECT,
                "--region",
                REGION,
                "--image",
                IMAGE,
                "--routes-file",
                "ROUTES",
                "--store",
                "mysql://db/runs",
            ],
            "--store must be firestore, spanner://",
        ),
        (
            "deploy-service.sh",
            [
                "--project",
                PROJECT,
                "--region",
                REGION,
                "--image",
                IMAGE,
                "--routes-file",
                "ROUTES",
                "--store",
                "rediss://10.0.0.3:6378/0?ca_file=/etc/ca.pem",
            ],
            "--store redis://... needs --network: Cloud Run reaches Memorystore only through Direct VPC egress",
        ),
        (
            "deploy-service.sh",
            [
                "--project",
                PROJECT,
                "--region",
                REGION,
                "--image",
                IMAGE,
                "--routes-file",
                "ROUTES",
                "--subnet",
                "runonce",
            ],
            "--subnet needs --network (Direct VPC egress)",
        ),
        (
            "audit-job.sh",
            ["--project", PROJECT, "--region", REGION, "--notification-channels", "email:me@x.com"],
            "--notification-channels must be comma-separated projects/P/notificationChannels/ID",
        ),
        (
            "scheduler-job.sh",
            [
                "--project",
                PROJECT,
                "--location",
                REGION,
                "--job",
                "j",
                "--path",
                "/v1/audit:run?x=1",
                "--schedule",
                "0 3 * * *",
            ],
            "--path must be a runonce path such as /v1/audit:run",
        ),
        (
            "deploy-service.sh",
            [
                "--project",
                PROJECT,
                "--region",
                REGION,
                "--image",
                IMAGE,
                "--routes-file",
                "ROUTES",
                "--admin-callers",
                "runonce-auditor",
            ],
            "--admin-callers must be comma-separated email addresses",
        ),
    ],
    ids=[
        "missing-project",
        "missing-image",
        "six-field-cron",
        "retries-shorter-than-lease",
        "short-deadline",
        "body-not-object",
        "unknown-flag",
        "retention-below-longest-window",
        "database-with-yaml",
        "project-not-an-id",
        "tag-outside-artifact-registry",
        "deploy-lease-rule",
        "job-lease-rule",
        "spanner-url-without-database",
        "unknown-store",
        "redis-without-network",
        "subnet-without-network",
        "audit-channel-not-a-name",
        "path-with-a-query",
        "admin-caller-not-an-email",
    ],
)
def test_bad_input_exits_2_with_a_precise_message_and_touches_nothing(
    deploy, fake: FakeGoogle, routes_file: Path, script: str, args: list[str], message: str
) -> None:
    args = [str(routes_file) if a == "ROUTES" else a for a in args]
    result = deploy(script, *args, expect=2)
    assert message in result.stderr
    assert fake.requests == []


def test_scripts_expand_arrays_safely_for_bash_3_2() -> None:
    """macOS's bash 3.2 treats "${a[@]}" of an empty array as unbound under `set -u`: every array
    expansion must be the guarded ${a[@]+"${a[@]}"} (or ${a[*]-} in a message, or ${#a[@]})."""
    unguarded = []
    for path in [*sorted(DEPLOY.glob("*.sh")), DEPLOY / "lib" / "common.sh"]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            rest = re.sub(r'\$\{(\w+)\[@\]\+"\$\{\1\[@\]\}"\}', "", line)  # the guarded form
            rest = re.sub(r"\$\{\w+\[\*\]-\}|\$\{#\w+\[@\]\}", "", rest)
            if re.search(r"\$\{\w+\[[@*]\]", rest):
                unguarded.append(f"{path.name}:{number}: {line.strip()}")
    assert unguarded == []


@pytest.mark.parametrize("script", ["setup.sh", "deploy-service.sh", "scheduler-job.sh", "smoke.sh", "audit-job.sh"])
def test_scripts_refuse_a_shell_that_is_not_bash_3_2_or_later(script: str) -> None:
    result = subprocess.run(["sh", str(DEPLOY / script), "--help"], capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.strip() == f"{DEPLOY / script}: needs bash 3.2 or later (macOS's /bin/bash is 3.2), not sh"


def test_env_file_carries_any_value_escaped(deploy, fake: FakeGoogle, tmp_path: Path) -> None:
    """The env file is JSON written by Python: quotes, colons and newlines in the routes arrive intact."""
    routes = tmp_path / "routes.yaml"
    text = 'routes:\n  demo:\n    target: {type: log}\n    # a "quoted": comment\\n\n'
    routes.write_text(text)
    deploy(
        "deploy-service.sh", "--project", PROJECT, "--region", REGION, "--image", IMAGE, "--routes-file", str(routes)
    )
    (create,) = fake.find("run.namespaces.services.create")
    assert _env(create.body)["RUNONCE_ROUTES"] == text


def test_bad_routes_file_is_refused_before_any_change(deploy, fake: FakeGoogle, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("routes:\n  batch:\n    target: {type: cloud_run_job, job: batch}\n")
    result = deploy("setup.sh", "--project", PROJECT, "--region", REGION, "--routes-file", str(bad), expect=2)
    assert "route 'batch': field 'target.job' must match ^projects/" in result.stderr
    assert fake.requests == []


# --- setup.sh ------------------------------------------------------------------------------------


def test_setup_creates_accounts_store_ttl_and_least_privilege_grants_then_changes_nothing(
    deploy, fake: FakeGoogle, routes_file: Path
) -> None:
    args = [
        "--project",
        PROJECT,
        "--region",
        REGION,
        "--routes-file",
        str(routes_file),
        "--trigger-service-account",
        "builder@cb-proj.iam.gserviceaccount.com",
        "--downstream-service",
        f"projects/{PROJECT}/locations/{REGION}/services/hooks",
    ]
    deploy("setup.sh", *args)

    created = [r.body for r in fake.find("iam.projects.serviceAccounts.create")]
    assert [a["accountId"] for a in created] == ["runonce", "runonce-invoker"]

    (database,) = fake.find("firestore.projects.databases.create")
    assert database.query["databaseId"] == ["(default)"]
    assert database.body["type"] == "FIRESTORE_NATIVE"
    assert database.body["locationId"] == REGION
    assert database.body["deleteProtectionState"] == "DELETE_PROTECTION_ENABLED"

    (ttl,) = fake.find("firestore.projects.databases.collectionGroups.fields.patch")
    assert ttl.path.endswith("/databases/(default)/collectionGroups/runonce_runs/fields/expire_at")
    assert ttl.query["updateMask"] == ["ttlConfig"]
    assert ttl.body["ttlConfig"] == {}

    grants = {}
    for request in fake.mutations():
        if request.method_id.endswith("setIamPolicy"):
            grants[request.path.split(":")[0]] = policy_bindings(request)
    member = f"serviceAccount:{RUNTIME}"
    assert grants == {
        f"v1/projects/{PROJECT}": [
            ("roles/datastore.user", (member,), f'resource.name == "projects/{PROJECT}/databases/(default)"')
        ],
        "v1/projects/wf-proj": [("roles/workflows.invoker", (member,), None)],
        "v1/projects/cb-proj": [("projects/cb-proj/roles/runonceBuildRunner", (member,), None)],
        "v1/projects/bq-proj": [("roles/bigquery.jobUser", (member,), None)],
        f"v1/projects/{PROJECT}/locations/{REGION}/jobs/batch": [
            ("roles/run.jobsExecutorWithOverrides", (member,), None),
            (f"projects/{PROJECT}/roles/runonceExecutionReader", (member,), None),
        ],
        "v1/projects/cb-proj/serviceAccounts/builder@cb-proj.iam.gserviceaccount.com": [
            ("roles/iam.serviceAccountUser", (member,), None)
        ],
        f"v1/projects/{PROJECT}/locations/{REGION}/services/hooks": [("roles/run.invoker", (member,), None)],
    }

    # Custom roles, in the project of what they are granted on, with exactly what runonce needs.
    assert {name: sorted(role["includedPermissions"]) for name, role in fake.state.roles.items()} == {
        "projects/cb-proj/roles/runonceBuildRunner": [
            "cloudbuild.builds.create",
            "cloudbuild.builds.get",
            "cloudbuild.builds.list",
        ],
        f"projects/{PROJECT}/roles/runonceExecutionReader": ["run.executions.get", "run.executions.list"],
    }

    fake.requests.clear()
    second = deploy("setup.sh", *args)
    assert fake.mutations() == [], "a second run must change nothing"
    assert "+ " not in second.stderr


def test_setup_grants_a_cloud_tasks_route_on_its_queue_and_actas_on_its_oidc_account(
    deploy, fake: FakeGoogle, tmp_path: Path
) -> None:
    queue = f"projects/tq-proj/locations/{REGION}/queues/exports"
    token_account = "export-invoker@tq-proj.iam.gserviceaccount.com"
    routes = tmp_path / "routes.yaml"
    routes.write_text(f"""routes:
  export:
    target: {{type: cloud_tasks_task, queue: {queue}, http_request: {{url: "https://x.a.run.app/run",
              oidc_token: {{service_account_email: {token_account}}}}}}}
  plain:
    target: {{type: cloud_tasks_task, queue: {queue}, http_request: {{url: "https://y.a.run.app/run"}}}}
""")
    common = ["--project", PROJECT, "--region", REGION, "--routes-file", str(routes)]
    deploy("setup.sh", *common)
    member = f"serviceAccount:{RUNTIME}"
    grants = {
        r.path.split(":")[0]: policy_bindings(r) for r in fake.mutations() if r.method_id.endswith("setIamPolicy")
    }
    assert grants[f"v2/{queue}"] == [
        ("roles/cloudtasks.enqueuer", (member,), None),
        ("roles/cloudtasks.viewer", (member,), None),
    ]
    assert grants[f"v1/projects/tq-proj/serviceAccounts/{token_account}"] == [
        ("roles/iam.serviceAccountUser", (member,), None)
    ]
    assert len(grants) == 3  # and the claim store's; nothing on the project of the queue
    fake.requests.clear()
    deploy("setup.sh", *common)
    assert fake.mutations() == [], "a second run must change nothing"


def test_setup_can_grant_the_predefined_cloud_build_role(deploy, fake: FakeGoogle, routes_file: Path) -> None:
    deploy(
        "setup.sh",
        "--project",
        PROJECT,
        "--region",
        REGION,
        "--routes-file",
        str(routes_file),
        "--cloud-build-role",
        "predefined",
    )
    (write,) = [r for r in fake.mutations() if r.path == "v1/projects/cb-proj:setIamPolicy"]
    assert [role for role, _, _ in policy_bindings(write)] == ["roles/cloudbuild.builds.editor"]
    assert "projects/cb-proj/roles/runonceBuildRunner" not in fake.state.roles


def test_setup_with_no_optional_lists_and_a_new_database_replaces_the_stale_condition(
    deploy, fake: FakeGoogle, tmp_path: Path
) -> None:
    """No trigger accounts, no downstream services (empty arrays: bash 3.2's `set -u` trap), and a
    changed --firestore-database: the old condition is removed, the new one granted."""
    routes = tmp_path / "routes.yaml"
    routes.write_text("routes:\n  demo:\n    target: {type: log}\n")
    common = ["--project", PROJECT, "--region", REGION, "--routes-file", str(routes)]
    deploy("setup.sh", *common, "--firestore-database", "runs-a")
    deploy("setup.sh", *common, "--firestore-database", "runs-b")
    policy = fake.state.policies[f"v1/projects/{PROJECT}"]
    assert [(b["role"], b["condition"]["expression"]) for b in policy["bindings"]] == [
        ("roles/datastore.user", f'resource.name == "projects/{PROJECT}/databases/runs-b"')
    ]
    fake.requests.clear()
    deploy("setup.sh", *common, "--firestore-database", "runs-b")
    assert fake.mutations() == []


def test_setup_with_spanner_grants_database_user_on_that_database_only_and_no_firestore(
    deploy, fake: FakeGoogle, tmp_path: Path
) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text("routes:\n  demo:\n    target: {type: log}\n")
    args = [
        "--project",
        PROJECT,
        "--region",
        REGION,
        "--routes-file",
        str(routes),
        "--store",
        "spanner://projects/store-proj/instances/claims/databases/runs?table=my_runs",
    ]
    result = deploy("setup.sh", *args)
    assert not [r for r in fake.requests if r.api == "firestore"]
    grants = {
        r.path.split(":")[0]: policy_bindings(r) for r in fake.mutations() if r.method_id.endswith("setIamPolicy")
    }
    assert grants == {
        "v1/projects/store-proj/instances/claims/databases/runs": [
            ("roles/spanner.databaseUser", (f"serviceAccount:{RUNTIME}",), None)
        ]
    }
    assert "runonce store init" in result.stderr
    fake.requests.clear()
    deploy("setup.sh", *args)
    assert fake.mutations() == [], "a second run must change nothing"


# --- deploy-service.sh -----------------------------------------------------------------------------


def _env(service: dict) -> dict[str, str]:
    (container,) = service["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_deploy_service_is_private_runs_as_runtime_account_with_routes_as_config(
    deploy, fake: FakeGoogle, routes_file: Path
) -> None:
    args = ["--project", PROJECT, "--region", REGION, "--image", IMAGE, "--routes-file", str(routes_file)]
    result = deploy("deploy-service.sh", *args)
    assert result.stdout.strip() == URL

    (create,) = fake.find("run.namespaces.services.create")
    assert create.host == f"{REGION}-run.fake.invalid"
    service = create.body
    assert service["metadata"]["name"] == "runonce"
    assert service["metadata"]["annotations"]["run.googleapis.com/ingress"] == "internal"
    spec = service["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == RUNTIME
    assert spec["containerConcurrency"] == 80
    assert spec["timeoutSeconds"] == 120
    (container,) = spec["containers"]
    assert container["image"] == f"{IMAGE_NAME}@{DIGEST_1}"  # the tag resolved: deployed by digest
    assert container["ports"][0]["containerPort"] == 8080
    annotations = service["spec"]["template"]["metadata"]["annotations"]
    assert annotations["autoscaling.knative.dev/maxScale"] == "10"
    assert annotations["run.googleapis.com/startup-cpu-boost"].lower() == "true"

    env = _env(service)
    assert {k: v for k, v in env.items() if k != "RUNONCE_ROUTES"} == {
        "RUNONCE_STORE": "firestore",
        "RUNONCE_FIRESTORE_PROJECT": PROJECT,
        "RUNONCE_FIRESTORE_DATABASE": "(default)",
        "RUNONCE_FIRESTORE_COLLECTION": "runonce_runs",
        "RUNONCE_AUTH": "oidc",
        "RUNONCE_AUDIENCE": URL,
        "RUNONCE_ALLOWED_CALLERS": INVOKER,
        "RUNONCE_LEASE_SECONDS": "300",
        "RUNONCE_DISPATCH_TIMEOUT_SECONDS": "30",
        "RUNONCE_RETENTION_SECONDS": "86400",
    }
    # The routes reach the service unchanged, and runonce's own parser accepts them (every
    # target type).
    assert yaml.safe_load(env["RUNONCE_ROUTES"]) == yaml.safe_load(ROUTES_YAML)
    assert set(parse_routes(env["RUNONCE_ROUTES"], "RUNONCE_ROUTES")) == {
        "etl",
        "batch",
        "build",
        "hook",
        "demo",
        "rollup",
    }

    # No public access: the only IAM write grants run.invoker to the invoker account.
    writes = [r for r in fake.mutations() if r.method_id.endswith("setIamPolicy")]
    assert [(r.path, policy_bindings(r)) for r in writes] == [
        (
            f"v1/projects/{PROJECT}/locations/{REGION}/services/runonce:setIamPolicy",
            [("roles/run.invoker", (f"serviceAccount:{INVOKER}",), None)],
        ),
    ]
    assert "allUsers" not in json.dumps([r.body for r in fake.requests])

    fake.requests.clear()
    deploy("deploy-service.sh", *args)
    assert fake.mutations() == [], "an unchanged configuration must not be deployed again"

    # The same tag pushed again: a new digest, so a new revision (a tag fingerprint would say "up to date").
    fake.push_image(IMAGE_NAME, "0.1.0", DIGEST_2)
    deploy("deploy-service.sh", *args)
    (replace,) = fake.find("run.namespaces.services.replaceService")
    assert replace.body["spec"]["template"]["spec"]["containers"][0]["image"] == f"{IMAGE_NAME}@{DIGEST_2}"
    # On an existing service, --no-allow-unauthenticated makes gcloud rewrite the policy without
    # allUsers: every deploy re-asserts that the service is private, and the invoker keeps its grant.
    updates = fake.mutations()
    assert next(r.method_id for r in updates) == "run.namespaces.services.replaceService"
    for write in updates[1:]:
        assert write.method_id == "run.projects.locations.services.setIamPolicy"
        assert policy_bindings(write) == [("roles/run.invoker", (f"serviceAccount:{INVOKER}",), None)]


# --- scheduler-job.sh ------------------------------------------------------------------------------

JOB_ARGS = [
    "--project",
    PROJECT,
    "--location",
    REGION,
    "--job",
    "nightly-etl",
    "--route",
    "etl",
    "--schedule",
    "0 3 * * *",
    "--time-zone",
    "Europe/Paris",
    "--body",
    '{"mode": "full"}',
]


def test_scheduler_job_calls_the_route_with_oidc_and_lease_consistent_retries(deploy, fake: FakeGoogle) -> None:
    deploy("scheduler-job.sh", *JOB_ARGS)
    (create,) = fake.find("cloudscheduler.projects.locations.jobs.create")
    assert create.path == f"v1/projects/{PROJECT}/locations/{REGION}/jobs"
    job = create.body
    assert job["name"] == f"projects/{PROJECT}/locations/{REGION}/jobs/nightly-etl"
    assert job["schedule"] == "0 3 * * *"
    assert job["timeZone"] == "Europe/Paris"
    assert job["attemptDeadline"] == "60s"
    assert job["retryConfig"] == {
        "retryCount": 5,
        "minBackoffDuration": "20s",
        "maxBackoffDuration": "300s",
        "maxDoublings": 4,
        "maxRetryDuration": "0s",
    }
    target = job["httpTarget"]
    assert target["uri"] == f"{URL}/v1/routes/etl:run?project={PROJECT}&location={REGION}"
    assert target["httpMethod"] == "POST"
    assert target["oidcToken"] == {"serviceAccountEmail": INVOKER, "audience": URL}
    assert json.loads(base64.b64decode(target["body"])) == {"mode": "full"}
    assert target["headers"] == {"Content-Type": "application/json"}

    fake.requests.clear()
    deploy("scheduler-job.sh", *JOB_ARGS)
    assert fake.mutations() == [], "an unchanged job must not be rewritten"


def test_scheduler_job_update_changes_only_what_differs(deploy, fake: FakeGoogle) -> None:
    deploy("scheduler-job.sh", *JOB_ARGS)
    changed = [("0 4 * * *" if a == "0 3 * * *" else a) for a in JOB_ARGS]
    deploy("scheduler-job.sh", *changed)
    (patch,) = fake.find("cloudscheduler.projects.locations.jobs.patch")
    assert "schedule" in patch.query["updateMask"][0].split(",")
    stored = fake.state.jobs[f"projects/{PROJECT}/locations/{REGION}/jobs/nightly-etl"]
    assert stored["schedule"] == "0 4 * * *"
    assert stored["httpTarget"]["oidcToken"] == {"serviceAccountEmail": INVOKER, "audience": URL}
    assert stored["retryConfig"]["retryCount"] == 5

    fake.requests.clear()
    deploy("scheduler-job.sh", *changed)
    assert fake.mutations() == []


def test_the_three_scripts_from_zero_to_a_scheduler_job(deploy, fake: FakeGoogle, routes_file: Path) -> None:
    common = ["--project", PROJECT, "--region", REGION]
    deploy("setup.sh", *common, "--routes-file", str(routes_file))
    url = deploy("deploy-service.sh", *common, "--image", IMAGE, "--routes-file", str(routes_file)).stdout.strip()
    deploy(
        "scheduler-job.sh",
        "--project",
        PROJECT,
        "--location",
        REGION,
        "--job",
        "demo-every-5-min",
        "--route",
        "demo",
        "--schedule",
        "*/5 * * * *",
        "--service-url",
        url,
    )
    job = fake.state.jobs[f"projects/{PROJECT}/locations/{REGION}/jobs/demo-every-5-min"]
    assert job["httpTarget"]["uri"].startswith(fake.state.services["runonce"]["status"]["url"] + "/v1/routes/demo:run")
    service_policy = fake.state.policies[f"v1/projects/{PROJECT}/locations/{REGION}/services/runonce"]
    assert service_policy["bindings"] == [{"role": "roles/run.invoker", "members": [f"serviceAccount:{INVOKER}"]}]


def test_deploy_with_cloud_run_iam_grants_only_the_self_check_before_deploying(
    deploy, fake: FakeGoogle, routes_file: Path
) -> None:
    deploy(
        "deploy-service.sh",
        "--project",
        PROJECT,
        "--region",
        REGION,
        "--image",
        IMAGE,
        "--routes-file",
        str(routes_file),
        "--auth",
        "cloud_run_iam",
    )
    role = f"projects/{PROJECT}/roles/runonceServiceSelfCheck"
    assert sorted(fake.state.roles[role]["includedPermissions"]) == ["run.services.get", "run.services.getIamPolicy"]
    order = [r.method_id for r in fake.mutations()]
    assert order.index("cloudresourcemanager.projects.setIamPolicy") < order.index("run.namespaces.services.create")
    (grant,) = fake.find("cloudresourcemanager.projects.setIamPolicy")
    assert policy_bindings(grant) == [
        (
            role,
            (f"serviceAccount:{RUNTIME}",),
            f'resource.name == "projects/{PROJECT}/locations/{REGION}/services/runonce"',
        )
    ]
    (create,) = fake.find("run.namespaces.services.create")
    assert _env(create.body)["RUNONCE_AUTH"] == "cloud_run_iam"


# --- smoke.sh: real gcloud, the fake Scheduler delivering to a real `runonce serve` ---------------


@pytest.fixture
def runonce_service(fake: FakeGoogle, tmp_path: Path):
    """`runonce serve` as deployed: OIDC against the fake's signing key, the URL as audience, a log route."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def start(audience: str = url):
        certs = oidc.CertsServer([fake.key]).start()
        env = {
            "RUNONCE_STORE": f"sqlite:///{tmp_path / 'runs.db'}",
            "RUNONCE_ROUTES": "routes: {demo: {target: {type: log}}}",
            "RUNONCE_AUTH": "oidc",
            "RUNONCE_AUDIENCE": audience,
            "RUNONCE_OIDC_CERTS_URL": certs.url,
            "RUNONCE_ALLOWED_CALLERS": INVOKER,
            "RUNONCE_ADMIN_CALLERS": AUDITOR,  # smoke.sh reads runs as the auditor
        }
        servers.append((start_server(env, tmp_path, port=port), certs))
        return url

    servers: list = []
    yield start
    for server, certs in servers:
        server.stop()
        certs.stop()


def smoke(deploy, fake: FakeGoogle, url: str, expect: int):
    extra = smoke_env(fake.port)
    return deploy(
        "smoke.sh",
        "--project",
        PROJECT,
        "--region",
        REGION,
        "--service-url",
        url,
        "--wait-seconds",
        "10",
        extra_env=extra,
        expect=expect,
    )


def test_smoke_proves_token_one_run_and_a_duplicate_then_deletes_its_job(
    deploy, fake: FakeGoogle, runonce_service
) -> None:
    url = runonce_service()
    result = smoke(deploy, fake, url, expect=0)
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "ok    token accepted",
        "ok    one run recorded",
        "ok    second delivery a duplicate",
    ], result.stdout
    (create,) = fake.find("cloudscheduler.projects.locations.jobs.create")
    assert create.body["httpTarget"]["uri"] == f"{url}/v1/routes/demo:run?project={PROJECT}&location={REGION}"
    assert create.body["httpTarget"]["oidcToken"] == {"serviceAccountEmail": INVOKER, "audience": url}
    assert len(fake.find("cloudscheduler.projects.locations.jobs.run")) == 2
    assert fake.state.jobs == {}, "the throwaway job is deleted"
    minted = fake.find("iamcredentials.projects.serviceAccounts.generateIdToken")
    assert minted and all(m.path.endswith(f"/serviceAccounts/{AUDITOR}:generateIdToken") for m in minted)


def test_smoke_without_the_token_creator_grant_says_which_grant_is_missing(
    deploy, fake: FakeGoogle, runonce_service
) -> None:
    url = runonce_service()
    fake.caller = "user:you@example.com"  # a caller with no grant on the auditor account
    result = smoke(deploy, fake, url, expect=2)
    assert "roles/iam.serviceAccountOpenIdTokenCreator" in result.stderr and "--token-creators" in result.stderr
    assert fake.state.jobs == {}, "the throwaway job is deleted"


def test_smoke_says_what_to_do_when_the_token_is_refused(deploy, fake: FakeGoogle, runonce_service) -> None:
    url = runonce_service(audience="https://runonce-elsewhere.a.run.app")  # tokens for another audience: 401
    result = smoke(deploy, fake, url, expect=1)
    assert result.stdout.splitlines()[0].startswith("FAIL  token refused (401)")
    assert "--auth cloud_run_iam" in result.stdout
    assert fake.state.jobs == {}


def test_setup_brings_a_custom_role_with_other_permissions_back_to_exactly_its_own(
    deploy, fake: FakeGoogle, tmp_path: Path
) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text(
        "routes:\n  build:\n    target: "
        "{type: cloud_build_trigger, trigger: projects/cb-proj/locations/global/triggers/t}\n"
    )
    name = "projects/cb-proj/roles/runonceBuildRunner"
    fake.state.roles[name] = {
        "name": name,
        "title": "old",
        "etag": "BwX=",
        "includedPermissions": ["cloudbuild.builds.create", "cloudbuild.builds.update"],
    }
    deploy("setup.sh", "--project", PROJECT, "--region", REGION, "--routes-file", str(routes))
    (_patch,) = fake.find("iam.projects.roles.patch")
    assert sorted(fake.state.roles[name]["includedPermissions"]) == [
        "cloudbuild.builds.create",
        "cloudbuild.builds.get",
        "cloudbuild.builds.list",
    ]


def test_the_scripts_lease_rule_uses_the_services_own_numbers() -> None:
    """deploy/lib/common.sh repeats runonce/settings.py's lease rule: its store timeout is the setting's
    default and its margin the service's, so a deploy passes exactly when the service would start."""
    from runonce.settings import LEASE_MARGIN_SECONDS, Settings

    text = (REPO / "deploy" / "lib" / "common.sh").read_text()
    store_timeout = float(re.search(r"^RUNONCE_STORE_TIMEOUT_DEFAULT=(\S+)", text, re.M).group(1))
    margin = float(re.search(r"^RUNONCE_LEASE_MARGIN=(\S+)", text, re.M).group(1))
    assert store_timeout == Settings.model_fields["store_timeout_seconds"].default
    assert margin == LEASE_MARGIN_SECONDS


def test_deploy_service_passes_a_redis_store_through_with_direct_vpc_egress(
    deploy, fake: FakeGoogle, routes_file: Path
) -> None:
    store = "rediss://10.0.0.3:6378/0?ca_file=/etc/runonce/redis-ca/ca.pem"
    deploy(
        "deploy-service.sh",
        "--project",
        PROJECT,
        "--region",
        REGION,
        "--image",
        IMAGE,
        "--routes-file",
        str(routes_file),
        "--store",
        store,
        "--network",
        "default",
        "--subnet",
        "runonce",
    )
    (create,) = fake.find("run.namespaces.services.create")
    env = _env(create.body)
    assert env["RUNONCE_STORE"] == store
    assert not [name for name in env if name.startswith("RUNONCE_FIRESTORE_")]
    annotations = create.body["spec"]["template"]["metadata"]["annotations"]
    assert json.loads(annotations["run.googleapis.com/network-interfaces"]) == [
        {"network": "default", "subnetwork": "runonce"}
    ]
    assert annotations["run.googleapis.com/vpc-access-egress"] == "private-ranges-only"


def test_deploy_service_passes_a_spanner_store_through_without_vpc_egress(
    deploy, fake: FakeGoogle, routes_file: Path
) -> None:
    store = f"spanner://projects/{PROJECT}/instances/claims/databases/runs"
    deploy(
        "deploy-service.sh",
        "--project",
        PROJECT,
        "--region",
        REGION,
        "--image",
        IMAGE,
        "--routes-file",
        str(routes_file),
        "--store",
        store,
    )
    (create,) = fake.find("run.namespaces.services.create")
    assert _env(create.body)["RUNONCE_STORE"] == store
    assert "run.googleapis.com/network-interfaces" not in create.body["spec"]["template"]["metadata"]["annotations"]


# --- audit-job.sh (terraform/audit.tf's audit job, metric and alert) --------------------------------

AUDITOR = f"runonce-auditor@{PROJECT}.iam.gserviceaccount.com"
AUDIT_ARGS = ["--project", PROJECT, "--region", REGION]


def _terraform_missed_runs_filter(service: str) -> str:
    """The log filter of terraform/audit.tf (the heredoc `missed_runs_log_filter`), for SERVICE."""
    text = (REPO / "terraform" / "audit.tf").read_text()
    body = re.search(r"missed_runs_log_filter = <<-EOT\n(.*?)\n\s*EOT", text, re.S).group(1)
    return "".join(line.strip() + "\n" for line in body.splitlines()).replace("${var.service_name}", service)


def test_audit_job_creates_the_auditor_its_job_the_metric_and_the_alert_as_terraform_does_then_changes_nothing(
    deploy, fake: FakeGoogle, routes_file: Path
) -> None:
    deploy(
        "deploy-service.sh",
        *AUDIT_ARGS,
        "--image",
        IMAGE,
        "--routes-file",
        str(routes_file),
        "--admin-callers",
        AUDITOR,
    )
    env = _env(fake.state.services["runonce"])
    assert env["RUNONCE_ADMIN_CALLERS"] == AUDITOR
    fake.requests.clear()
    result = deploy(
        "audit-job.sh", *AUDIT_ARGS, "--notification-channels", f"projects/{PROJECT}/notificationChannels/42"
    )
    assert f"--admin-callers {AUDITOR}" in result.stderr

    (account,) = fake.find("iam.projects.serviceAccounts.create")
    assert account.body["accountId"] == "runonce-auditor"
    (grant,) = fake.find("run.projects.locations.services.setIamPolicy")
    assert policy_bindings(grant) == [
        ("roles/run.invoker", (f"serviceAccount:{INVOKER}", f"serviceAccount:{AUDITOR}"), None)
    ]

    (create,) = fake.find("cloudscheduler.projects.locations.jobs.create")
    job = create.body
    assert job["name"] == f"projects/{PROJECT}/locations/{REGION}/jobs/runonce-audit"
    assert (job["schedule"], job["timeZone"], job["attemptDeadline"]) == ("*/10 * * * *", "Etc/UTC", "120s")
    target = job["httpTarget"]
    assert target["uri"] == f"{URL}/v1/audit:run?project={PROJECT}&location={REGION}"
    assert (target["httpMethod"], target["headers"]) == ("POST", {"Content-Type": "application/json"})
    assert target["oidcToken"] == {"serviceAccountEmail": AUDITOR, "audience": URL}
    assert json.loads(base64.b64decode(target["body"])) == {"since": "10m"}
    assert job["retryConfig"] == {
        "retryCount": 5,
        "minBackoffDuration": "20s",
        "maxBackoffDuration": "300s",
        "maxDoublings": 4,
        "maxRetryDuration": "0s",
    }

    (metric,) = fake.find("logging.projects.metrics.create")
    assert metric.path == f"v2/projects/{PROJECT}/metrics"
    assert metric.body["name"] == "runonce/missed_runs"
    assert metric.body["filter"].strip() == _terraform_missed_runs_filter("runonce").strip()
    assert metric.body["labelExtractors"] == {"route": "EXTRACT(jsonPayload.route)"}
    descriptor = metric.body["metricDescriptor"]
    assert (descriptor["metricKind"], descriptor["valueType"]) == ("DELTA", "INT64")
    assert [label["key"] for label in descriptor["labels"]] == ["route"]

    (policy,) = fake.find("monitoring.projects.alertPolicies.create")
    assert policy.body["displayName"] == "runonce: a scheduled run was missed"
    assert policy.body["notificationChannels"] == [f"projects/{PROJECT}/notificationChannels/42"]
    (condition,) = policy.body["conditions"]
    threshold = condition["conditionThreshold"]
    assert 'metric.type = "logging.googleapis.com/user/runonce/missed_runs"' in threshold["filter"]
    assert (threshold["comparison"], threshold.get("thresholdValue", 0)) == ("COMPARISON_GT", 0)
    assert threshold["aggregations"][0]["groupByFields"] == ["metric.label.route"]

    assert [r.method_id.rsplit(".", 1)[-1] for r in fake.mutations()] == [
        "create",
        "setIamPolicy",
        "create",
        "create",
        "create",
    ]
    fake.requests.clear()
    deploy("audit-job.sh", *AUDIT_ARGS, "--notification-channels", f"projects/{PROJECT}/notificationChannels/42")
    assert fake.mutations() == [], "a second run must change nothing"


def test_audit_job_lets_the_token_creators_mint_the_auditors_tokens_once(deploy, fake: FakeGoogle) -> None:
    members = "user:you@example.com,group:ops@example.com"
    deploy("audit-job.sh", *AUDIT_ARGS, "--token-creators", members)
    policy = fake.state.policies[f"v1/projects/-/serviceAccounts/{AUDITOR}"]
    assert sorted(m for b in policy["bindings"] for m in b["members"]) == [
        "group:ops@example.com",
        "user:you@example.com",
    ]
    assert {b["role"] for b in policy["bindings"]} == {"roles/iam.serviceAccountOpenIdTokenCreator"}
    fake.requests.clear()
    deploy("audit-job.sh", *AUDIT_ARGS, "--token-creators", members)
    assert fake.mutations() == [], "a second run must change nothing"


def test_audit_job_refuses_a_token_creator_that_is_not_an_iam_member(deploy, fake: FakeGoogle) -> None:
    result = deploy("audit-job.sh", *AUDIT_ARGS, "--token-creators", "you@example.com", expect=2)
    assert "--token-creators must be comma-separated IAM members" in result.stderr
    assert fake.mutations() == []


def test_audit_job_brings_a_changed_metric_and_policy_back_without_a_second_policy(deploy, fake: FakeGoogle) -> None:
    deploy("audit-job.sh", *AUDIT_ARGS)
    (metric_name,) = fake.state.log_metrics
    fake.state.log_metrics[metric_name]["filter"] = "severity=ERROR"
    (policy_name,) = fake.state.alert_policies
    fake.state.alert_policies[policy_name]["combiner"] = "AND"
    fake.requests.clear()
    deploy("audit-job.sh", *AUDIT_ARGS, "--notification-channels", f"projects/{PROJECT}/notificationChannels/7")
    assert sorted(r.method_id for r in fake.mutations()) == [
        "logging.projects.metrics.update",
        "monitoring.projects.alertPolicies.patch",
    ]
    assert fake.state.log_metrics[metric_name]["filter"].strip() == _terraform_missed_runs_filter("runonce").strip()
    (policy,) = fake.state.alert_policies.values()
    assert (policy["name"], policy["combiner"]) == (policy_name, "OR")
    assert policy["notificationChannels"] == [f"projects/{PROJECT}/notificationChannels/7"]


def test_the_scripts_missed_runs_filter_matches_the_line_the_audit_logs(deploy, fake: FakeGoogle, caplog) -> None:
    """Each runonce-side term of the metric's filter holds for the JSON line the real formatter
    writes for a missed run (resource.* terms are Cloud Run's), and the route label's field exists."""
    from audit_lines import missed_run_lines, unmet_terms

    deploy("audit-job.sh", *AUDIT_ARGS)
    (metric,) = fake.state.log_metrics.values()
    (entry, *_) = missed_run_lines(caplog)
    terms = [line for line in metric["filter"].splitlines() if line]
    assert {term.split("=")[0] for term in terms} >= {"severity", "jsonPayload.outcome"}
    assert unmet_terms(terms, entry) == []
    assert metric["labelExtractors"]["route"] == "EXTRACT(jsonPayload.route)" and entry["route"] == "etl"


def test_audit_job_refuses_to_choose_between_two_policies_of_its_name(deploy, fake: FakeGoogle) -> None:
    deploy("audit-job.sh", *AUDIT_ARGS)
    ((name, policy),) = fake.state.alert_policies.items()
    fake.state.alert_policies[name + "0"] = {**policy, "name": name + "0", "combiner": "AND"}
    fake.requests.clear()
    result = deploy("audit-job.sh", *AUDIT_ARGS, expect=1)
    assert "2 alert policies are named 'runonce: a scheduled run was missed': delete all but one" in result.stderr
    assert [r for r in fake.mutations() if r.api == "monitoring"] == []
