"""Fake Workflow Executions API v1 (REST): executions.create, .list and .get.

Requests are checked against `workflowexecutions.v1.json` (`FakeRestApi`), then against what the API
enforces beyond the schema: the workflow exists, the argument is a JSON object of at most 32 KiB,
labels as Google's labels, and `list`'s filter (only `labels.KEY="VALUE"` terms joined by AND). Like
the real API, `list` returns labels and argument only with `view=FULL`, newest first.

An execution is ACTIVE until the test calls `finish(name, state)`.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from .http_server import Request
from .jobs import check_labels
from .metadata import FakeMetadataServer
from .rest import ApiError, FakeRestApi, now_rfc3339

CREATE = "workflowexecutions.projects.locations.workflows.executions.create"
LIST = "workflowexecutions.projects.locations.workflows.executions.list"
GET = "workflowexecutions.projects.locations.workflows.executions.get"
FILTER_TERM = re.compile(r'^labels\.([a-z][a-z0-9_-]{0,62})="([a-z0-9_-]{0,63})"$')
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
BASIC_FIELDS = ("name", "startTime", "endTime", "state", "workflowRevisionId")


class FakeWorkflows(FakeRestApi):
    discovery_name = "workflowexecutions.v1"
    domain = "workflowexecutions.googleapis.com"
    creating_methods = frozenset({CREATE})

    def __init__(self, metadata: FakeMetadataServer):
        super().__init__(metadata)
        self.token_field = "idempotency_key"
        self.workflows: set[str] = set()
        self.executions: list[dict[str, Any]] = []  # oldest first
        self.list_views: list[str] = []
        self.list_filters: list[str] = []

    def add_workflow(self, name: str) -> None:
        with self.lock:
            self.workflows.add(name)

    def add_unrelated_executions(self, workflow: str, count: int) -> None:
        """Executions of other runs (another token), so a lookup must page and match."""
        for _ in range(count):
            token = uuid.uuid4().hex + uuid.uuid4().hex
            self._store(
                workflow, {"argument": json.dumps({"idempotency_key": token}), "labels": {"runonce-run-id": token[:63]}}
            )

    def finish(self, name: str, state: str = "SUCCEEDED") -> None:
        """The execution ends (SUCCEEDED, FAILED, CANCELLED), or moves to any other state."""
        with self.lock:
            [execution] = [e for e in self.executions if e["name"] == name]
            execution["state"] = state
            if state in FINAL:
                execution["endTime"] = now_rfc3339()

    def handle(self, method_id: str, params: dict[str, str], request: Request) -> dict[str, Any]:
        if method_id == CREATE:
            return self._create(params["parent"], request.json() or {})
        if method_id == LIST:
            return self._list(params["parent"], request.query)
        if method_id == GET:
            return self._get(params["name"])
        self.violation(f"{method_id}: not expected from runonce")
        raise ApiError("UNIMPLEMENTED", f"{method_id} is not faked")

    def _workflow(self, name: str) -> None:
        with self.lock:
            if name not in self.workflows:
                raise ApiError("NOT_FOUND", f"Resource '{name}' was not found")

    def _create(self, workflow: str, execution: dict[str, Any]) -> dict[str, Any]:
        self._workflow(workflow)
        text = execution.get("argument") or ""
        if len(text.encode()) > 32 * 1024:
            raise ApiError("INVALID_ARGUMENT", "argument exceeds 32KB")
        try:
            argument = json.loads(text or "null")
        except ValueError:
            self.violation(f"{CREATE}: argument is not JSON")
            raise ApiError("INVALID_ARGUMENT", "argument is not valid JSON") from None
        if argument is not None and not isinstance(argument, dict):
            raise ApiError("INVALID_ARGUMENT", "argument must be a JSON object")
        try:
            check_labels(execution.get("labels"))
        except ApiError as exc:
            self.violation(f"{CREATE}: {exc.message}")
            raise
        stored = self._store(workflow, execution)
        self.record_created(CREATE, stored["name"], (argument or {}).get(self.token_field), {"execution": stored})
        return stored

    def _store(self, workflow: str, execution: dict[str, Any]) -> dict[str, Any]:
        stored = {
            "name": f"{workflow}/executions/{uuid.uuid4()}",
            "argument": execution.get("argument") or "",
            "labels": dict(execution.get("labels") or {}),
            "state": "ACTIVE",
            "startTime": now_rfc3339(),
            "workflowRevisionId": "000001-abc",
        }
        if execution.get("callLogLevel"):
            stored["callLogLevel"] = execution["callLogLevel"]
        with self.lock:
            self.executions.append(stored)
        return dict(stored)

    def _list(self, workflow: str, query: dict[str, list[str]]) -> dict[str, Any]:
        self._workflow(workflow)
        text = (query.get("filter") or [""])[0]
        view = (query.get("view") or ["BASIC"])[0]
        with self.lock:
            self.list_views.append(view)
            self.list_filters.append(text)
            matching = [e for e in reversed(self.executions) if e["name"].startswith(f"{workflow}/executions/")]
        for term in [t.strip() for t in text.split(" AND ")] if text else []:
            match = FILTER_TERM.match(term)
            if not match:
                raise ApiError("INVALID_ARGUMENT", f"invalid filter {text!r}")
            matching = [e for e in matching if e["labels"].get(match.group(1)) == match.group(2)]
        full = view == "FULL"
        size = min(int((query.get("pageSize") or ["100"])[0] or 100), 100 if full else 1000)
        start = int((query.get("pageToken") or ["0"])[0] or 0)
        page = [e if full else {k: e[k] for k in BASIC_FIELDS if k in e} for e in matching[start : start + size]]
        answer: dict[str, Any] = {"executions": page}
        if start + size < len(matching):
            answer["nextPageToken"] = str(start + size)
        return answer

    def _get(self, name: str) -> dict[str, Any]:
        with self.lock:
            for execution in self.executions:
                if execution["name"] == name:
                    return dict(execution)
        raise ApiError("NOT_FOUND", f"Execution {name} not found")
