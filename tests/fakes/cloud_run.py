"""Fake Cloud Run Admin API v2 (REST): jobs.run, jobs.executions.list and .get.

An execution runs (`runningCount` = its task count, no `completionTime`) until the test calls
`finish(name)`, which sets `completionTime` and the succeeded/failed/cancelled counts as Cloud Run does.

Requests are checked against `run.v2.json`. `jobs.run` applies the container overrides to a copy of
the job's template and answers the long-running operation whose metadata is the new Execution
(as Cloud Run does: the execution's name is known at once).
"""

from __future__ import annotations

import copy
import itertools
import random
import string
import uuid
from typing import Any

from .http_server import Request
from .metadata import FakeMetadataServer
from .rest import ApiError, FakeRestApi, now_rfc3339

RUN = "run.projects.locations.jobs.run"
LIST = "run.projects.locations.jobs.executions.list"
GET = "run.projects.locations.jobs.executions.get"


class FakeCloudRun(FakeRestApi):
    discovery_name = "run.v2"
    domain = "run.googleapis.com"
    creating_methods = frozenset({RUN})

    def __init__(self, metadata: FakeMetadataServer, token_env: str = "IDEMPOTENCY_KEY"):
        super().__init__(metadata)
        self.token_env = token_env
        self.jobs: dict[str, dict[str, Any]] = {}
        self.executions: list[dict[str, Any]] = []  # oldest first
        self.page_size_cap = 100
        self._ids = itertools.count(1)

    def add_job(self, name: str, containers: list[str] | None = None, env: dict[str, str] | None = None) -> None:
        template = {
            "containers": [
                {
                    "name": c,
                    "image": f"us-docker.pkg.dev/cloudrun/container/{c}:latest",
                    "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                }
                for c in (containers or ["job"])
            ],
            "maxRetries": 3,
            "timeout": "600s",
        }
        with self.lock:
            self.jobs[name] = {"template": template, "taskCount": 1}

    def add_unrelated_executions(self, job: str, count: int) -> None:
        """Executions of other runs (another token), so reconciliation has to page and match."""
        for _ in range(count):
            self._create_execution(
                job,
                {"containerOverrides": [{"env": [{"name": self.token_env, "value": uuid.uuid4().hex}]}]},
                record=False,
            )

    def handle(self, method_id: str, params: dict[str, str], request: Request) -> dict[str, Any]:
        if method_id == RUN:
            return self._run(params["name"], request.json() or {})
        if method_id == LIST:
            return self._list(params["parent"], request.query)
        if method_id == GET:
            return self._get(params["name"])
        self.violation(f"{method_id}: not expected from runonce")
        raise ApiError("UNIMPLEMENTED", f"{method_id} is not faked")

    def _job(self, name: str) -> dict[str, Any]:
        job = self.jobs.get(name)
        if job is None:
            short, region = name.split("/")[-1], name.split("/")[3]
            raise ApiError(
                "NOT_FOUND",
                f"Resource '{short}' of kind 'JOB' in region '{region}' in project "
                f"'{name.split('/')[1]}' does not exist.",
            )
        return job

    def _run(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        overrides = body.get("overrides") or {}
        execution = self._create_execution(name, overrides, record=True)
        parts = name.split("/")
        operation = f"projects/{parts[1]}/locations/{parts[3]}/operations/{uuid.uuid4()}"
        metadata = {"@type": "type.googleapis.com/google.cloud.run.v2.Execution", **execution}
        return {"name": operation, "metadata": metadata, "done": False}

    def _create_execution(self, job_name: str, overrides: dict[str, Any], record: bool) -> dict[str, Any]:
        with self.lock:
            job = self._job(job_name)
            template = copy.deepcopy(job["template"])
            containers = template["containers"]
            for override in overrides.get("containerOverrides") or []:
                if "name" in override:
                    matching = [c for c in containers if c["name"] == override["name"]]
                    if not matching:
                        raise ApiError("INVALID_ARGUMENT", f"container {override['name']!r} not found in the job")
                    container = matching[0]
                elif len(containers) == 1:
                    container = containers[0]
                else:
                    raise ApiError(
                        "INVALID_ARGUMENT", "container overrides must name the container of a multi-container job"
                    )
                for var in override.get("env") or []:
                    if not var.get("name"):
                        raise ApiError("INVALID_ARGUMENT", "env var name must not be empty")
                    container["env"] = [v for v in container["env"] if v["name"] != var["name"]] + [var]
                if override.get("clearArgs"):
                    container.pop("args", None)
                if override.get("args"):
                    container["args"] = list(override["args"])
            if "timeout" in overrides:
                template["timeout"] = overrides["timeout"]
            task_count = overrides.get("taskCount", job["taskCount"])
            if task_count < 1:
                raise ApiError("INVALID_ARGUMENT", "taskCount must be at least 1")
            short = job_name.split("/")[-1]
            suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
            execution = {
                "name": f"{job_name}/executions/{short}-{suffix}",
                "uid": str(uuid.uuid4()),
                "generation": str(next(self._ids)),
                "createTime": now_rfc3339(),
                "job": short,
                "taskCount": task_count,
                "parallelism": task_count,
                "template": template,
                "reconciling": True,
                "etag": f'"{uuid.uuid4().hex[:8]}"',
                "startTime": now_rfc3339(),
                "runningCount": task_count,
            }
            self.executions.append(execution)
        if record:
            env = {v["name"]: v.get("value") for c in template["containers"] for v in c.get("env", [])}
            self.record_created(
                RUN, execution["name"], env.get(self.token_env), {"execution": execution, "overrides": overrides}
            )
        return execution

    def finish(self, name: str, outcome: str = "succeeded") -> None:
        """The execution completes: every task succeeded, failed or was cancelled."""
        with self.lock:
            [execution] = [e for e in self.executions if e["name"] == name]
            execution.pop("runningCount", None)
            execution[f"{outcome}Count"] = execution["taskCount"]
            execution["completionTime"] = now_rfc3339()
            execution["reconciling"] = False

    def _list(self, parent: str, query: dict[str, list[str]]) -> dict[str, Any]:
        with self.lock:
            self._job(parent)
            newest_first = [e for e in reversed(self.executions) if e["name"].startswith(parent + "/executions/")]
        size = min(int(query.get("pageSize", ["100"])[0]) or 100, self.page_size_cap)
        start = int(query.get("pageToken", ["0"])[0] or 0)
        page = newest_first[start : start + size]
        answer: dict[str, Any] = {"executions": page}
        if start + size < len(newest_first):
            answer["nextPageToken"] = str(start + size)
        return answer

    def _get(self, name: str) -> dict[str, Any]:
        with self.lock:
            for execution in self.executions:
                if execution["name"] == name:
                    return execution
        raise ApiError("NOT_FOUND", f"Execution {name.split('/')[-1]} not found")
