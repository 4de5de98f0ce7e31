"""terraform/: formatted, parseable, every name known to the Google provider 6.50 schema, the rules
between variables hold (evaluated offline by terraform itself), and checkov's policies pass."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from datetime import UTC
from pathlib import Path

import pytest
from deploy_tools import REPO, provider_lib, provider_version, run, tool
from hcl_tree import META_ARGUMENTS, blocks, is_block, items, string, unquote
from provider_schema import Block, provider_schema, schema

from runonce.scheduler_retry import RetryConfig, retry_window
from runonce.targets import TARGET_TYPES
from tests.support.target_grants import custom_roles, registry_grants

pytestmark = pytest.mark.deploy

TERRAFORM = REPO / "terraform"
MODULE_FILES = sorted(str(p.relative_to(REPO)) for p in TERRAFORM.glob("*.tf"))
CHECKS_DIR = Path(__file__).parent / "checkov_checks"
TF_ENV = {**os.environ, "TF_CLI_CONFIG_FILE": "/dev/null", "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1"}


def module_trees(hcl_trees: dict[str, dict]) -> list[dict]:
    return [hcl_trees[path] for path in MODULE_FILES]


def test_terraform_files_are_formatted() -> None:
    run([tool("terraform"), "fmt", "-check", "-recursive", "-diff", str(TERRAFORM)], env=TF_ENV)


def test_every_tf_file_parses_with_python_hcl2(hcl_trees: dict[str, dict]) -> None:
    on_disk = sorted(str(p.relative_to(REPO)) for p in TERRAFORM.rglob("*.tf"))
    assert sorted(hcl_trees) == on_disk
    assert "terraform/examples/basic/main.tf" in on_disk


# --- names against the provider schema -------------------------------------------------------


def _check_body(body: dict, spec: Block, where: str, errors: list[str], *, top: bool) -> None:
    for key, value in items(body):
        if top and key in META_ARGUMENTS:
            continue
        if key == "dynamic":
            for entry in value:
                for label, dynamic in items(entry):
                    name = unquote(label)
                    if name not in spec.blocks:
                        errors.append(f"{where}: unknown dynamic block {name!r}")
                        continue
                    for content in dynamic.get("content", []):
                        _check_body(content, spec.blocks[name], f"{where}.{name}", errors, top=False)
            continue
        if is_block(value):
            if key not in spec.blocks:
                hint = " (an attribute, not a block)" if key in spec.attributes else ""
                errors.append(f"{where}: unknown block {key!r}{hint}")
                continue
            for nested in value:
                _check_body(nested, spec.blocks[key], f"{where}.{key}", errors, top=False)
        elif key not in spec.attributes:
            hint = " (a block, not an attribute)" if key in spec.blocks else ""
            errors.append(f"{where}: unknown attribute {key!r}{hint}")


_BUILTIN_RESOURCES = {"terraform_data": Block(attributes={"input", "triggers_replace"})}


@pytest.mark.parametrize("provider", ["lowest", "newest"])
def test_resource_and_data_names_exist_in_google_provider_schema(hcl_trees: dict[str, dict], provider: str) -> None:
    """Every argument and block the module writes exists in the newest provider checked and in the
    lowest one versions.tf allows (on an older provider, `plan` fails with "Unsupported argument")."""
    lib = provider_lib(provider)
    errors: list[str] = []
    checked = 0
    for path, tree in hcl_trees.items():
        for kind in ("resource", "data"):
            for type_name, name, body in blocks(tree, kind):
                where = f"{path}: {kind} {type_name}.{name}"
                if type_name in _BUILTIN_RESOURCES and kind == "resource":
                    spec = _BUILTIN_RESOURCES[type_name]
                else:
                    try:
                        spec = schema(lib, kind, type_name)
                    except KeyError as exc:
                        errors.append(f"{where}: {exc}")
                        continue
                _check_body(body, spec, where, errors, top=True)
                checked += 1
        for _, _, body in blocks(tree, "provider"):
            _check_body(body, provider_schema(lib), f"{path}: provider", errors, top=True)
    assert errors == []
    assert checked >= 15


def _getters(lib: Path, kind: str, type_name: str) -> set[str]:
    """Read-only attributes (`get uri(): string`) of the resource class, in snake_case."""
    directory = ("data-" + type_name if kind == "data" else type_name.removeprefix("google_")).replace("_", "-")
    source = (lib / directory / "index.d.ts").read_text(encoding="utf-8")
    base = "TerraformDataSource" if kind == "data" else "TerraformResource"
    start = source.index(f"extends cdktf.{base} {{")
    end = source.find("export declare class", start)
    names = re.findall(r"\n\s+get (\w+)\(\)", source[start : end if end != -1 else None])
    return {re.sub(r"([A-Z])", r"_\1", n).lower() for n in names}


@pytest.mark.parametrize("provider", ["lowest", "newest"])
def test_references_name_declared_things(hcl_trees: dict[str, dict], provider: str) -> None:
    """What `terraform validate` would catch without a provider: undeclared var/local/resource
    references, and attributes the provider does not export."""
    lib = provider_lib(provider)
    trees = module_trees(hcl_trees)
    declared_vars = {name for t in trees for name, _, _ in blocks(t, "variable")}
    declared_locals = {key for t in trees for entry in t.get("locals", []) for key, _ in items(entry)}
    declared = {
        (kind, f"{type_name}.{name}")
        for t in trees
        for kind in ("resource", "data")
        for type_name, name, _ in blocks(t, kind)
    }
    text = json.dumps(trees)
    errors = []
    for var in set(re.findall(r"\bvar\.(\w+)", text)) - declared_vars:
        errors.append(f"var.{var} is not declared")
    for local in set(re.findall(r"\blocal\.(\w+)", text)) - declared_locals:
        errors.append(f"local.{local} is not defined")
    for prefix, type_name, name, attr in set(re.findall(r"(data\.)?\b(google_\w+)\.(\w+)\.(\w+)", text)):
        kind = "data" if prefix else "resource"
        if (kind, f"{type_name}.{name}") not in declared:
            errors.append(f"{prefix}{type_name}.{name} is not declared")
            continue
        spec = schema(lib, kind, type_name)
        if attr not in spec.attributes | set(spec.blocks) | _getters(lib, kind, type_name):
            errors.append(f"{prefix}{type_name}.{name}.{attr}: no such attribute in the provider")
    assert errors == []


def test_example_passes_only_and_all_required_module_variables(hcl_trees: dict[str, dict]) -> None:
    variables = {name: body for t in module_trees(hcl_trees) for name, _, body in blocks(t, "variable")}
    required = {name for name, body in variables.items() if "default" not in body}
    example = hcl_trees["terraform/examples/basic/main.tf"]
    ((_name, _, call),) = blocks(example, "module")
    assert string(call["source"]) == "../.."
    arguments = {key for key, _ in items(call)} - {"source"}
    assert arguments - set(variables) == set(), "the example passes arguments the module does not declare"
    assert required - arguments == set(), "the example leaves required variables unset"


def test_every_variable_and_output_is_typed_and_described(hcl_trees: dict[str, dict]) -> None:
    for path, tree in hcl_trees.items():
        for name, _, body in blocks(tree, "variable"):
            assert "type" in body and string(body.get("description", "")), f"{path}: variable {name}"
        for name, _, body in blocks(tree, "output"):
            assert string(body.get("description", "")), f"{path}: output {name}"


# --- what the module must contain -----------------------------------------------------------


def _resources(hcl_trees: dict[str, dict]) -> dict[str, dict]:
    return {f"{t}.{n}": body for tree in module_trees(hcl_trees) for t, n, body in blocks(tree, "resource")}


def test_module_declares_issue_resources_and_provider_range(hcl_trees: dict[str, dict]) -> None:
    resources = _resources(hcl_trees)
    for address in (
        "google_service_account.runtime",
        "google_service_account.invoker",
        "google_firestore_database.this",
        "google_firestore_field.expire_at_ttl",
        "google_cloud_run_v2_service.this",
        "google_cloud_run_v2_service_iam_member.invoker",
        "google_cloud_scheduler_job.this",
        "google_project_iam_member.runtime_datastore",
    ):
        assert address in resources, address
    for path in ("terraform/versions.tf", "terraform/examples/basic/versions.tf"):
        versions = hcl_trees[path]["terraform"][0]["required_providers"][0]["google"]
        assert string(versions["version"]) == ">= 6.8, < 8", path
        assert string(versions["source"]) == "hashicorp/google"


def test_the_lowest_schema_checked_is_the_lowest_version_allowed(hcl_trees: dict[str, dict]) -> None:
    """.ci/deploy-checks installs the @cdktf/provider-google package generated from the provider
    versions.tf's lower bound, so the schema tests above cover the oldest provider a user can get."""
    versions = hcl_trees["terraform/versions.tf"]["terraform"][0]["required_providers"][0]["google"]
    lower = re.match(r">= ([0-9.]+),", string(versions["version"])).group(1)
    assert provider_version(provider_lib("lowest")) == lower + ".0"
    newest, lowest = (tuple(map(int, provider_version(provider_lib(w)).split("."))) for w in ("newest", "lowest"))
    assert newest >= lowest


