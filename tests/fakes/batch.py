"""Fake Cloud Batch API v1 (REST): projects.locations.jobs.create and .get, checked against
`batch.v1.json` (see `jobs.FakeJobsApi`), and what Batch enforces beyond it: the job id's rule
(at most 63 characters of a-z 0-9 -, starting with a letter, not ending with -), `requestId` a
UUID other than the zero UUID, exactly one task group with runnables. Jobs start QUEUED."""

from __future__ import annotations

import re
import uuid
from typing import Any

from .jobs import FakeJobsApi
from .rest import ApiError, now_rfc3339

CREATE = "batch.projects.locations.jobs.create"
GET = "batch.projects.locations.jobs.get"


class FakeBatch(FakeJobsApi):
    discovery_name = "batch.v1"
    domain = "batch.googleapis.com"
    create_method = CREATE
    get_method = GET
    collection = "jobs"
    id_param = "jobId"
    id_pattern = re.compile(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?")
    id_rule = (
        "at most 63 characters, starting with a lowercase letter; only lowercase letters, numbers "
        "and '-', which cannot be the first or the last one"
    )
    request_id_param = "requestId"
    request_id_pattern = re.compile(r"(?!0{8}-0{4}-0{4}-0{4}-0{12})[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
    initial_state = "QUEUED"
    final_state = "SUCCEEDED"
    state_path = ("status", "state")

    def check_body(self, body: dict[str, Any]) -> None:
        groups = body.get("taskGroups") or []
        if len(groups) != 1:
            raise ApiError("INVALID_ARGUMENT", "Only one TaskGroup is supported now")
        if not (groups[0].get("taskSpec") or {}).get("runnables"):
            raise ApiError("INVALID_ARGUMENT", "taskSpec.runnables is required")

    def new_resource(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        now = now_rfc3339()
        groups = [{**g, "name": f"{name}/taskGroups/group{i}"} for i, g in enumerate(body["taskGroups"])]
        return {
            **body,
            "name": name,
            "uid": f"{name.rsplit('/', 1)[1][:50]}-{uuid.uuid4().hex[:12]}",
            "taskGroups": groups,
            "status": {"state": self.initial_state, "runDuration": "0s"},
            "createTime": now,
            "updateTime": now,
        }

    def environment_of(self, name: str) -> dict[str, str]:
        """What every task of the job sees in its environment (the task group's)."""
        with self.lock:
            [group] = self.resources[name]["taskGroups"]
        return (group["taskSpec"].get("environment") or {}).get("variables") or {}
