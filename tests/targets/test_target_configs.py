"""Route configuration of the Google targets: each mistake stops start-up with one message naming
the file, the route and the field."""

from __future__ import annotations

import pytest

from runonce.routes import parse_routes
from runonce.settings import ConfigError, load_settings

WORKFLOW = "projects/my-project/locations/us-central1/workflows/etl"
JOB = "projects/my-project/locations/us-central1/jobs/nightly"
TRIGGER = "projects/my-project/locations/global/triggers/nightly-build"
QUEUE = "projects/my-project/locations/us-central1/queues/q"


def error_of(target: str) -> str:
    with pytest.raises(ConfigError) as raised:
        parse_routes(f"routes:\n  r:\n    target: {target}\n", "routes file r.yaml")
    return str(raised.value)


def test_valid_configs_load() -> None:
    routes = parse_routes(
        f"""routes:
  a: {{target: {{type: workflows, workflow: {WORKFLOW}, argument: {{mode: full}}, key_field: run_key,
                labels: {{team: data-eng}}, call_log_level: LOG_ERRORS_ONLY}}}}
  b: {{target: {{type: cloud_run_job, job: {JOB}, env_var: RUN_KEY, args: [--full], task_count: 3,
                timeout: 3600s, container: worker}}}}
  c: {{target: {{type: cloud_build_trigger, trigger: {TRIGGER}, substitution: _RUN_KEY,
                substitutions: {{_ENV: prod}}, tag: v1.2.3}}}}
  d: {{target: {{type: cloud_build_trigger,
                trigger: projects/123456789/locations/us-central1/triggers/0f5c9a3e-1c2d-4e5f-8a9b-0c1d2e3f4a5b}}}}
  e: {{target: {{type: http, url: 'https://svc-abc-uc.a.run.app/run', audience: 'https://svc-abc-uc.a.run.app'}}}}
""",
        "r.yaml",
    )
    assert routes["a"].target.key_field == "run_key"
    assert routes["b"].target.task_count == 3
    assert routes["c"].target.substitution == "_RUN_KEY"
    assert routes["d"].target.substitution == "_IDEMPOTENCY_KEY"
    assert routes["e"].target.audience == "https://svc-abc-uc.a.run.app"