def test_firestore_database_outlives_destroy_without_blocking_it_and_ttl_is_on_expire_at(
    hcl_trees: dict[str, dict],
) -> None:
    """`terraform destroy` (as examples/basic invites) must plan: no prevent_destroy. The records stay:
    the database is abandoned, not deleted, and Firestore's delete protection is on."""
    resources = _resources(hcl_trees)
    database = resources["google_firestore_database.this"]
    assert "lifecycle" not in database
    assert string(database["deletion_policy"]) == "ABANDON"
    assert string(database["delete_protection_state"]) == "DELETE_PROTECTION_ENABLED"
    field = resources["google_firestore_field.expire_at_ttl"]
    assert string(field["field"]) == "expire_at"
    assert is_block(field["ttl_config"])


def _without_comments(tree):
    if isinstance(tree, dict):
        return {k: _without_comments(v) for k, v in tree.items() if "comments" not in k}
    if isinstance(tree, list):
        return [_without_comments(v) for v in tree]
    return tree


def test_only_the_invoker_account_may_call_the_service(hcl_trees: dict[str, dict]) -> None:
    resources = _resources(hcl_trees)
    invoker = resources["google_cloud_run_v2_service_iam_member.invoker"]
    assert string(invoker["role"]) == "roles/run.invoker"
    assert invoker["member"] == "${google_service_account.invoker.member}"
    service = resources["google_cloud_run_v2_service.this"]
    assert service["invoker_iam_disabled"] is False
    variables = {name: body for t in module_trees(hcl_trees) for name, _, body in blocks(t, "variable")}
    assert string(variables["ingress"]["default"]) == "INGRESS_TRAFFIC_INTERNAL_ONLY"
    everything = json.dumps(_without_comments(module_trees(hcl_trees)))
    assert "allUsers" not in everything and "allAuthenticatedUsers" not in everything


