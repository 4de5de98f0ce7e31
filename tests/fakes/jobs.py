"""Base of the fakes of APIs that create a resource under a caller-chosen id in
`projects/P/locations/L/COLLECTION` (Batch jobs, Dataproc batches, Vertex AI pipeline jobs), with a
`get` by its name. Requests are checked against the API's discovery document (`FakeRestApi`), then
against what the API enforces beyond the schema: the id's pattern, label keys and values, the
subclass's own rules (`check_body`).

It dedupes as these APIs do: an id is taken once per parent, and creating it again answers 409
ALREADY_EXISTS; a `requestId` seen before answers what the first request created (Batch and
Dataproc promise that for at least an hour). Resources start in `initial_state`; `finish()` puts
them in `final_state`. What was created is recorded with the label `runonce-run-id` as its token
(the run_id's first 63 characters).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from .http_server import Request
from .metadata import FakeMetadataServer
from .rest import ApiError, FakeRestApi, now_rfc3339

LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")


def check_labels(labels: Any, where: str = "labels") -> None:
    if labels is None:
        return
    if len(labels) > 64:
        raise ApiError("INVALID_ARGUMENT", f"{where}: at most 64 labels")
    for key, value in labels.items():
        if not LABEL_KEY.match(key) or not LABEL_VALUE.match(value):
            raise ApiError(
                "INVALID_ARGUMENT",
                f"{where}: label {key}={value} is invalid: keys start with a lowercase letter; keys and "
                "values are at most 63 characters of lowercase letters, digits, _ and -",
            )


class FakeJobsApi(FakeRestApi):
    create_method: str
    get_method: str
    collection: str
    id_param: str
    id_pattern: re.Pattern[str]
    id_rule: str
    request_id_param: str | None = None
    request_id_pattern: re.Pattern[str] | None = None
    initial_state: str
    final_state: str
    state_path: tuple[str, ...] = ("state",)

    def __init__(self, metadata: FakeMetadataServer):
        super().__init__(metadata)
        self.creating_methods = {self.create_method}
        self.resources: dict[str, dict[str, Any]] = {}
        self.answers_by_request_id: dict[str, dict[str, Any]] = {}

    # --- what tests drive -----------------------------------------------------------------------
    def finish(self, name: str, state: str | None = None) -> None:
        """The resource reaches a final state (succeeded, unless `state` says otherwise)."""
        with self.lock:
            self._set_state(self.resources[name], state or self.final_state)

    def created_with_id(self, resource_id: str) -> list[str]:
        """What was created under that id (a `google_api` route's handle, whatever its labels)."""
        with self.lock:
            return [c.resource for c in self.created if c.resource.rsplit("/", 1)[1] == resource_id]

    def forget_request_ids(self) -> None:
        """The API's memory of request ids runs out: a re-sent create meets the id instead."""
        with self.lock:
            self.answers_by_request_id.clear()

    def state(self, name: str) -> str:
        with self.lock:
            value: Any = self.resources[name]
            for part in self.state_path:
                value = value[part]
            return value

    # --- what subclasses say ---------------------------------------------------------------------
    def check_body(self, body: dict[str, Any]) -> None:
        """Refuse (ApiError) what the API refuses beyond the discovery document's schema."""

    def new_resource(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def answer_of(self, resource: dict[str, Any]) -> dict[str, Any]:
        """The create's answer (the resource itself, or a long-running operation)."""
        return resource

    def labels_of(self, body: dict[str, Any]) -> dict[str, str]:
        return body.get("labels") or {}

    # --- the API ----------------------------------------------------------------------------------
    def handle(self, method_id: str, params: dict[str, str], request: Request) -> dict[str, Any]:
        if method_id == self.create_method:
            return self._create(params["parent"], request.query, request.json() or {})
        if method_id == self.get_method:
            return self._get(params["name"])
        self.violation(f"{method_id}: not expected from runonce")
        raise ApiError("UNIMPLEMENTED", f"{method_id} is not faked")

    def _create(self, parent: str, query: dict[str, list[str]], body: dict[str, Any]) -> dict[str, Any]:
        resource_id = (query.get(self.id_param) or [""])[0]
        if not resource_id:
            # runonce always names the run's resource: a generated id could never be reconciled
            self.violation(f"{self.create_method}: no {self.id_param}")
            resource_id = f"gen-{uuid.uuid4().hex}"
        if not self.id_pattern.fullmatch(resource_id):
            raise ApiError("INVALID_ARGUMENT", f"{self.id_param} {resource_id!r}: {self.id_rule}")
        request_id = (query.get(self.request_id_param) or [""])[0] if self.request_id_param else ""
        if request_id and self.request_id_pattern and not self.request_id_pattern.fullmatch(request_id):
            raise ApiError("INVALID_ARGUMENT", f"{self.request_id_param} {request_id!r} is not valid")
        check_labels(self.labels_of(body))
        self.check_body(body)
        name = f"{parent}/{self.collection}/{resource_id}"
        with self.lock:
            if request_id and request_id in self.answers_by_request_id:
                return self.answers_by_request_id[request_id]
            if name in self.resources:
                raise ApiError("ALREADY_EXISTS", f"Resource '{name}' already exists")
            resource = self.new_resource(name, body)
            self.resources[name] = resource
            answer = self.answer_of(resource)
            if request_id:
                self.answers_by_request_id[request_id] = answer
        token = self.labels_of(body).get("runonce-run-id")
        self.record_created(self.create_method, name, token, {"body": body, "resource": resource})
        return answer

    def _get(self, name: str) -> dict[str, Any]:
        with self.lock:
            resource = self.resources.get(name)
            if resource is None:
                raise ApiError("NOT_FOUND", f"Resource '{name}' was not found")
            return dict(resource)

    def _set_state(self, resource: dict[str, Any], state: str) -> None:
        holder = resource
        for part in self.state_path[:-1]:
            holder = holder.setdefault(part, {})
        holder[self.state_path[-1]] = state
        if "updateTime" in resource:
            resource["updateTime"] = now_rfc3339()
