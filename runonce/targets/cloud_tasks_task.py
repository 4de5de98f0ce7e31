"""`cloud_tasks_task` target: one Cloud Tasks HTTP task per run (Cloud Tasks API v2 `tasks.create`, REST).

The task is named after the run: `{queue}/tasks/{run_id}`. The run_id is already a sha256 in hex,
so task names spread evenly over the keyspace as Cloud Tasks asks of named tasks. Its request
carries the run as the `http` target sends it: the same JSON body, `Idempotency-Key: run_id`,
`Content-Type: application/json`.

Cloud Tasks dedupes on the name: a second `tasks.create` with it answers 409 `ALREADY_EXISTS`
while the task exists and for about an hour after it ended (its documentation says ~1 hour for
queues made through the API, ~9 days for queue.yaml queues; later versions say a name may stay
taken up to a day, but promise no more than the hour). So a re-sent create *is* the lookup, and
`ALREADY_EXISTS` completes the run with the task it names.

Reconciliation (after an attempt whose outcome is unknown) reads the task by name. 200: the run
completes with it. 404: either no attempt created it, or it ran and Cloud Tasks deleted it; both
are safe to re-send while Cloud Tasks still remembers the name, which it does at least an hour
after the task ended, hence at least an hour after the run was first claimed. Past that, a 404
cannot tell the two apart: the run is never dispatched blind (TargetOutcomeUnknown).
"""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from runonce.targets.base import DispatchRequest, TargetConfigModel, TargetOutcomeUnknown, config_error
from runonce.targets.engine import CLOCK_SKEW, Call, GoogleEngineTarget
from runonce.targets.google import CONTROL_CHARACTER, resource_name_problem
from runonce.targets.http import run_document
from runonce.targets.presets import act_as, check_route
from runonce.targets.registry import Grant, TargetType

QUEUE_ID = r"[A-Za-z0-9-]{1,100}"
MAX_URL_LENGTH = 2083
MAX_HEADERS_BYTES = 80 * 1024  # "The size of the headers must be less than 80KB."
BODY_METHODS = ("POST", "PUT", "PATCH")  # the only ones Cloud Tasks sends a body with
HEADER_NAME = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"  # an HTTP token (RFC 9110)
SET_BY_RUNONCE = {"idempotency-key", "content-type"}
REPLACED_BY_CLOUD_TASKS = {"host", "content-length", "user-agent"}
GOOGLE_PREFIXES = ("x-google-", "x-appengine-", "x-cloudtasks-")
SERVICE_ACCOUNT = r"[a-z0-9][a-z0-9._-]*@[a-z0-9][a-z0-9.-]*\.gserviceaccount\.com"

NAME_MEMORY = timedelta(hours=1)
"""How long Cloud Tasks refuses a task name again after the task ended (queues made through the API);
the engine's CLOCK_SKEW comes off it: our clock against Google's, and the "about" in "about an hour"."""


class OidcTokenConfig(TargetConfigModel):
    """Cloud Tasks signs an ID token as this service account for each delivery of the task."""

    service_account_email: str
    audience: str | None = Field(None, min_length=1, description="Default: the task's URL.")

    @field_validator("service_account_email")
    @classmethod
    def _email(cls, value: str) -> str:
        if not re.fullmatch(SERVICE_ACCOUNT, value, flags=re.ASCII):
            raise config_error(
                f"must be a service account's email, NAME@PROJECT.iam.gserviceaccount.com (got {value!r})"
            )
        return value


class CloudTasksHttpRequestConfig(TargetConfigModel):
    url: str
    http_method: str = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    oidc_token: OidcTokenConfig | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        control = CONTROL_CHARACTER.search(value)
        if control:
            raise config_error(
                f"holds the control character {control.group()!r} at position {control.start()}; "
                "a URL holds none (\\x00-\\x1f, \\x7f-\\x9f): percent-encode it"
            )
        # Cloud Tasks: "This string must begin with either "http://" or "https://"".
        if not value.startswith(("http://", "https://")) or not urlsplit(value).hostname or re.search(r"\s", value):
            raise config_error(f"must be an http:// or https:// URL with a host (got {value!r})")
        try:
            port = urlsplit(value).port  # reading it checks it: 0-65535, in ASCII digits
        except ValueError:
            port = 0
        if port == 0:
            raise config_error(f"has a port that is not one (1-65535) (got {value!r})")
        if len(value) > MAX_URL_LENGTH:
            raise config_error(f"is longer than Cloud Tasks' {MAX_URL_LENGTH} characters")
        return value

    @field_validator("http_method")
    @classmethod
    def _method(cls, value: str) -> str:
        if value not in BODY_METHODS:
            raise config_error(
                "must be POST, PUT or PATCH, in capitals: the run travels as the request body, and Cloud "
                f"Tasks sends a body with no other method (got {value!r})"
            )
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            lower = name.lower()
            if not re.fullmatch(HEADER_NAME, name, flags=re.ASCII):
                raise config_error(f"header name {name!r} is not an HTTP token (letters, digits, !#$%&'*+.^_`|~-)")
            if lower in SET_BY_RUNONCE:
                raise config_error(f"header {name!r} is set by runonce (run_id, application/json)")
            if lower in REPLACED_BY_CLOUD_TASKS or lower.startswith(GOOGLE_PREFIXES):
                raise config_error(
                    f"header {name!r} is set by Cloud Tasks (Host, Content-Length, User-Agent, "
                    "X-Google-*, X-AppEngine-*, X-CloudTasks-*)"
                )
            if not isinstance(value, str) or re.search(r"[\x00-\x08\x0a-\x1f\x7f]", value):
                raise config_error(f"header {name!r}: the value holds a control character")
        size = sum(len(name.encode()) + len(value.encode()) for name, value in headers.items())
        if size >= MAX_HEADERS_BYTES:
            raise config_error(f"the headers hold {size} bytes; Cloud Tasks takes less than 80 KB")
        return headers

    @model_validator(mode="after")
    def _one_authorization(self) -> CloudTasksHttpRequestConfig:
        if self.oidc_token is not None and any(name.lower() == "authorization" for name in self.headers):
            raise config_error("header Authorization: Cloud Tasks sets it from oidc_token; set one of them")
        return self


