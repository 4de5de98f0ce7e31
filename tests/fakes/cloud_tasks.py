"""Fake Cloud Tasks API v2 (REST): tasks.create and tasks.get, as runonce's `cloud_tasks_task` target
calls them (not Cloud Tasks *delivering* to runonce: that is tests/support/tasks_emulator.py).

Requests are checked against `cloudtasks.v2.json`, and against the rules the API documents beyond
it (a named task lives in the queue it is created in, its ID is 1-500 of `A-Za-z0-9_-`, a body only
with POST, PUT or PATCH, an http(s) URL, headers under 80 KB, a task under 100 KB); a request that
breaks one is a violation, as runonce should never send it.

Dedupe by name, as Cloud Tasks does: a task is `queued` until it is done (`finish`); then `get`
answers 404 but `create` with its name still answers 409 ALREADY_EXISTS until the name is
forgotten (`forget`: the ~1 hour after the task ended has passed).
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from .google_api import HTTP_STATUS_OF
from .http_server import Reply, Request
from .metadata import FakeMetadataServer
from .rest import ApiError, FakeRestApi, now_rfc3339

CREATE = "cloudtasks.projects.locations.queues.tasks.create"
GET = "cloudtasks.projects.locations.queues.tasks.get"

EXISTS = "Requested entity already exists"
EXISTED_RECENTLY = "The task cannot be created because a task with this name existed too recently."
NO_TASK = "Requested entity was not found."
NO_QUEUE = "Queue does not exist. If you just created the queue, wait at least a minute for the queue to initialize."
TASK_ID = re.compile(r"^[A-Za-z0-9_-]{1,500}$")
BODY_METHODS = {"POST", "PUT", "PATCH"}
MAX_TASK_BYTES = 100 * 1024
MAX_HEADERS_BYTES = 80 * 1024


class FakeCloudTasks(FakeRestApi):
    discovery_name = "cloudtasks.v2"
    domain = "cloudtasks.googleapis.com"
    creating_methods = frozenset({CREATE})

    def __init__(self, metadata: FakeMetadataServer):
        super().__init__(metadata)
        self.queues: set[str] = set()
        self.tasks: dict[str, dict[str, Any]] = {}  # queued, by name
        self.ended: set[str] = set()  # done and deleted, name still remembered

    def add_queue(self, name: str) -> None:
        with self.lock:
            self.queues.add(name)

    def finish(self, name: str) -> None:
        """The task was delivered (or ran out of retries): Cloud Tasks deletes it, remembers its name."""
        with self.lock:
            del self.tasks[name]
            self.ended.add(name)

    def forget(self, name: str) -> None:
        """The name-memory window after the task ended has passed: the name may be used again."""
        with self.lock:
            self.ended.discard(name)

    def delivered(self, name: str) -> dict[str, Any]:
        """What the task would deliver: method, URL, headers and the decoded JSON body."""
        [created] = [c for c in self.created if c.resource == name]
        return created.data

    def handle(self, method_id: str, params: dict[str, str], request: Request) -> dict[str, Any]:
        if method_id == CREATE:
            return self._create(params["parent"], request.json() or {})
        if method_id == GET:
            return self._get(params["name"])
        self.violation(f"{method_id}: not expected from runonce")
        raise ApiError("UNIMPLEMENTED", f"{method_id} is not faked")

    def _error(self, code: str, message: str, step: Any = None, status: int | None = None) -> Reply:
        """Cloud Tasks answers a duplicate name and a missing task with the bare `google.rpc.Status`
        (no details), the shape clients match on."""
        if code in ("ALREADY_EXISTS", "NOT_FOUND") and step is None:
            status = HTTP_STATUS_OF[code]
            return Reply(status, {"error": {"code": status, "message": message, "status": code}})
        return super()._error(code, message, step, status)

    def _refuse(self, message: str) -> ApiError:
        self.violation(f"{CREATE}: {message}")
        return ApiError("INVALID_ARGUMENT", message)

    def _create(self, parent: str, body: dict[str, Any]) -> dict[str, Any]:
        task = body.get("task") or {}
        name = task.get("name")
        if name is None:
            raise self._refuse("runonce must name its tasks (task.name): unnamed tasks are not deduped")
        queue, _, task_id = name.rpartition("/tasks/")
        if queue != parent or not TASK_ID.match(task_id):
            raise self._refuse(f"task name {name!r} is not {parent}/tasks/ID with ID 1-500 of A-Za-z0-9_-")
        http = task.get("httpRequest")
        if http is None:
            raise self._refuse("the task has no httpRequest")
        self._check_http_request(http)
        if len(json.dumps(task).encode()) > MAX_TASK_BYTES:
            raise ApiError("INVALID_ARGUMENT", "Task size too large: the maximum task size is 100KB.")
        with self.lock:
            if parent not in self.queues:
                raise ApiError("NOT_FOUND", NO_QUEUE)
            if name in self.tasks:
                raise ApiError("ALREADY_EXISTS", EXISTS)
            if name in self.ended:
                raise ApiError("ALREADY_EXISTS", EXISTED_RECENTLY)
            now = now_rfc3339()
            stored = {
                "name": name,
                "httpRequest": {key: http[key] for key in ("url", "httpMethod") if key in http},
                "scheduleTime": now,
                "createTime": now,
                "dispatchDeadline": "600s",
                "view": "BASIC",
            }
            self.tasks[name] = stored
        headers = http.get("headers") or {}
        delivery = {
            "method": http.get("httpMethod", "POST"),
            "url": http["url"],
            "headers": headers,
            "oidcToken": http.get("oidcToken"),
            "body": json.loads(base64.b64decode(http["body"])) if http.get("body") else None,
        }
        self.record_created(CREATE, name, headers.get("Idempotency-Key"), delivery)
        return dict(stored)

    def _check_http_request(self, http: dict[str, Any]) -> None:
        if not str(http.get("url", "")).startswith(("http://", "https://")):
            raise self._refuse(f"httpRequest.url {http.get('url')!r} must begin with http:// or https://")
        if http.get("body") and http.get("httpMethod", "POST") not in BODY_METHODS:
            raise self._refuse(f"a body is allowed only with POST, PUT or PATCH, not {http.get('httpMethod')}")
        if "oidcToken" in http and "oauthToken" in http:
            raise self._refuse("set at most one of oidcToken and oauthToken")
        headers = http.get("headers") or {}
        if sum(len(k.encode()) + len(v.encode()) for k, v in headers.items()) >= MAX_HEADERS_BYTES:
            raise self._refuse("the headers are 80 KB or more")

    def _get(self, name: str) -> dict[str, Any]:
        with self.lock:
            if name.rpartition("/tasks/")[0] not in self.queues:
                raise ApiError("NOT_FOUND", NO_QUEUE)
            task = self.tasks.get(name)
        if task is None:
            raise ApiError("NOT_FOUND", NO_TASK)
        return dict(task)