def test_custom_roles_hold_only_what_runonce_calls(hcl_trees: dict[str, dict]) -> None:
    """Cloud Build: triggers.run needs builds.create (builds.editor would also edit and cancel any
    build); Cloud Run jobs: executions get/list (run.viewer reads far more); cloud_run_iam: its own
    service and policy. The same permissions as the target registry's (runonce/targets), which
    deploy/lib/routes_iam.py is held to as well (tests/targets/test_registry.py)."""
    resources = _resources(hcl_trees)
    roles = {
        string(body["role_id"]): [string(p) for p in body["permissions"]]
        for address, body in resources.items()
        if address.startswith("google_project_iam_custom_role.")
    }
    assert roles == {
        **{role: list(permissions) for role, permissions in custom_roles().items()},
        "runonceServiceSelfCheck": ["run.services.get", "run.services.getIamPolicy"],
    }
    build = resources["google_project_iam_member.runtime_cloudbuild"]
    assert (
        "google_project_iam_custom_role.build_runner" in build["role"]
        and "roles/cloudbuild.builds.editor" in build["role"]
    )


def test_terraform_takes_every_registered_target_type_and_grants_its_roles() -> None:
    """HCL cannot import the target registry (runonce/targets): the routes variable's type list, its
    resource-name rule per type, and the predefined roles granted must agree with it."""
    variables = (TERRAFORM / "variables.tf").read_text()
    listed = re.search(r"contains\(\[([^\]]*)\], try\(route\.target\.type", variables)
    assert listed is not None
    assert sorted(json.loads(f"[{listed.group(1)}]")) == sorted(TARGET_TYPES)
    assert f"one of: {', '.join(TARGET_TYPES)}." in variables
    grants_text = "\n".join((TERRAFORM / name).read_text() for name in ("iam.tf", "rules.tf"))
    for name, entry in TARGET_TYPES.items():
        if entry.resource_field is not None:
            assert re.search(
                rf'"{name}" \? can\(regex\("[^"]+", route\.target\.{entry.resource_field}\)\)', variables
            ), name
        for grant in entry.grants:
            if not grant.permissions:
                assert f'"{grant.role}"' in grants_text, f"{name}: terraform grants no {grant.role}"


def test_scheduler_jobs_carry_oidc_token_retry_config_and_namespace(hcl_trees: dict[str, dict]) -> None:
    job = _resources(hcl_trees)["google_cloud_scheduler_job.this"]
    target = job["http_target"][0]
    assert string(target["http_method"]) == "POST"
    oidc = target["oidc_token"][0]
    assert oidc["service_account_email"] == "${google_service_account.invoker.email}"
    # Each region's job calls its region's service; the URL's namespace (regions.tf's path) is
    # tests/deploy/test_two_regions_terraform.py's.
    assert oidc["audience"] == "${local.service_urls[each.value.service_region]}"
    assert string(target["uri"]) == "${local.service_urls[each.value.service_region]}${each.value.path}"
    retry = job["retry_config"][0]
    assert {k for k, _ in items(retry)} == {
        "retry_count",
        "min_backoff_duration",
        "max_backoff_duration",
        "max_doublings",
        "max_retry_duration",
    }


# --- variables and rules, evaluated by terraform offline -------------------------------------

ROUTES = {
    "etl": {"target": {"type": "workflows", "workflow": "projects/wf-proj/locations/europe-west1/workflows/etl"}},
    "batch": {"target": {"type": "cloud_run_job", "job": "projects/job-proj/locations/europe-west1/jobs/batch"}},
    "build": {
        "target": {"type": "cloud_build_trigger", "trigger": "projects/cb-proj/locations/global/triggers/nightly"}
    },
    "hook": {
        "target": {"type": "http", "url": "https://hooks.example.com/run", "audience": "https://hooks.example.com"}
    },
    "demo": {"target": {"type": "log"}},
    "rollup": {
        "target": {
            "type": "bigquery_job",
            "project": "bq-proj",
            "location": "US",
            "configuration": {"query": {"query": "SELECT 1"}},
        }
    },
}
BASE_VARS = {
    "project_id": "my-project",
    "region": "europe-west1",
    "image": "example.com/runonce@sha256:" + "a" * 64,
    "routes": ROUTES,
}


@pytest.fixture(scope="module")
def rules_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """variables.tf + rules.tf alone: no provider needed, so terraform evaluates them for real."""
    directory = tmp_path_factory.mktemp("rules")
    shutil.copy(TERRAFORM / "variables.tf", directory)
    shutil.copy(TERRAFORM / "rules.tf", directory)
    outputs = [
        "retry_window_seconds",
        "retry_window_longest_seconds",
        "workflow_projects",
        "run_job_grants",
        "build_projects",
        "bigquery_projects",
        "scheduler_region",
        "spanner_ddl",
        "spanner_store_url",
        "tasks_queue_grants",
        "task_token_accounts",
        "workload_project_grants",
        "dataproc_projects",
        "workload_service_accounts",
    ]
    (directory / "outputs.tf").write_text(
        "".join(f'output "{name}" {{\n  value = local.{name}\n}}\n' for name in outputs)
    )
    run([tool("terraform"), "init", "-input=false", "-no-color"], cwd=directory, env=TF_ENV)
    return directory


