"""`cloud_build_trigger` target: one build per run (Cloud Build API v1 `triggers.run`, REST).

The token is the substitution `substitution` (default `_IDEMPOTENCY_KEY`) = run_id; with
`run_fields` (default on) also `_RUNONCE_JOB`, `_RUNONCE_SCHEDULE_TIME` or `_RUNONCE_TASK`, and
`_RUNONCE_SOURCE`; the delivery's payload may add substitutions of its own (`{"_KEY": "value"}`).
Cloud Build rejects substitutions that the build config does not use unless the config sets
`options.substitutionOption: ALLOW_LOOSE`.

The answer is a long-running operation whose metadata names the build: its name is the resource.
`builds.list` cannot filter on substitutions, so reconciliation lists the trigger's builds created
since the run was first claimed and matches the substitution itself.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, timedelta
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from runonce.targets.base import DispatchRequest, TargetFailed, TargetOutcomeUnknown
from runonce.targets.google import GoogleAuth, GoogleRestTarget, reconciling, resource_parts, resource_pattern
from runonce.targets.registry import Grant, TargetType

logger = logging.getLogger("runonce.target.cloud_build_trigger")

DEFAULT_ENDPOINT = "https://cloudbuild.googleapis.com"
TRIGGER_PATTERN = resource_pattern("triggers", r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
BUILD_PATTERN = resource_pattern("builds", r"[A-Za-z0-9_-]+")
RUNNING_STATUSES = ("PENDING", "QUEUED", "WORKING")
FINAL_STATUSES = ("SUCCESS", "FAILURE", "INTERNAL_ERROR", "TIMEOUT", "CANCELLED", "EXPIRED")
SUBSTITUTION_PATTERN = r"^_[A-Z0-9_]+$"
UUID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
RUN_FIELD_SUBSTITUTIONS = ("_RUNONCE_JOB", "_RUNONCE_SCHEDULE_TIME", "_RUNONCE_TASK", "_RUNONCE_SOURCE")
CLOCK_SKEW = timedelta(minutes=10)
"""How far Google's createTime may lag our clock when searching builds since the first claim."""
MAX_PAGES = 20


def _substitution_error(key: str) -> PydanticCustomError:
    return PydanticCustomError(
        "substitution",
        "substitution {key} must match ^_[A-Z0-9_]+$ (user substitutions start with '_', e.g. _IDEMPOTENCY_KEY)",
        {"key": repr(key)},
    )


class CloudBuildTriggerTargetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["cloud_build_trigger"]
    trigger: str = Field(description="projects/PROJECT/locations/LOCATION/triggers/TRIGGER (id or name)")
    substitution: str = Field("_IDEMPOTENCY_KEY", description="Substitution that receives the run_id.")
    substitutions: dict[str, str] = Field(default_factory=dict, description="Extra substitutions.")
    run_fields: bool = Field(True, description="Also send _RUNONCE_JOB, _RUNONCE_SCHEDULE_TIME, _RUNONCE_SOURCE.")
    branch: str | None = None
    tag: str | None = None
    commit: str | None = None

    @field_validator("trigger")
    @classmethod
    def _trigger(cls, value: str) -> str:
        if not re.match(TRIGGER_PATTERN, value):
            raise PydanticCustomError(
                "resource_name",
                "must be a trigger's full name, projects/PROJECT/locations/LOCATION/triggers/TRIGGER "
                "(TRIGGER: its id or name) (got {value})",
                {"value": repr(value)},
            )
        return value

    @field_validator("substitution")
    @classmethod
    def _substitution(cls, value: str) -> str:
        if not re.match(SUBSTITUTION_PATTERN, value) or value in RUN_FIELD_SUBSTITUTIONS:
            raise _substitution_error(value)
        return value

    @field_validator("substitutions")
    @classmethod
    def _substitutions(cls, values: dict[str, str]) -> dict[str, str]:
        for key in values:
            if not re.match(SUBSTITUTION_PATTERN, key):
                raise _substitution_error(key)
            if key in RUN_FIELD_SUBSTITUTIONS:
                raise PydanticCustomError("substitution", "substitution {key} is set by runonce", {"key": repr(key)})
        return values

    @field_validator("commit")
    @classmethod
    def _commit(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9a-f]{7,40}", value):
            raise PydanticCustomError(
                "commit", "must be a commit SHA (7-40 hex digits) (got {value})", {"value": repr(value)}
            )
        return value

    @model_validator(mode="after")
    def _one_revision(self) -> CloudBuildTriggerTargetConfig:
        given = [name for name in ("branch", "tag", "commit") if getattr(self, name) is not None]
        if len(given) > 1:
            raise PydanticCustomError(
                "revision", "set at most one of branch, tag and commit (got {given})", {"given": ", ".join(given)}
            )
        if self.substitution in self.substitutions:
            raise PydanticCustomError(
                "substitution", "substitutions: {key} is the token's substitution", {"key": repr(self.substitution)}
            )
        return self