def test_every_call_log_level_workflows_documents_loads() -> None:
    """Execution.callLogLevel: CALL_LOG_LEVEL_UNSPECIFIED (the workflow's own level) is one of its values."""
    for level in ("CALL_LOG_LEVEL_UNSPECIFIED", "LOG_ALL_CALLS", "LOG_ERRORS_ONLY", "LOG_NONE"):
        routes = parse_routes(
            f"routes:\n  r: {{target: {{type: workflows, workflow: {WORKFLOW}, call_log_level: {level}}}}}\n", "r.yaml"
        )
        assert routes["r"].target.call_log_level == level


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (
            "{type: workflows, workflow: etl}",
            "field 'target.workflow': must be a workflow's full name, "
            "projects/PROJECT/locations/LOCATION/workflows/WORKFLOW (got 'etl')",
        ),
        (
            "{type: workflows, workflow: projects/My_Project/locations/us-central1/workflows/etl}",
            "field 'target.workflow': the project 'My_Project' is not a project ID (6-30 characters of a-z 0-9 -, "
            "starting with a letter, optionally domain-scoped as example.com:my-project) or number",
        ),
        (
            "{type: workflows, workflow: projects/my-project/locations/US/workflows/etl}",
            "field 'target.workflow': the location 'US' is not a location (e.g. us-central1)",
        ),
        # workflows, Cloud Run jobs and Cloud Tasks queues live in a region: `global` names none
        (
            "{type: workflows, workflow: projects/my-project/locations/global/workflows/etl}",
            "field 'target.workflow': the location 'global' is not a region (such as us-central1): workflows exist "
            "only in a region",
        ),
        (
            "{type: cloud_run_job, job: projects/my-project/locations/global/jobs/nightly}",
            "field 'target.job': the location 'global' is not a region (such as us-central1): Cloud Run jobs exist "
            "only in a region",
        ),
        (
            "{type: cloud_tasks_task, queue: projects/my-project/locations/global/queues/q, "
            "http_request: {url: 'https://example.com/run'}}",
            "field 'target.queue': the location 'global' is not a region (such as us-central1): Cloud Tasks queues "
            "exist only in a region",
        ),
        (
            "{type: cloud_run_job, job: projects/my-project/locations/us/jobs/nightly}",
            "field 'target.job': the location 'us' is not a region",
        ),
        (
            "{type: workflows, workflow: projects/my-project/locations/us-central1/workflows/9etl}",
            "field 'target.workflow': the workflow ID '9etl' must be 1-64 characters of A-Z a-z 0-9 _ -, starting with "
            "a letter, ending with a letter or digit",
        ),
        (
            "{type: workflows, workflow: projects/my-project/locations/us-central1/workflows/etl-}",
            "field 'target.workflow': the workflow ID 'etl-' must be 1-64 characters of A-Z a-z 0-9 _ -, starting with "
            "a letter, ending with a letter or digit",
        ),
        (
            "{type: cloud_build_trigger, trigger: projects/my-project/locations/global/triggers/nightly_build}",
            "field 'target.trigger': the trigger (its id, or its name) 'nightly_build' must be 1-64 characters of "
            "A-Z a-z 0-9 -, starting and ending with a letter or digit",
        ),
        (
            "{type: cloud_build_trigger, trigger: projects/my-project/locations/global/triggers/nightly-}",
            "field 'target.trigger': the trigger (its id, or its name) 'nightly-' must be 1-64 characters",
        ),
        (
            "{type: cloud_build_trigger, trigger: projects/My-Project/locations/global/triggers/nightly}",
            "field 'target.trigger': the project 'My-Project' is not a project ID",
        ),
        (
            "{type: cloud_run_job, job: projects/my_project/locations/us-central1/jobs/nightly}",
            "field 'target.job': the project 'my_project' is not a project ID",
        ),
        (
            "{type: workflows, workflow: projects/my-project/regions/us-central1/workflows/etl}",
            "field 'target.workflow': must be a workflow's full name, "
            "projects/PROJECT/locations/LOCATION/workflows/WORKFLOW",
        ),
        (
            f"{{type: workflows, workflow: {WORKFLOW}, labels: {{Team: x}}}}",
            "field 'target': labels: label key 'Team': 1-63 characters of a-z 0-9 _ -, starting with a letter",
        ),
        (
            f"{{type: workflows, workflow: {WORKFLOW}, labels: {{team: Data}}}}",
            "field 'target': labels: label 'team': value 'Data' must be at most 63 characters of a-z 0-9 _ -",
        ),
        (
            f"{{type: workflows, workflow: {WORKFLOW}, labels: {{runonce-run-id: x}}}}",
            "field 'target': labels: label 'runonce-run-id' is set by runonce itself",
        ),
        (
            f"{{type: workflows, workflow: {WORKFLOW}, key_field: runonce}}",
            "field 'target.key_field': must be an identifier",
        ),
        (
            f"{{type: workflows, workflow: {WORKFLOW}, call_log_level: VERBOSE}}",
            "field 'target.call_log_level': Input should be 'CALL_LOG_LEVEL_UNSPECIFIED', 'LOG_ALL_CALLS', "
            "'LOG_ERRORS_ONLY' or 'LOG_NONE'",
        ),
        (
            f"{{type: workflows, workflow: {WORKFLOW}, argumnet: {{}}}}",
            "field 'target.argumnet': Extra inputs are not permitted (did you mean 'argument'? this block takes: "
            "type, workflow, argument, key_field, labels, call_log_level)",
        ),
        (
            f"{{type: cloud_tasks_task, queue: {QUEUE}, http_request: {{url: 'https://x.test/', headres: {{}}}}}}",
            "field 'target.http_request.headres': Extra inputs are not permitted (did you mean 'headers'? this block "
            "takes: url, http_method, headers, oidc_token)",
        ),
        (
            f"{{type: cloud_run_job, job: {JOB}, args:}}",
            "field 'target': args: is empty (null); a value is needed here: give it a value (an empty key in YAML is "
            "null) or remove the key",
        ),
        (
            "{type: cloud_run_job, job: projects/my-project/jobs/nightly}",
            "field 'target.job': must be a job's full name, projects/PROJECT/locations/LOCATION/jobs/JOB",
        ),
        (
            f"{{type: cloud_run_job, job: {JOB}, env_var: CLOUD_RUN_EXECUTION}}",
            "field 'target.env_var': must be an env var name",
        ),
        (
            f"{{type: cloud_run_job, job: {JOB}, timeout: 10m}}",
            "field 'target.timeout': must be a duration in seconds like '600s' (got '10m')",
        ),
        (
            f"{{type: cloud_run_job, job: {JOB}, timeout: 604801s}}",
            "field 'target.timeout': 604801s is longer than a Cloud Run task may run: at most 604800s (168 hours)",
        ),
        (
            f"{{type: cloud_build_trigger, trigger: {TRIGGER}, branch: 'release-*'}}",
            "field 'target.branch': must be one branch or tag name as git allows it: no regular expression",
        ),
        (
            f"{{type: cloud_build_trigger, trigger: {TRIGGER}, tag: 'v1..2'}}",
            "field 'target.tag': must be one branch or tag name as git allows it",
        ),
        (
            f"{{type: cloud_run_job, job: {JOB}, task_count: 0}}",
            "field 'target.task_count': Input should be greater than or equal to 1",
        ),
        (
            f"{{type: cloud_build_trigger, trigger: {TRIGGER}, substitution: IDEMPOTENCY_KEY}}",
            "field 'target.substitution': substitution 'IDEMPOTENCY_KEY' must match ^_[A-Z0-9_]+$",
        ),
        (
            f"{{type: cloud_build_trigger, trigger: {TRIGGER}, substitutions: {{_lower: x}}}}",
            "field 'target.substitutions': substitution '_lower' must match ^_[A-Z0-9_]+$",
        ),
        (
            f"{{type: cloud_build_trigger, trigger: {TRIGGER}, branch: main, tag: v1}}",
            "set at most one of branch, tag and commit (got branch, tag)",
        ),
        (
            "{type: cloud_build_trigger, trigger: projects/my-project/triggers/x}",
            "field 'target.trigger': must be a trigger's full name",
        ),
        (
            "{type: http, url: 'https://x.example.com', audience: ''}",
            "field 'target.audience': String should have at least 1 character",
        ),
    ],
)
def test_each_mistake_is_named(target: str, expected: str) -> None:
    message = error_of(target)
    assert message.startswith("routes file r.yaml: route 'r': ")
    assert expected in message
    assert len(message.splitlines()) == 1


@pytest.mark.parametrize("value", ["127.0.0.1:8085", "ftp://x", "https://run.googleapis.com/v2"])
def test_endpoint_overrides_must_be_urls(value: str) -> None:
    with pytest.raises(ConfigError, match=r"RUNONCE_RUN_ENDPOINT: .*use https://HOST"):
        load_settings(run_endpoint=value)


def test_endpoint_overrides_accept_plaintext_and_tls() -> None:
    settings = load_settings(
        workflows_endpoint="http://127.0.0.1:8085", cloudbuild_endpoint="https://cloudbuild.googleapis.com"
    )
    assert settings.workflows_endpoint == "http://127.0.0.1:8085"


def test_readme_documents_every_target_type() -> None:
    from typing import get_args

    from runonce.targets import TargetConfig
    from tests.support.procs import REPO

    union = get_args(get_args(TargetConfig)[0])
    for config in union:
        target_type = get_args(config.model_fields["type"].annotation)[0]
        page = REPO / "docs" / "how-to" / "targets" / f"{target_type}.md"
        assert page.exists(), f"{target_type} has no page docs/how-to/targets/{target_type}.md"
        assert page.read_text().startswith(f"# `{target_type}`"), f"{page} does not start with its type's title"