def evaluate(directory: Path, tmp_path: Path, variables: dict, *, check: bool = True):
    var_file = tmp_path / "vars.tfvars.json"
    var_file.write_text(json.dumps(variables))
    state = tmp_path / "terraform.tfstate"
    result = run(
        [
            tool("terraform"),
            "apply",
            "-auto-approve",
            "-input=false",
            "-no-color",
            f"-var-file={var_file}",
            f"-state={state}",
        ],
        cwd=directory,
        env=TF_ENV,
        check=check,
    )
    if not check:
        return result
    outputs = run([tool("terraform"), "output", "-json", "-no-color", f"-state={state}"], cwd=directory, env=TF_ENV)
    return {name: value["value"] for name, value in json.loads(outputs.stdout).items()}


def test_default_job_settings_satisfy_the_retry_rule(rules_module: Path, tmp_path: Path) -> None:
    outputs = evaluate(
        rules_module, tmp_path, {**BASE_VARS, "jobs": {"nightly": {"route": "etl", "schedule": "0 3 * * *"}}}
    )
    # 20 + 40 + 80 + 160 + 300 (capped): retries still arrive 10 minutes after a dead attempt,
    # past the 300 s lease plus the 60 s attempt deadline.
    assert outputs["retry_window_seconds"] == {"nightly": 600}
    assert outputs["retry_window_longest_seconds"] == {"nightly": 600 + 6 * 60}
    assert outputs["scheduler_region"] == "europe-west1"


RETRY_TABLE = {  # name: (attempt deadline, retry_count, min, max, doublings, max_retry_duration)
    "defaults": (60, 5, 20, 300, 4, 0),
    "documented-example": (16, 5, 10, 300, 3, 0),
    "duration-beyond-count": (60, 2, 20, 300, 4, 1000),
    "count-beyond-duration": (60, 5, 20, 300, 4, 30),
    "duration-only": (16, 0, 100, 100, 0, 350),
    "no-doublings": (30, 5, 50, 400, 0, 0),
    "capped-early": (20, 4, 90, 100, 6, 0),
}


def test_terraform_retry_window_is_app_scheduler_retry(rules_module: Path, tmp_path: Path) -> None:
    """rules.tf computes Scheduler's retry window in HCL; runonce/scheduler_retry.py is the one
    implementation lint and the deploy scripts run, and this holds the two together."""
    jobs = {
        name: {
            "route": "etl",
            "schedule": "0 3 * * *",
            "attempt_deadline_seconds": deadline,
            "retry": {
                "retry_count": count,
                "min_backoff_seconds": low,
                "max_backoff_seconds": high,
                "max_doublings": doublings,
                "max_retry_duration_seconds": duration,
            },
        }
        for name, (deadline, count, low, high, doublings, duration) in RETRY_TABLE.items()
    }
    variables = {
        **BASE_VARS,
        "jobs": jobs,
        "lease_seconds": 12,
        "dispatch_timeout_seconds": 1,
        "retention_seconds": 10**7,
    }
    outputs = evaluate(rules_module, tmp_path, variables)
    for name, (deadline, count, low, high, doublings, duration) in RETRY_TABLE.items():
        window = retry_window(RetryConfig(count, low, high, doublings, duration, deadline))
        assert (outputs["retry_window_seconds"][name], outputs["retry_window_longest_seconds"][name]) == (
            window.shortest,
            window.longest,
        ), name


def test_grants_follow_the_routes_targets(rules_module: Path, tmp_path: Path) -> None:
    outputs = evaluate(rules_module, tmp_path, BASE_VARS)
    assert outputs["workflow_projects"] == ["wf-proj"]
    assert outputs["build_projects"] == ["cb-proj"]
    assert outputs["bigquery_projects"] == ["bq-proj"]
    job = {"project": "job-proj", "location": "europe-west1", "name": "batch"}
    assert outputs["run_job_grants"] == {
        "projects/job-proj/locations/europe-west1/jobs/batch roles/run.jobsExecutorWithOverrides": {
            "job": job,
            "role": "roles/run.jobsExecutorWithOverrides",
        },
        "projects/job-proj/locations/europe-west1/jobs/batch projects/job-proj/roles/runonceExecutionReader": {
            "job": job,
            "role": "projects/job-proj/roles/runonceExecutionReader",
        },
    }


