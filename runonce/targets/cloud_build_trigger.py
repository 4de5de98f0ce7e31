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

import re
from datetime import UTC
from typing import Any, Literal

import httpx
from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from runonce.targets.base import DispatchRequest, TargetConfigModel, TargetFailed, TargetOutcomeUnknown, config_error
from runonce.targets.engine import CLOCK_SKEW, Call, GoogleEngineTarget, Listing, Running, operation_result
from runonce.targets.google import GoogleAuth, resource_name_problem, resource_pattern
from runonce.targets.presets import check_route, run_fields
from runonce.targets.registry import Grant, TargetType

TRIGGER_ID = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?"
"""A trigger by its id (a UUID) or its name: 1-64 characters of A-Z a-z 0-9 -, starting and ending with a
letter or digit (the API's rule for trigger names)."""
TRIGGER_ID_RULE = (
    "trigger (its id, or its name) must be 1-64 characters of A-Z a-z 0-9 -, starting and ending with a letter or digit"
)
BUILD_PATTERN = resource_pattern("builds", r"[A-Za-z0-9_-]+")
RUNNING_STATUSES = ("PENDING", "QUEUED", "WORKING")
FINAL_STATUSES = ("SUCCESS", "FAILURE", "INTERNAL_ERROR", "TIMEOUT", "CANCELLED", "EXPIRED")
SUBSTITUTION_PATTERN = r"_[A-Z0-9_]+"
UUID_PATTERN = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
GIT_REF_NAME = r"(?!.*(?:\.\.|@\{|//|\.lock/|/\.))(?![/.])(?!@\Z)[^\x00-\x20\x7f~^:?*\[\\]+(?<![/.])(?<!\.lock)"
"""A branch or tag name git takes (`git check-ref-format --branch`): no control character, space, ~ ^ : ? * [ \\,
no `..`, `@{` or `//`, no part that starts with `.` or ends with `.lock`, not `@`, not starting or ending with / or ."""
RUN_FIELD_SUBSTITUTIONS = ("_RUNONCE_JOB", "_RUNONCE_SCHEDULE_TIME", "_RUNONCE_TASK", "_RUNONCE_SOURCE")


def _substitution_error(key: str) -> PydanticCustomError:
    return config_error(
        f"substitution {key!r} must match ^_[A-Z0-9_]+$ (user substitutions start with '_', e.g. _IDEMPOTENCY_KEY)"
    )


class CloudBuildTriggerTargetConfig(TargetConfigModel):
    type: Literal["cloud_build_trigger"]
    trigger: str = Field(description="projects/PROJECT/locations/LOCATION/triggers/TRIGGER (id or name)")
    substitution: str = Field("_IDEMPOTENCY_KEY", description="Substitution that receives the run_id.")
    substitutions: dict[str, str] = Field(default_factory=dict, description="Extra substitutions.")
    run_fields: bool = Field(
        True,
        strict=True,  # a YAML boolean: "yes", "false" or 1 is not taken for one
        description="Also send _RUNONCE_JOB, _RUNONCE_SCHEDULE_TIME, _RUNONCE_SOURCE.",
    )
    branch: str | None = None
    tag: str | None = None
    commit: str | None = None

    @field_validator("trigger")
    @classmethod
    def _trigger(cls, value: str) -> str:
        problem = resource_name_problem(value, "triggers", TRIGGER_ID, TRIGGER_ID_RULE)
        if problem:  # names the part at fault: the project, the location or the trigger
            raise config_error(problem)
        return value

    @field_validator("substitution")
    @classmethod
    def _substitution(cls, value: str) -> str:
        if not re.fullmatch(SUBSTITUTION_PATTERN, value) or value in RUN_FIELD_SUBSTITUTIONS:
            raise _substitution_error(value)
        return value

    @field_validator("substitutions")
    @classmethod
    def _substitutions(cls, values: dict[str, str]) -> dict[str, str]:
        for key in values:
            if not re.fullmatch(SUBSTITUTION_PATTERN, key):
                raise _substitution_error(key)
            if key in RUN_FIELD_SUBSTITUTIONS:
                raise config_error(f"substitution {key!r} is set by runonce")
        return values

    @field_validator("branch", "tag")
    @classmethod
    def _ref_name(cls, value: str | None) -> str | None:
        # Cloud Build: "Branch and tag names cannot consist of regular expressions."; and git's own
        # rule for a ref's name (git check-ref-format).
        if value is not None and not re.fullmatch(GIT_REF_NAME, value):
            raise config_error(
                "must be one branch or tag name as git allows it: no regular expression or wildcard (* ? [ ^), no "
                "space, ~, :, \\, '..', '@{', control character, '//', or a leading or trailing / or . "
                f"(got {value!r})"
            )
        return value

    @field_validator("commit")
    @classmethod
    def _commit(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9a-f]{7,40}", value):
            raise config_error(f"must be a commit SHA (7-40 hex digits) (got {value!r})")
        return value

    @model_validator(mode="after")
    def _one_revision(self) -> CloudBuildTriggerTargetConfig:
        given = [name for name in ("branch", "tag", "commit") if getattr(self, name) is not None]
        if len(given) > 1:
            raise config_error(f"set at most one of branch, tag and commit (got {', '.join(given)})")
        if self.substitution in self.substitutions:
            raise config_error(f"substitutions: {self.substitution!r} is the token's substitution")
        check_route(CloudBuildTriggerTarget, self)
        return self


