#!/usr/bin/env python3
"""Print the IAM grants runonce's runtime account needs for the routes in a routes file.

One grant a line, tab-separated: `ROLE  KIND  RESOURCE`, where KIND says where it is granted:
`project` (RESOURCE = project id), `run-job` (projects/P/locations/L/jobs/J), `tasks-queue`
(projects/P/locations/L/queues/Q), `service-account` (its email). A custom role
(`projects/P/roles/ID`) is preceded by its definition: `ROLE  custom-role  PERMISSION,PERMISSION`.
`--predefined-cloud-build-role` grants roles/cloudbuild.builds.editor instead of the custom
runonceBuildRunner (README's IAM table: the trade-off). The README's IAM table,
per resource where the API allows it (Cloud Run jobs, Cloud Tasks queues), else per project
(Workflows, Cloud Build have no per-resource IAM). Warnings for what the file cannot tell (an http audience's service) go to
stderr. Reads JSON always, YAML when PyYAML is installed. Exit 2 on a bad file.
"""

from __future__ import annotations

import json
import re
import sys

PATTERNS = {
    "workflows": ("workflow", r"^projects/([^/]+)/locations/([^/]+)/workflows/([^/]+)$"),
    "cloud_run_job": ("job", r"^projects/([^/]+)/locations/([^/]+)/jobs/([^/]+)$"),
    "cloud_build_trigger": ("trigger", r"^projects/([^/]+)/locations/([^/]+)/triggers/([^/]+)$"),
    "cloud_tasks_task": ("queue", r"^projects/([^/]+)/locations/([^/]+)/queues/([^/]+)$"),
}
TYPES = {"log", "http", *PATTERNS}
# Custom roles, defined in the project of the resource they are granted on (the only place a
# project-level custom role can be granted). Terraform's iam.tf defines the same ones.
CUSTOM_ROLES = {
    # triggers.run needs cloudbuild.builds.create; get and list reconcile. The predefined
    # builds.editor would also let runonce edit and cancel any build.
    "runonceBuildRunner": ("cloudbuild.builds.create", "cloudbuild.builds.get", "cloudbuild.builds.list"),
    # roles/run.jobsExecutorWithOverrides cannot read executions; roles/run.viewer reads far more.
    "runonceExecutionReader": ("run.executions.get", "run.executions.list"),
}
PREDEFINED_BUILD_ROLE = "roles/cloudbuild.builds.editor"
SERVICE_ACCOUNT_PATTERN = r"^[a-z0-9][a-z0-9._-]*@[a-z0-9][a-z0-9.-]*\.gserviceaccount\.com$"


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        import yaml
    except ImportError:
        sys.exit(f"error: {path} is not JSON, and reading YAML needs PyYAML (pip install pyyaml)")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        sys.exit(f"error: {path}: not valid YAML or JSON: {exc}")


def custom_role(project: str, role_id: str) -> list[tuple[str, str, str]]:
    """The definition line and the role's name, for a grant that follows."""
    return [(f"projects/{project}/roles/{role_id}", "custom-role", ",".join(CUSTOM_ROLES[role_id]))]


def oidc_account_grant(target: dict, where: str) -> list[tuple[str, str, str]]:
    """A task with an OIDC token: creating it needs actAs on the token's account."""
    http_request = target.get("http_request")
    token = http_request.get("oidc_token") if isinstance(http_request, dict) else None
    email = token.get("service_account_email") if isinstance(token, dict) else None
    if token is None:
        return []
    if not isinstance(email, str) or not re.match(SERVICE_ACCOUNT_PATTERN, email):
        raise ValueError(f"{where}: field 'target.http_request.oidc_token.service_account_email' must match "
                         f"{SERVICE_ACCOUNT_PATTERN}")
    return [("roles/iam.serviceAccountUser", "service-account", email)]


def grants(config: object, origin: str, predefined_build_role: bool = False) -> list[tuple[str, str, str]]:
    if not isinstance(config, dict) or not isinstance(config.get("routes"), dict) or not config["routes"]:
        raise ValueError(f"{origin}: expected a mapping with a non-empty top-level 'routes:'")
    found: list[tuple[str, str, str]] = []
    for name, route in config["routes"].items():
        target = route.get("target") if isinstance(route, dict) else None
        kind = target.get("type") if isinstance(target, dict) else None
        if kind not in TYPES:
            raise ValueError(f"{origin}: route {name!r}: field 'target.type' must be one of {', '.join(sorted(TYPES))}")
        if kind in PATTERNS:
            field, pattern = PATTERNS[kind]
            match = re.match(pattern, str(target.get(field, "")))
            if not match:
                raise ValueError(f"{origin}: route {name!r}: field 'target.{field}' must match {pattern}")
            project = match.group(1)
            if kind == "workflows":
                found.append(("roles/workflows.invoker", "project", project))
            elif kind == "cloud_run_job":
                found.append(("roles/run.jobsExecutorWithOverrides", "run-job", target[field]))
                found.extend(custom_role(project, "runonceExecutionReader"))
                found.append((f"projects/{project}/roles/runonceExecutionReader", "run-job", target[field]))
            elif kind == "cloud_tasks_task":
                # The enqueuer role creates tasks but cannot read them: the viewer role reads the
                # run's task (reconciliation), on this queue only.
                found.append(("roles/cloudtasks.enqueuer", "tasks-queue", target[field]))
                found.append(("roles/cloudtasks.viewer", "tasks-queue", target[field]))
                found.extend(oidc_account_grant(target, f"{origin}: route {name!r}"))
            elif predefined_build_role:
                found.append((PREDEFINED_BUILD_ROLE, "project", project))
            else:
                found.extend(custom_role(project, "runonceBuildRunner"))
                found.append((f"projects/{project}/roles/runonceBuildRunner", "project", project))
                print(f"note: route {name!r}: if trigger {target[field]} runs as its own service account, "
                      "pass --trigger-service-account EMAIL (runonce's account needs actAs on it)", file=sys.stderr)
        elif kind == "http" and target.get("audience"):
            print(f"note: route {name!r}: http audience {target['audience']}: if it is a Cloud Run service, pass "
                  "--downstream-service projects/P/locations/L/services/S (runonce's account needs roles/run.invoker)",
                  file=sys.stderr)
    return list(dict.fromkeys(found))  # keep the order, drop repeats


def main() -> None:
    args = sys.argv[1:]
    predefined = "--predefined-cloud-build-role" in args
    args = [a for a in args if a != "--predefined-cloud-build-role"]
    if len(args) != 1:
        sys.exit("usage: routes_iam.py [--predefined-cloud-build-role] ROUTES_FILE")
    try:
        for grant in grants(load(args[0]), f"routes file {args[0]}", predefined):
            print("\t".join(grant))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