def test_cloud_tasks_routes_grant_on_their_queue_and_actas_on_their_oidc_accounts(
    rules_module: Path, tmp_path: Path
) -> None:
    """As deploy/lib/routes_iam.py grants them: enqueuer and viewer on each queue (once however many
    routes use it), serviceAccountUser on each oidc_token account."""
    queue = "projects/tq-proj/locations/europe-west1/queues/exports"
    account = "export-invoker@tq-proj.iam.gserviceaccount.com"
    routes = {
        "export": {
            "target": {
                "type": "cloud_tasks_task",
                "queue": queue,
                "http_request": {"url": "https://x.a.run.app/run", "oidc_token": {"service_account_email": account}},
            }
        },
        "plain": {
            "target": {"type": "cloud_tasks_task", "queue": queue, "http_request": {"url": "https://y.a.run.app/run"}}
        },
    }
    outputs = evaluate(rules_module, tmp_path, {**BASE_VARS, "routes": {**ROUTES, **routes}})
    where = {"project": "tq-proj", "location": "europe-west1", "name": "exports"}
    assert outputs["tasks_queue_grants"] == {
        f"{queue} roles/cloudtasks.enqueuer": {"queue": where, "role": "roles/cloudtasks.enqueuer"},
        f"{queue} roles/cloudtasks.viewer": {"queue": where, "role": "roles/cloudtasks.viewer"},
    }
    assert outputs["task_token_accounts"] == [account]

    sys.path.insert(0, str(REPO / "deploy" / "lib"))
    from routes_iam import grants

    expected = [
        ("roles/cloudtasks.enqueuer", "tasks-queue", queue),
        ("roles/cloudtasks.viewer", "tasks-queue", queue),
        ("roles/iam.serviceAccountUser", "service-account", account),
    ]
    assert grants({"routes": routes}, "routes") == expected
    assert registry_grants(routes) == expected


def test_batch_workload_routes_grant_in_their_project_and_actas_on_their_accounts(
    rules_module: Path, tmp_path: Path
) -> None:
    """As deploy/lib/routes_iam.py and the registry grant them: each type's role in the route's
    project (once however many routes), serviceAccountUser on each account a workload runs as."""
    accounts = {kind: f"{kind.replace('_', '-')[:20]}@wl-proj.iam.gserviceaccount.com" for kind in ("b", "f", "d", "v")}
    routes = {
        "batch": {
            "target": {
                "type": "batch_job",
                "project": "wl-proj",
                "location": "us-central1",
                "job": {
                    "taskGroups": [{"taskSpec": {"runnables": [{"script": {"text": "echo"}}]}}],
                    "allocationPolicy": {"serviceAccount": {"email": accounts["b"]}},
                },
            }
        },
        "batch-default-account": {
            "target": {
                "type": "batch_job",
                "project": "wl-proj",
                "location": "us-central1",
                "job": {"taskGroups": [{"taskSpec": {"runnables": [{"script": {"text": "echo"}}]}}]},
            }
        },
        "flex": {
            "target": {
                "type": "dataflow_flex_template",
                "project": "df-proj",
                "location": "us-central1",
                "launch_parameter": {
                    "containerSpecGcsPath": "gs://t/etl.json",
                    "environment": {"serviceAccountEmail": accounts["f"]},
                },
            }
        },
        "spark": {
            "target": {
                "type": "dataproc_batch",
                "project": "dp-proj",
                "location": "us-central1",
                "batch": {
                    "pysparkBatch": {"mainPythonFileUri": "gs://c/etl.py"},
                    "environmentConfig": {"executionConfig": {"serviceAccount": accounts["d"]}},
                },
            }
        },
        "pipeline": {
            "target": {
                "type": "vertex_pipeline_job",
                "project": "wl-proj",
                "location": "us-central1",
                "pipeline_job": {
                    "templateUri": "https://us-central1-kfp.pkg.dev/p/r/t/v1",
                    "serviceAccount": accounts["v"],
                },
            }
        },
    }
    outputs = evaluate(rules_module, tmp_path, {**BASE_VARS, "routes": routes})
    assert outputs["workload_project_grants"] == {
        "wl-proj roles/batch.jobsEditor": {"project": "wl-proj", "role": "roles/batch.jobsEditor"},
        "df-proj roles/dataflow.developer": {"project": "df-proj", "role": "roles/dataflow.developer"},
        "wl-proj roles/aiplatform.user": {"project": "wl-proj", "role": "roles/aiplatform.user"},
    }
    assert outputs["dataproc_projects"] == ["dp-proj"]
    assert sorted(outputs["workload_service_accounts"]) == sorted(accounts.values())

    sys.path.insert(0, str(REPO / "deploy" / "lib"))
    from routes_iam import grants

    printed = [line for line in grants({"routes": routes}, "routes") if line[1] != "custom-role"]
    assert printed == registry_grants(routes)
    assert set(printed) == {
        ("roles/batch.jobsEditor", "project", "wl-proj"),
        ("roles/iam.serviceAccountUser", "service-account", accounts["b"]),
        ("roles/dataflow.developer", "project", "df-proj"),
        ("roles/iam.serviceAccountUser", "service-account", accounts["f"]),
        ("projects/dp-proj/roles/runonceDataprocBatchRunner", "project", "dp-proj"),
        ("roles/iam.serviceAccountUser", "service-account", accounts["d"]),
        ("roles/aiplatform.user", "project", "wl-proj"),
        ("roles/iam.serviceAccountUser", "service-account", accounts["v"]),
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"jobs": {"nightly": {"route": "etl", "schedule": "0 3 * * *", "retry": {"retry_count": 2}}}},
            "jobs.nightly: retries span 60 s, less than lease_seconds + attempt_deadline_seconds = 360 s",
        ),
        (
            {"jobs": {"nightly": {"route": "etl", "schedule": "0 3 * * *", "attempt_deadline_seconds": 30}}},
            "jobs.nightly: attempt_deadline_seconds (30) must be at least dispatch_timeout_seconds + 15 = 45",
        ),
        (
            {"jobs": {"nightly": {"route": "nope", "schedule": "0 3 * * *"}}},
            'jobs.nightly: route "nope" is not in routes',
        ),
        (
            {
                "retention_seconds": 3600,
                "jobs": {
                    "n": {
                        "route": "etl",
                        "schedule": "0 3 * * *",
                        "retry": {"min_backoff_seconds": 600, "max_backoff_seconds": 3600},
                    }
                },
            },
            "jobs.n: retention_seconds (3600) must exceed the longest retry window (11760 s",
        ),
        (
            {"dispatch_timeout_seconds": 290},
            "lease_seconds (300) must be at least dispatch_timeout_seconds (290) + 2 x the store timeout (5) + 1 = 301",
        ),
        ({"region": "us-central1-a"}, "region must be a Google Cloud region"),
        ({"image": "europe-west1-docker.pkg.dev/p/runonce/runonce:0.1.0"}, "image must name a digest"),
        ({"routes": {"Bad Name": {"target": {"type": "log"}}}}, "every route name must be 1-63 lower-case"),
        ({"routes": {"x": {"target": {"type": "ftp"}}}}, "Every route needs target.type, one of"),
        ({"routes": {"x": {"target": {"type": "cloud_run_job", "job": "batch"}}}}, "cloud_run_job needs job"),
        (
            {"routes": {"x": {"target": {"type": "cloud_tasks_task", "queue": "exports"}}}},
            "cloud_tasks_task needs queue",
        ),
        ({"jobs": {"nightly": {"route": "etl", "schedule": "  "}}}, "must be a non-empty unix-cron expression"),
        (
            {"jobs": {"nightly": {"route": "etl", "schedule": "0 0 3 * * *"}}},
            "must be a non-empty unix-cron expression",
        ),
        ({"jobs": {"nightly": {"route": "etl", "schedule": "0 3 * * *", "body": "[1]"}}}, "body must be a JSON object"),
        (
            {"store": "redis"},
            'store = "redis" needs network: Cloud Run reaches Memorystore only through Direct VPC egress',
        ),
        (
            {"store": "redis", "network": "default", "create_redis_instance": False},
            'store = "redis" with create_redis_instance = false needs redis_url = "redis://HOST:PORT/DB"',
        ),
        ({"subnetwork": "runonce"}, "subnetwork is set but network is not"),
        (
            {"store": "redis", "network": "default", "service_name": "r" * 41},
            "the Memorystore instance is named after service_name, which must then be at most 40 characters (it has "
            "41)",
        ),
        ({"store": "mysql"}, "store must be one of: firestore, spanner, redis."),
        (
            {"store": "redis", "network": "default", "redis_transit_encryption_mode": "ON"},
            "redis_transit_encryption_mode must be SERVER_AUTHENTICATION or DISABLED.",
        ),
        ({"auditor_token_creators": ["you@example.com"]}, "auditor_token_creators holds IAM members: user:EMAIL"),
        (
            {"auditor_token_creators": ["user:you@example.com"], "audit": {"enabled": False}},
            "auditor_token_creators is set but audit.enabled is false",
        ),
    ],
    ids=[
        "short-retries",
        "short-deadline",
        "unknown-route",
        "retention",
        "timeout-vs-lease",
        "zone-not-region",
        "image-by-tag",
        "route-name",
        "target-type",
        "job-name-format",
        "queue-name-format",
        "empty-schedule",
        "six-field-cron",
        "body-not-object",
        "redis-without-network",
        "redis-without-url",
        "subnetwork-without-network",
        "redis-instance-name",
        "unknown-store",
        "redis-tls-mode",
        "token-creator-not-a-member",
        "token-creators-without-auditor",
    ],
)
def test_broken_configuration_stops_the_plan_with_a_precise_message(
    rules_module: Path, tmp_path: Path, change: dict, message: str
) -> None:
    result = evaluate(rules_module, tmp_path, {**BASE_VARS, **change}, check=False)
    assert result.returncode != 0
    assert message in " ".join(result.stderr.split()), result.stderr
    assert (
        not (tmp_path / "terraform.tfstate").exists()
        or "terraform_data" not in (tmp_path / "terraform.tfstate").read_text()
    )


