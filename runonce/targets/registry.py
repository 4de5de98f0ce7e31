"""What each target module declares about itself, in one entry (`TargetType`), and what every
adapter receives at start-up (`TargetContext`).

`runonce/targets/__init__.py` lists the entries; everything else reads them: the routes' `target:`
union, `build_target`, the endpoint override settings (`RUNONCE_<ENDPOINT>_ENDPOINT`), and the
tests that hold the IAM table of docs/how-to/iam.md, `deploy/lib/routes_iam.py` and Terraform to the grants.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from pydantic import BaseModel

from runonce.targets.base import Target
from runonce.targets.google import GoogleAuth


@dataclass
class TargetContext:
    """What adapters share for the life of the process: one HTTP client, one set of Google
    credentials, and the API endpoint overrides by endpoint name (`{"run": "http://…"}`; a missing
    or None entry means Google's own endpoint)."""

    http: httpx.AsyncClient
    google_auth: GoogleAuth = field(default_factory=GoogleAuth)
    endpoints: Mapping[str, str | None] = field(default_factory=dict)


Builder = Callable[[Any, TargetContext, "str | None"], Target]
"""(the route's validated config, the shared context, the endpoint override or None) -> adapter."""


@dataclass(frozen=True)
class Grant:
    """One IAM role the runtime service account needs for a route of this type.

    `role` is a predefined role (`roles/…`) or, with `permissions`, the id of a custom role that
    runonce defines in the resource's project (a project-level custom role can be granted nowhere
    else). `on` says where it is granted: `project` (the resource's project) or the resource
    itself, by the kind the deploy scripts know (`run-job`: a Cloud Run job, `tasks-queue`: a Cloud
    Tasks queue, `service-account`: a service account, by email).

    `field`: the config field (dotted) naming what it is granted on, when that is not the type's
    `resource_field`; a route that leaves the field out needs no such grant (a task's OIDC account).
    """

    role: str
    on: Literal["project", "run-job", "tasks-queue", "service-account"]
    permissions: tuple[str, ...] = ()
    field: str | None = None


@dataclass(frozen=True)
class TargetType:
    """One target type, as its module declares it."""

    name: str
    """The `type:` of a route's target block."""
    config: type[BaseModel]
    """The target block's model; its `type` field is `Literal[name]`."""
    adapter: type[Target]
    build: Builder
    endpoint: str | None = None
    """The API endpoint it calls, by name: `run` is overridden by RUNONCE_RUN_ENDPOINT
    (`Settings.run_endpoint`). Types may share one (none do today)."""
    resource_field: str | None = None
    """The config field naming the resource the grants are on (`projects/P/…`, or the project)."""
    grants: tuple[Grant, ...] = ()
    takes_payload: bool = True
    """Whether a delivery's payload reaches this type (false: its workload is the route's alone)."""
    event_payload: Literal["event", "data", "none"] = "event"
    """What an event route (Pub/Sub, CloudEvents) to this type sends when it names no `event_payload`."""

    @property
    def can_reconcile(self) -> bool:
        """Whether the adapter's `reconcile` looks downstream for what an earlier attempt created
        (else a lost answer is covered only by the downstream's own dedupe on the token)."""
        return self.adapter.reconcile is not Target.reconcile

    @property
    def reads_state(self) -> bool:
        """Whether the adapter's `is_running` can tell if an execution is still running."""
        return getattr(self.adapter, "is_running", None) is not getattr(Target, "is_running", None)

    def state_problem(self, config: object) -> str | None:
        """Why a route with this target block cannot tell whether an execution still runs, or None:
        the type cannot, or the block lacks what the type needs (its config's `state_problem`)."""
        if not self.reads_state:
            return f"a {self.name!r} target cannot tell"
        problem = getattr(config, "state_problem", None)
        return problem if isinstance(problem, str) else None

    def endpoint_override(self, endpoints: Mapping[str, str | None]) -> str | None:
        return endpoints.get(self.endpoint) if self.endpoint else None