class CloudBuildTriggerTarget(GoogleEngineTarget[CloudBuildTriggerTargetConfig]):
    type = "cloud_build_trigger"
    API = "cloudbuild.v1"
    NOUN = "build"
    TAKES_PAYLOAD = True  # the delivery's body holds substitutions
    RUNNING = Running("status", running=frozenset(RUNNING_STATUSES), final=frozenset(FINAL_STATUSES))

    def __init__(
        self,
        config: CloudBuildTriggerTargetConfig,
        http: httpx.AsyncClient,
        auth: GoogleAuth,
        endpoint: str | None = None,
    ):
        super().__init__(config, http, auth, endpoint)
        _, self._project, _, self._location, _, self._trigger = config.trigger.split("/")
        self._trigger_id: str | None = self._trigger if re.fullmatch(UUID_PATTERN, self._trigger) else None

    def substitutions(self, request: DispatchRequest) -> dict[str, str]:
        values = dict(self.config.substitutions)
        for key, value in request.payload.items():
            if not re.fullmatch(SUBSTITUTION_PATTERN, key) or not isinstance(value, str):
                raise TargetFailed(
                    f"payload field {key!r}: a cloud_build_trigger payload holds substitutions, "
                    "keys matching ^_[A-Z0-9_]+$ with string values"
                )
            values[key] = value
        if self.config.run_fields:
            values.update(run_fields(request, "_RUNONCE_"))
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

    @property
    def _parent(self) -> str:
        return f"projects/{self._project}/locations/{self._location}"

    def describe(self, request: DispatchRequest) -> str:
        return f"run {self.config.trigger}"

    def describe_lookup(self, request: DispatchRequest) -> str:
        return f"list builds of {self.config.trigger}"

    def create_call(self, request: DispatchRequest) -> Call:
        return Call("projects.locations.triggers.run", {"name": self.config.trigger}, self.run_request(request))

    def created(self, answer: dict[str, Any], request: DispatchRequest) -> str:
        """The build named in the operation's metadata (runonce never waits for it)."""
        build = (answer.get("metadata") or {}).get("build") or {}
        if build.get("buildTriggerId"):
            self._trigger_id = build["buildTriggerId"]
        name = build.get("name") or (f"{self._parent}/builds/{build['id']}" if build.get("id") else None)
        return operation_result(answer, name, self.describe(request))

    def list_call(self, request: DispatchRequest) -> Listing:
        """The trigger's builds since the run's first claim (`builds.list` cannot filter on
        substitutions; it filters on the trigger and the creation time)."""
        conditions = [f'trigger_id="{self._trigger_id or self._trigger}"']
        if request.created_at is not None:
            since = (request.created_at - CLOCK_SKEW).astimezone(UTC)
            conditions.append(f'create_time>="{since:%Y-%m-%dT%H:%M:%SZ}"')
        params = {"parent": self._parent, "projectId": self._project, "filter": " AND ".join(conditions)}
        return Listing(Call("projects.locations.builds.list", {**params, "pageSize": 100}), items="builds")

    def matches(self, item: dict[str, Any], request: DispatchRequest) -> str | None:
        if (item.get("substitutions") or {}).get(self.config.substitution) != request.run_id:
            return None
        return str(item.get("name") or f"{self._parent}/builds/{item.get('id')}")

    async def find(self, request: DispatchRequest, action: str) -> str | None:
        """Builds name their trigger by id: a trigger configured by name is looked up once first."""
        if self._trigger_id is None:
            get = f"get {self.config.trigger}"
            lookup = Call("projects.locations.triggers.get", {"name": self.config.trigger})
            trigger = await self.read(self.url_of(lookup), get) or {}
            if not trigger.get("id"):
                raise TargetOutcomeUnknown(f"{get}: the answer has no trigger id")
            self._trigger_id = str(trigger["id"])
        return await super().find(request, action)

    def state_call(self, resource: str) -> Call:
        if not re.fullmatch(BUILD_PATTERN, resource):
            raise TargetOutcomeUnknown(f"{resource} is not a build's name")
        return Call("projects.locations.builds.get", {"name": resource})


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