def test_spanner_database_ddl_is_the_stores_ddl_and_its_url_opens_that_table(
    rules_module: Path, tmp_path: Path
) -> None:
    """Terraform's database carries exactly the table `runonce store init` creates (the row deletion
    policy included), and RUNONCE_STORE names that instance, database and table."""
    from runonce.stores import parse_spanner_url
    from runonce.stores.spanner import DDL

    outputs = evaluate(
        rules_module,
        tmp_path,
        {
            **BASE_VARS,
            "store": "spanner",
            "spanner_instance": "claims",
            "spanner_database": "runs-db",
            "spanner_table": "my_runs",
        },
    )
    assert outputs["spanner_ddl"] == DDL.format(table="my_runs")
    url = parse_spanner_url(outputs["spanner_store_url"])
    assert (url.project, url.instance, url.database, url.table) == ("my-project", "claims", "runs-db", "my_runs")


def test_store_indexes_are_the_stores_own(hcl_trees: dict[str, dict]) -> None:
    """Terraform declares exactly the indexes the stores list through: Firestore's composite indexes
    (each equality field ascending, then created_at descending) and Spanner's INDEX_DDL."""
    from runonce.stores.firestore import INDEXES
    from runonce.stores.spanner import INDEX_DDL

    tree = hcl_trees["terraform/indexes.tf"]
    values = {key: value for entry in tree["locals"] for key, value in items(entry)}
    assert [string(ddl) for ddl in values["spanner_index_ddl_templates"]] == list(INDEX_DDL)
    assert sorted(tuple(string(f) for f in fields) for fields in values["firestore_index_fields"].values()) == sorted(
        INDEXES
    )
    index = _resources(hcl_trees)["google_firestore_index.runs"]
    assert index["collection"] == "${var.firestore_collection}"
    ((last,),) = [index["fields"]]
    assert (string(last["field_path"]), string(last["order"])) == ("created_at", "DESCENDING")