class CloudBuildTriggerTarget(GoogleRestTarget[CloudBuildTriggerTargetConfig]):
    type = "cloud_build_trigger"
    DEFAULT_ENDPOINT = DEFAULT_ENDPOINT

    def __init__(
        self,
        config: CloudBuildTriggerTargetConfig,
        http: httpx.AsyncClient,
        auth: GoogleAuth,
        endpoint: str | None = None,
    ):
        super().__init__(config, http, auth, endpoint)
        parts = resource_parts(config.trigger)
        self._project, self._location, self._trigger = parts["projects"], parts["locations"], parts["triggers"]
        self._trigger_id: str | None = self._trigger if re.match(UUID_PATTERN, self._trigger) else None

    def substitutions(self, request: DispatchRequest) -> dict[str, str]:
        values = dict(self.config.substitutions)
        for key, value in request.payload.items():
            if not re.match(SUBSTITUTION_PATTERN, key) or not isinstance(value, str):
                raise TargetFailed(
                    f"payload field {key!r}: a cloud_build_trigger payload holds substitutions, "
                    "keys matching ^_[A-Z0-9_]+$ with string values"
                )
            values[key] = value
        if self.config.run_fields:
            fields = request.runonce_fields()
            values["_RUNONCE_JOB"] = request.job
            values["_RUNONCE_SOURCE"] = request.source
            if fields.get("schedule_time"):
                values["_RUNONCE_SCHEDULE_TIME"] = fields["schedule_time"]
            if fields.get("task"):
                values["_RUNONCE_TASK"] = fields["task"]
        values[self.config.substitution] = request.run_id
        return values

    def run_request(self, request: DispatchRequest) -> dict[str, Any]:
        """The `RunBuildTriggerRequest` body."""
        source: dict[str, Any] = {"substitutions": self.substitutions(request)}
        if self.config.branch is not None:
            source["branchName"] = self.config.branch
        if self.config.tag is not None:
            source["tagName"] = self.config.tag
        if self.config.commit is not None:
            source["commitSha"] = self.config.commit
        return {"projectId": self._project, "triggerId": self._trigger, "source": source}

    async def dispatch(self, request: DispatchRequest) -> str:
        action = f"run {self.config.trigger}"
        operation = await self.call("POST", f"v1/{self.config.trigger}:run", action, body=self.run_request(request))
        build = (operation.get("metadata") or {}).get("build") or {}
        if build.get("buildTriggerId"):
            self._trigger_id = build["buildTriggerId"]
        if build.get("name"):
            return str(build["name"])
        if build.get("id"):
            return f"projects/{self._project}/locations/{self._location}/builds/{build['id']}"
        if operation.get("error"):
            raise TargetFailed(f"{action}: {operation['error'].get('message', operation['error'])}")
        if operation.get("name"):
            return str(operation["name"])
        raise TargetOutcomeUnknown(f"{action}: the answer names neither a build nor an operation")

    async def reconcile(self, request: DispatchRequest) -> str | None:
        parent = f"projects/{self._project}/locations/{self._location}"
        with reconciling(f"look up trigger {self.config.trigger}"):
            trigger_id = await self._resolve_trigger_id()
        conditions = [f'trigger_id="{trigger_id}"']
        if request.created_at is not None:
            since = (request.created_at - CLOCK_SKEW).astimezone(UTC)
            conditions.append(f'create_time>="{since:%Y-%m-%dT%H:%M:%SZ}"')
        action = f"list builds of {self.config.trigger}"
        found: list[str] = []
        with reconciling(action):
            page_token: str | None = None
            for _ in range(MAX_PAGES):
                params: dict[str, Any] = {
                    "projectId": self._project,
                    "filter": " AND ".join(conditions),
                    "pageSize": 100,
                }
                if page_token:
                    params["pageToken"] = page_token
                page = await self.call("GET", f"v1/{parent}/builds", action, params=params)
                for build in page.get("builds") or []:
                    if (build.get("substitutions") or {}).get(self.config.substitution) == request.run_id:
                        found.append(build.get("name") or f"{parent}/builds/{build.get('id')}")
                page_token = page.get("nextPageToken")
                if not page_token:
                    break
            else:
                raise TargetOutcomeUnknown(f"{action}: more than {MAX_PAGES} pages of builds to search")
        if len(found) > 1:
            logger.warning("run %s has %d builds: %s", request.run_id, len(found), ", ".join(found))
        return found[-1] if found else None  # newest first: the last is the earliest

    async def is_running(self, resource: str) -> bool:
        """`builds.get`: PENDING, QUEUED or WORKING runs; a final status, or no build, does not."""
        if not re.match(BUILD_PATTERN, resource):
            raise TargetOutcomeUnknown(f"{resource} is not a build's name")
        build = await self.read_state(f"v1/{resource}", resource)
        if build is None:
            return False
        status = build.get("status")
        if status in RUNNING_STATUSES:
            return True
        if status in FINAL_STATUSES:
            return False
        raise TargetOutcomeUnknown(f"get {resource}: status {status}")

    async def _resolve_trigger_id(self) -> str:
        """Builds name their trigger by id; a trigger configured by name is looked up once."""
        if self._trigger_id is None:
            trigger = await self.call("GET", f"v1/{self.config.trigger}", f"get {self.config.trigger}")
            if not trigger.get("id"):
                raise TargetOutcomeUnknown(f"get {self.config.trigger}: the answer has no trigger id")
            self._trigger_id = str(trigger["id"])
        return self._trigger_id


TARGET = TargetType(
    name="cloud_build_trigger",
    config=CloudBuildTriggerTargetConfig,
    adapter=CloudBuildTriggerTarget,
    build=CloudBuildTriggerTarget.build,
    endpoint="cloudbuild",
    resource_field="trigger",
    # triggers.run needs cloudbuild.builds.create, granted per project only (no per-trigger IAM);
    # get and list reconcile. The predefined roles/cloudbuild.builds.editor would also let runonce
    # edit and cancel any build (the deploy scripts offer it as an option).
    grants=(
        Grant(
            "runonceBuildRunner",
            on="project",
            permissions=("cloudbuild.builds.create", "cloudbuild.builds.get", "cloudbuild.builds.list"),
        ),
    ),
    event_payload="none",  # a payload is substitutions: an event route sends its data (event_payload: data) or none
)