class CloudTasksTaskTargetConfig(TargetConfigModel):
    type: Literal["cloud_tasks_task"]
    queue: str = Field(description="projects/PROJECT/locations/LOCATION/queues/QUEUE")
    http_request: CloudTasksHttpRequestConfig

    @field_validator("queue")
    @classmethod
    def _queue(cls, value: str) -> str:
        problem = resource_name_problem(
            value,
            "queues",
            QUEUE_ID,
            "queue ID must be 1-100 characters of A-Z a-z 0-9 -",
            regional="Cloud Tasks queues",
        )
        if problem:
            raise config_error(problem)
        return value

    @model_validator(mode="after")
    def _against_the_api(self) -> CloudTasksTaskTargetConfig:
        check_route(CloudTasksTaskTarget, self)
        return self


class CloudTasksTaskTarget(GoogleEngineTarget[CloudTasksTaskTargetConfig]):
    type = "cloud_tasks_task"
    API = "cloudtasks.v2"
    NOUN = "task"
    TAKES_PAYLOAD = True  # the delivery's body is the task's body
    BODY_FIELD = ("task.httpRequest", "http_request")

    def task_name(self, run_id: str) -> str:
        return f"{self.config.queue}/tasks/{run_id}"

    def describe(self, request: DispatchRequest) -> str:
        return f"create task {self.task_name(request.run_id)}"

    def describe_lookup(self, request: DispatchRequest) -> str:
        return f"get task {self.task_name(request.run_id)}"

    def task(self, request: DispatchRequest) -> dict[str, Any]:
        """The `Task` that `tasks.create` takes: the run as the `http` target would POST it."""
        http_request = self.config.http_request
        body = run_document(request)
        task_request: dict[str, Any] = {
            "url": http_request.url,
            "httpMethod": http_request.http_method,
            "headers": {**http_request.headers, "Idempotency-Key": request.run_id, "Content-Type": "application/json"},
            "body": base64.b64encode(body).decode("ascii"),
        }
        if http_request.oidc_token is not None:
            token: dict[str, str] = {"serviceAccountEmail": http_request.oidc_token.service_account_email}
            if http_request.oidc_token.audience is not None:
                token["audience"] = http_request.oidc_token.audience
            task_request["oidcToken"] = token
        return {"name": self.task_name(request.run_id), "httpRequest": task_request}

    def create_call(self, request: DispatchRequest) -> Call:
        return Call(
            "projects.locations.queues.tasks.create", {"parent": self.config.queue}, {"task": self.task(request)}
        )

    def lookup_call(self, request: DispatchRequest) -> Call:
        return self.state_call(self.task_name(request.run_id))

    def created(self, answer: dict[str, Any], request: DispatchRequest) -> str:
        return self.task_name(request.run_id)  # the created Task, named as asked

    def adopted_without_lookup(self, request: DispatchRequest) -> str:
        """Cloud Tasks answers ALREADY_EXISTS for a task of that name that exists *or ran within
        the hour* (then deleted, so a lookup would not find it): either way an earlier attempt
        created the run's task."""
        return self.task_name(request.run_id)

    def state_call(self, resource: str) -> Call:
        return Call("projects.locations.queues.tasks.get", {"name": resource})

    async def reconcile(self, request: DispatchRequest) -> str | None:
        found = await super().reconcile(request)
        if found is not None:
            return found
        now = datetime.now(UTC)
        if request.created_at is not None and now < request.created_at + NAME_MEMORY - CLOCK_SKEW:
            return None  # never created, or ended so recently that a re-send is answered ALREADY_EXISTS
        first = "at an unknown time" if request.created_at is None else f"at {request.created_at:%Y-%m-%dT%H:%M:%SZ}"
        raise TargetOutcomeUnknown(
            f"cannot tell whether this run already started: task {self.task_name(request.run_id)} is not in the "
            f"queue, and the run was first claimed {first}, so a task it created may have run and been deleted "
            "longer ago than Cloud Tasks remembers its name (about an hour); a re-send could run it twice"
        )

    async def is_running(self, resource: str) -> bool:
        """A task stays in its queue until it succeeded or ran out of retries; then it is deleted (404)."""
        return await self.read_state(resource) is not None


TARGET = TargetType(
    name="cloud_tasks_task",
    config=CloudTasksTaskTargetConfig,
    adapter=CloudTasksTaskTarget,
    build=CloudTasksTaskTarget.build,
    endpoint="cloudtasks",
    resource_field="queue",
    grants=(
        Grant("roles/cloudtasks.enqueuer", on="tasks-queue"),
        # The enqueuer role cannot read tasks: tasks.get reconciles and reads the state.
        Grant("roles/cloudtasks.viewer", on="tasks-queue"),
        # Creating a task that carries an OIDC token needs actAs on its account.
        act_as("http_request.oidc_token.service_account_email"),
    ),
)