@pytest.mark.parametrize(
    "change",
    [
        {"store": "redis", "network": "default"},
        {
            "store": "redis",
            "network": "projects/net-proj/global/networks/shared",
            "subnetwork": "runonce",
            "create_redis_instance": False,
            "redis_url": "redis://10.0.0.3:6379/0",
        },
        {"store": "spanner", "create_spanner_instance": False, "create_spanner_database": False},
    ],
    ids=["redis-created", "redis-existing", "spanner-existing"],
)
def test_complete_store_settings_pass_the_rules(rules_module: Path, tmp_path: Path, change: dict) -> None:
    evaluate(rules_module, tmp_path, {**BASE_VARS, **change})


def test_store_choice_wires_database_grant_vpc_egress_and_env(hcl_trees: dict[str, dict]) -> None:
    resources = _resources(hcl_trees)
    database = resources["google_spanner_database.this"]
    assert database["ddl"] == "${concat([local.spanner_ddl], local.spanner_index_ddl, [local.spanner_steps_ddl])}"
    grant = resources["google_spanner_database_iam_member.runtime"]
    assert string(grant["role"]) == "roles/spanner.databaseUser"
    assert grant["database"] == "${local.spanner_database_name}"
    assert grant["member"] == "${google_service_account.runtime.member}"
    redis = resources["google_redis_instance.this"]
    assert redis["authorized_network"] == "${var.network}"
    assert redis["transit_encryption_mode"] == "${var.redis_transit_encryption_mode}"
    # volatile-lru (Memorystore's default) would evict run keys, all of which have a TTL
    assert {unquote(k): string(v) for k, v in redis["redis_configs"].items()} == {"maxmemory-policy": "noeviction"}
    template = resources["google_cloud_run_v2_service.this"]["template"][0]
    dynamic = {unquote(label): body for entry in template["dynamic"] for label, body in items(entry)}
    vpc = dynamic["vpc_access"]
    content = vpc["content"][0]
    assert string(content["egress"]) == "PRIVATE_RANGES_ONLY"
    assert content["network_interfaces"][0]["network"] == "${vpc_access.value}"
    for address in (
        "google_firestore_database.this",
        "google_firestore_field.expire_at_ttl",
        "google_project_iam_member.runtime_datastore",
    ):
        assert 'var.store == "firestore"' in resources[address]["count"], address
    main = hcl_trees["terraform/main.tf"]["locals"][0]
    assert main["runonce_env"].count("RUNONCE_STORE") == 1 and "local.store_url" in main["runonce_env"]


# --- checkov -----------------------------------------------------------------------------------


def checkov(directory: Path) -> dict:
    result = run(
        [
            tool("checkov/bin/checkov"),
            "-d",
            str(directory),
            "--framework",
            "terraform",
            "--skip-download",
            "--external-checks-dir",
            str(CHECKS_DIR),
            "-o",
            "json",
        ],
        check=False,
    )
    if result.returncode not in (0, 1):
        raise AssertionError(f"checkov failed to run ({result.returncode}):\n{result.stderr}")
    report = json.loads(result.stdout)
    report = report[0] if isinstance(report, list) else report
    return report


def test_checkov_passes_on_the_module_including_runonce_policies() -> None:
    report = checkov(TERRAFORM)
    failed = [(c["check_id"], c["resource"], c["file_path"]) for c in report["results"].get("failed_checks", [])]
    assert failed == []
    assert report["summary"]["parsing_errors"] == 0
    passed = {c["check_id"] for c in report["results"]["passed_checks"]}
    assert {"CKV_RUNONCE_1", "CKV_RUNONCE_2", "CKV_RUNONCE_3"} <= passed
    skipped = {(c["check_id"], c["resource"]) for c in report["results"].get("skipped_checks", [])}
    assert {check for check, _ in skipped} <= {"CKV_GCP_49", "CKV_GCP_83", "CKV_GCP_93", "CKV_GCP_95"}


def test_checkov_runonce_policies_catch_public_invoker_missing_oidc_and_open_ingress() -> None:
    report = checkov(Path(__file__).parent / "fixtures" / "insecure")
    failed = sorted((c["check_id"], c["resource"]) for c in report["results"]["failed_checks"])
    assert failed == [
        ("CKV_RUNONCE_1", "google_cloud_run_v2_service_iam_binding.any_google_account"),
        ("CKV_RUNONCE_1", "google_cloud_run_v2_service_iam_member.public"),
        ("CKV_RUNONCE_2", "google_cloud_scheduler_job.no_oidc"),
        ("CKV_RUNONCE_3", "google_cloud_run_v2_service.open"),
    ]


