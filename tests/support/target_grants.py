"""The runtime account's IAM grants for a set of routes, computed from the target registry
(`runonce.targets.TARGET_TYPES`): the reference that deploy/lib/routes_iam.py, Terraform and the
README's IAM table are each held to."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runonce.targets import TARGET_TYPES


def project_of(value: str) -> str:
    """`projects/P/locations/L/jobs/J` -> P; a bare project id stays as it is."""
    return value.split("/")[1] if value.startswith("projects/") else value


def field_of(target: Mapping[str, Any], dotted: str) -> Any:
    """`target["a"]["b"]` for "a.b", or None when any part is missing."""
    value: Any = target
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def registry_grants(routes: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(role, where, resource) per grant, in route order, without repeats: a custom role is named
    `projects/P/roles/ID` in the resource's project; `where` is `project` (resource = the project)
    or the resource's kind (resource = the field's full value)."""
    found: list[tuple[str, str, str]] = []
    for route in routes.values():
        entry = TARGET_TYPES[route["target"]["type"]]
        if entry.resource_field is None:
            continue
        value = route["target"][entry.resource_field]
        project = project_of(value)
        for grant in entry.grants:
            role = f"projects/{project}/roles/{grant.role}" if grant.permissions else grant.role
            if grant.field is not None:
                named = field_of(route["target"], grant.field)
                if named is not None:
                    found.append((role, grant.on, named))
                continue
            found.append((role, grant.on, project if grant.on == "project" else value))
    return list(dict.fromkeys(found))


def custom_roles() -> dict[str, tuple[str, ...]]:
    """Every custom role a target type declares, by id, with its permissions."""
    return {g.role: g.permissions for t in TARGET_TYPES.values() for g in t.grants if g.permissions}
