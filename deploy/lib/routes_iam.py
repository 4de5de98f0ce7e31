#!/usr/bin/env python3
"""Print the IAM grants runonce's runtime account needs for the routes in a routes file.

One grant a line, tab-separated: `ROLE  KIND  RESOURCE`, where KIND says where it is granted:
`project` (RESOURCE = project id), `run-job` (projects/P/locations/L/jobs/J), `tasks-queue`
(projects/P/locations/L/queues/Q), `service-account` (its email). A custom role
(`projects/P/roles/ID`) is preceded by its definition: `ROLE  custom-role  PERMISSION,PERMISSION`.
`--predefined-cloud-build-role` grants roles/cloudbuild.builds.editor instead of the custom
runonceBuildRunner (README's IAM table: the trade-off). The README's IAM table,
per resource where the API allows it (Cloud Run jobs, Cloud Tasks queues), else per project
(Workflows, Cloud Build have no per-resource IAM). Warnings for what the file cannot tell (an http
audience's service) go to stderr. Reads JSON always, YAML when PyYAML is installed. Exit 2 on a bad file.
"""

from __future__ import annotations

import json
import re
import sys

NAME = r"^projects/([^/]+)/locations/([^/]+)/{}/([^/]+)$"
# Each target type: the routes-file field naming the resource its grants are on, that field's
# pattern (group 1: the project), and the grants as (role, where): `project` = the resource's
# project, `run-job` / `tasks-queue` = the job or queue itself; or (role, where, field) for a grant
# on what another (dotted) field names, needed only when the route sets it. The same as the app's
# registry (runonce/targets: each module's `TARGET.resource_field` and `.grants`), which
# tests/targets/test_registry.py holds this to; the script stays standalone because the deploy
# scripts run it where runonce is not installed.
TARGETS: dict[str, tuple[str, str, list[tuple[str, ...]]] | None] = {
    "log": None,
    "http": None,
    "workflows": ("workflow", NAME.format("workflows"), [("roles/workflows.invoker", "project")]),
    "cloud_run_job": (
        "job",
        NAME.format("jobs"),
        [("roles/run.jobsExecutorWithOverrides", "run-job"), ("runonceExecutionReader", "run-job")],
    ),
    "cloud_build_trigger": ("trigger", NAME.format("triggers"), [("runonceBuildRunner", "project")]),
    "bigquery_job": ("project", r"^([a-z][a-z0-9.:-]*[a-z0-9]|[0-9]+)$", [("roles/bigquery.jobUser", "project")]),
    "cloud_tasks_task": (
        "queue",
        NAME.format("queues"),
        [
            ("roles/cloudtasks.enqueuer", "tasks-queue"),
            ("roles/cloudtasks.viewer", "tasks-queue"),
            ("roles/iam.serviceAccountUser", "service-account", "http_request.oidc_token.service_account_email"),
        ],
    ),
}
# What a grant on another field may name, by where it is granted.
NAMED = {"service-account": r"^[a-z0-9][a-z0-9._-]*@[a-z0-9][a-z0-9.-]*\.gserviceaccount\.com$"}
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
BUILD_RUNNER = "runonceBuildRunner"  # --predefined-cloud-build-role grants PREDEFINED_BUILD_ROLE instead


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


def named_grant(target: dict, role: str, where: str, field: str, origin: str) -> list[tuple[str, str, str]]:
    """The grant on what `target`'s dotted `field` names; none when the route leaves it out."""
    value: object = target
    for part in field.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return []
    if not isinstance(value, str) or not re.match(NAMED[where], value):
        raise ValueError(f"{origin}: field 'target.{field}' must match {NAMED[where]}")
    return [(role, where, value)]


def grants(config: object, origin: str, predefined_build_role: bool = False) -> list[tuple[str, str, str]]:
    if not isinstance(config, dict) or not isinstance(config.get("routes"), dict) or not config["routes"]:
        raise ValueError(f"{origin}: expected a mapping with a non-empty top-level 'routes:'")
    found: list[tuple[str, str, str]] = []
    for name, route in config["routes"].items():
        target = route.get("target") if isinstance(route, dict) else None
        kind = target.get("type") if isinstance(target, dict) else None
        if kind not in TARGETS:
            raise ValueError(
                f"{origin}: route {name!r}: field 'target.type' must be one of {', '.join(sorted(TARGETS))}"
            )
        declared = TARGETS[kind]
        if declared is not None:
            field, pattern, roles = declared
            value = str(target.get(field, ""))
            match = re.match(pattern, value)
            if not match:
                raise ValueError(f"{origin}: route {name!r}: field 'target.{field}' must match {pattern}")
            project = match.group(1)
            for role, where, *named in roles:
                if named:
                    found.extend(named_grant(target, role, where, named[0], f"{origin}: route {name!r}"))
                    continue
                if role == BUILD_RUNNER and predefined_build_role:
                    role = PREDEFINED_BUILD_ROLE
                elif role in CUSTOM_ROLES:
                    found.extend(custom_role(project, role))
                    role = f"projects/{project}/roles/{role}"
                found.append((role, where, project if where == "project" else value))
        if kind == "cloud_build_trigger":
            print(
                f"note: route {name!r}: if trigger {target['trigger']} runs as its own service account, "
                "pass --trigger-service-account EMAIL (runonce's account needs actAs on it)",
                file=sys.stderr,
            )
        elif kind == "http" and target.get("audience"):
            print(
                f"note: route {name!r}: http audience {target['audience']}: if it is a Cloud Run service, pass "
                "--downstream-service projects/P/locations/L/services/S (runonce's account needs roles/run.invoker)",
                file=sys.stderr,
            )
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