def test_the_lease_rule_uses_the_services_own_numbers() -> None:
    """rules.tf repeats runonce/settings.py's lease rule in HCL: its store timeout is the setting's
    default and its margin the service's, so a plan passes exactly when the service would start."""
    from runonce.settings import LEASE_MARGIN_SECONDS, Settings

    text = (REPO / "terraform" / "rules.tf").read_text()
    store_timeout = float(re.search(r"^\s*store_timeout_seconds\s*=\s*(\S+)", text, re.M).group(1))
    margin = float(re.search(r"^\s*lease_margin_seconds\s*=\s*(\S+)", text, re.M).group(1))
    assert store_timeout == Settings.model_fields["store_timeout_seconds"].default
    assert margin == LEASE_MARGIN_SECONDS


# --- the missed-runs audit (terraform/audit.tf) ------------------------------------------------


def _locals(hcl_trees: dict[str, dict]) -> dict:
    return {key: value for t in module_trees(hcl_trees) for entry in t.get("locals", []) for key, value in items(entry)}


def test_the_audit_job_calls_the_audit_every_10_minutes_as_an_admin_caller(hcl_trees: dict[str, dict]) -> None:
    """Its body's `since` is its own period (each fire time reported by one audit), with runonce's
    parser; the auditor is the one admin caller added, and may invoke the service."""
    from datetime import datetime, timedelta

    from runonce.missed.audit import DEFAULT_SINCE, audit_since
    from runonce.schedules import get_zone, parse_schedule

    resources, local = _resources(hcl_trees), _locals(hcl_trees)
    job = resources["google_cloud_scheduler_job.audit"]
    target = job["http_target"][0]
    assert (
        string(target["uri"])
        == "${local.service_url}/v1/audit:run?project=${var.project_id}&location=${local.scheduler_region}"
    )
    assert target["body"] == "${base64encode(local.audit_body)}"
    assert target["oidc_token"][0]["service_account_email"] == "${google_service_account.auditor[0].email}"
    assert string(local["audit_schedule"]) == "*/10 * * * *" and string(job["time_zone"]) == "Etc/UTC"
    since = re.fullmatch(
        r'\$\{jsonencode\(\{since = "(\w+)"\}\)\}', local["audit_body"].replace("\n", "").replace("  ", " ")
    )
    assert since is not None, local["audit_body"]
    first = datetime(2026, 1, 1, tzinfo=UTC)
    fires = [
        parse_schedule("*/10 * * * *").next_after(first + timedelta(minutes=m), get_zone("Etc/UTC")) for m in (0, 10)
    ]
    assert audit_since({"since": since.group(1)}) == fires[1] - fires[0] == DEFAULT_SINCE
    assert "google_service_account.auditor[0].email" in local["admin_callers"]
    main = (TERRAFORM / "main.tf").read_text()
    assert 'RUNONCE_ADMIN_CALLERS            = join(",", local.admin_callers)' in main
    grant = resources["google_cloud_run_v2_service_iam_member.auditor"]
    assert (
        string(grant["role"]) == "roles/run.invoker"
        and grant["member"] == "${google_service_account.auditor[0].member}"
    )
    # whoever reads runs as the auditor (deploy/smoke.sh) mints its tokens: a grant on that account
    creators = resources["google_service_account_iam_member.auditor_token_creators"]
    assert string(creators["role"]) == "roles/iam.serviceAccountOpenIdTokenCreator"
    assert creators["service_account_id"] == "${google_service_account.auditor[0].name}"
    assert "var.auditor_token_creators" in creators["for_each"] and creators["member"] == "${each.value}"


def test_the_audit_jobs_retry_settings_satisfy_the_retry_rule(
    hcl_trees: dict[str, dict], rules_module: Path, tmp_path: Path
) -> None:
    """The same rule as every job's (rules.tf), with its attempt deadline the request timeout."""
    retry = {k: int(v) for k, v in items(_locals(hcl_trees)["audit_retry"])}
    job = {"route": "etl", "schedule": "*/10 * * * *", "attempt_deadline_seconds": 120, "retry": retry}
    outputs = evaluate(rules_module, tmp_path, {**BASE_VARS, "jobs": {"runonce-audit": job}})
    assert outputs["retry_window_seconds"] == {"runonce-audit": 600}


def test_the_missed_runs_metric_counts_the_line_the_audit_logs(hcl_trees: dict[str, dict], caplog) -> None:
    """The log filter's every term holds for the JSON line runonce writes for a missed run, and the
    route label reads a field it has. Evaluated on the real formatter's output."""
    from audit_lines import missed_run_lines, unmet_terms

    entries = missed_run_lines(caplog)
    assert len(entries) == 2  # 11:45 and 11:50 have no record
    local = _locals(hcl_trees)
    terms = [line.strip() for line in local["missed_runs_log_filter"].splitlines() if "=" in line]  # not <<-EOT
    assert [term.split("=")[0] for term in terms] == [
        "resource.type",
        "resource.labels.service_name",
        "severity",
        "jsonPayload.outcome",
    ]
    assert unmet_terms(terms, entries[0]) == []
    metric = _resources(hcl_trees)["google_logging_metric.missed_runs"]
    assert string(metric["label_extractors"]["route"]) == "EXTRACT(jsonPayload.route)" and entries[0]["route"] == "etl"
    policy = _resources(hcl_trees)["google_monitoring_alert_policy.missed_runs"]
    condition = policy["conditions"][0]["condition_threshold"][0]
    assert "logging.googleapis.com/user/${google_logging_metric.missed_runs[0].name}" in condition["filter"]
    assert string(local["missed_runs_metric"]) == "runonce/missed_runs"
