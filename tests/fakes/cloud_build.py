"""Fake Cloud Build API v1 (REST): triggers.run, triggers.get, builds.list and builds.get
(regional paths). A build is QUEUED until the test moves it on (`set_status`: WORKING, SUCCESS, …).

Requests are checked against `cloudbuild.v1.json`. `builds.list` understands only the filter terms
Cloud Build documents and runonce uses (`trigger_id="…"`, `create_time>="…"`, joined by AND) and
rejects anything else with INVALID_ARGUMENT, as the real API rejects filters it cannot parse.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

from .http_server import Request
from .metadata import FakeMetadataServer
from .rest import ApiError, FakeRestApi, now_rfc3339

RUN = "cloudbuild.projects.locations.triggers.run"
GET_TRIGGER = "cloudbuild.projects.locations.triggers.get"
LIST = "cloudbuild.projects.locations.builds.list"
GET_BUILD = "cloudbuild.projects.locations.builds.get"

_TERM = re.compile(r'^(trigger_id)="([^"]+)"$|^(create_time)>="([^"]+)"$')


def _time(text: str) -> datetime:
    return datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", text).replace("Z", "+00:00"))


class FakeCloudBuild(FakeRestApi):
    discovery_name = "cloudbuild.v1"
    domain = "cloudbuild.googleapis.com"
    creating_methods = frozenset({RUN})

    def __init__(self, metadata: FakeMetadataServer, token_substitution: str = "_IDEMPOTENCY_KEY"):
        super().__init__(metadata)
        self.token_substitution = token_substitution
        self.triggers: dict[str, dict[str, Any]] = {}  # by full name (with id and with name)
        self.builds: list[dict[str, Any]] = []  # oldest first

    def add_trigger(self, name: str) -> str:
        """Register a trigger by its full name (its last part is its name); returns its id."""
        project, location, short = name.split("/")[1], name.split("/")[3], name.split("/")[-1]
        trigger_id = str(uuid.uuid4())
        trigger = {"id": trigger_id, "name": short, "resourceName": name, "createTime": now_rfc3339()}
        with self.lock:
            self.triggers[name] = trigger
            self.triggers[f"projects/{project}/locations/{location}/triggers/{trigger_id}"] = trigger
        return trigger_id

    def handle(self, method_id: str, params: dict[str, str], request: Request) -> dict[str, Any]:
        if method_id == RUN:
            return self._run(params["name"], request.json() or {})
        if method_id == GET_TRIGGER:
            return dict(self._trigger(params["name"]))
        if method_id == LIST:
            return self._list(params["parent"], request.query)
        if method_id == GET_BUILD:
            return self._build(params["name"])
        self.violation(f"{method_id}: not expected from runonce")
        raise ApiError("UNIMPLEMENTED", f"{method_id} is not faked")

    def _trigger(self, name: str) -> dict[str, Any]:
        with self.lock:
            trigger = self.triggers.get(name)
        if trigger is None:
            raise ApiError("NOT_FOUND", f"trigger not found: {name}")
        return trigger

    def _run(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        trigger = self._trigger(name)
        project, location = name.split("/")[1], name.split("/")[3]
        if body.get("projectId") not in (None, project):
            raise ApiError("INVALID_ARGUMENT", f"projectId {body['projectId']!r} does not match the trigger's name")
        if body.get("triggerId") not in (None, name.split("/")[-1]):
            raise ApiError("INVALID_ARGUMENT", f"triggerId {body['triggerId']!r} does not match the trigger's name")
        source = body.get("source") or {}
        revisions = [k for k in ("branchName", "tagName", "commitSha") if k in source]
        if len(revisions) > 1:
            raise ApiError(
                "INVALID_ARGUMENT", f"only one of branchName, tagName, commitSha may be set, got {revisions}"
            )
        substitutions = source.get("substitutions") or {}
        for key in substitutions:
            if not re.fullmatch(r"_[A-Z0-9_]+", key):
                raise ApiError(
                    "INVALID_ARGUMENT",
                    f"invalid substitution key {key!r}: user-defined substitutions must match ^_[A-Z0-9_]+$",
                )
        build_id = str(uuid.uuid4())
        build = {
            "id": build_id,
            "name": f"projects/{project}/locations/{location}/builds/{build_id}",
            "projectId": project,
            "buildTriggerId": trigger["id"],
            "status": "QUEUED",
            "createTime": now_rfc3339(),
            "substitutions": {**substitutions, "TRIGGER_NAME": trigger["name"]},
        }
        with self.lock:
            self.builds.append(build)
        self.record_created(
            RUN, build["name"], substitutions.get(self.token_substitution), {"build": build, "body": body}
        )
        return {
            "name": f"projects/{project}/locations/{location}/operations/{build_id}",
            "metadata": {
                "@type": "type.googleapis.com/google.devtools.cloudbuild.v1.BuildOperationMetadata",
                "build": build,
            },
        }

    def set_status(self, name: str, status: str) -> None:
        with self.lock:
            [build] = [b for b in self.builds if b["name"] == name]
            build["status"] = status
            if status not in ("PENDING", "QUEUED", "WORKING"):
                build["finishTime"] = now_rfc3339()

    def finish(self, name: str, status: str = "SUCCESS") -> None:
        self.set_status(name, status)

    def _build(self, name: str) -> dict[str, Any]:
        with self.lock:
            for build in self.builds:
                if build["name"] == name:
                    return dict(build)
        raise ApiError("NOT_FOUND", f"Build {name.split('/')[-1]} not found")

    def add_unrelated_builds(self, trigger_name: str, count: int) -> None:
        trigger = self._trigger(trigger_name)
        project, location = trigger_name.split("/")[1], trigger_name.split("/")[3]
        with self.lock:
            for _ in range(count):
                build_id = str(uuid.uuid4())
                self.builds.append(
                    {
                        "id": build_id,
                        "name": f"projects/{project}/locations/{location}/builds/{build_id}",
                        "projectId": project,
                        "buildTriggerId": trigger["id"],
                        "status": "SUCCESS",
                        "createTime": now_rfc3339(),
                        "substitutions": {self.token_substitution: uuid.uuid4().hex},
                    }
                )

    def _list(self, parent: str, query: dict[str, list[str]]) -> dict[str, Any]:
        trigger_id, since = None, None
        text = query.get("filter", [""])[0]
        for term in [t.strip() for t in text.split(" AND ")] if text else []:
            match = _TERM.match(term)
            if not match:
                raise ApiError("INVALID_ARGUMENT", f"invalid filter term {term!r}")
            if match.group(1):
                trigger_id = match.group(2)
            else:
                since = _time(match.group(4))
        with self.lock:
            builds = [
                b
                for b in reversed(self.builds)
                if b["name"].startswith(parent + "/builds/")
                and (trigger_id is None or b["buildTriggerId"] == trigger_id)
                and (since is None or _time(b["createTime"]) >= since)
            ]
        size = int(query.get("pageSize", ["50"])[0]) or 50
        start = int(query.get("pageToken", ["0"])[0] or 0)
        answer: dict[str, Any] = {"builds": builds[start : start + size]}
        if start + size < len(builds):
            answer["nextPageToken"] = str(start + size)
        return answer
