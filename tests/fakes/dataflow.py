"""Fake Dataflow API v1b3 (REST): projects.locations.flexTemplates.launch, projects.locations.jobs.list
and .get, checked against `dataflow.v1b3.json`, and what Dataflow enforces beyond it: the job name's
pattern `[a-z]([-a-z0-9]{0,1022}[a-z0-9])?`, label keys and values, a template to launch.

It dedupes as Dataflow does, which is only partly: a job name is refused (409 ALREADY_EXISTS) while
a job of that name is *active*; once it has finished, the same name launches a second job. Jobs
start JOB_STATE_QUEUED; `finish()` makes them JOB_STATE_DONE (or the state given). `jobs.list` takes
the `name` filter and pages (`page_size_cap`). Resources are `projects/P/locations/L/jobs/ID`;
what was created is recorded with the label `runonce-run-id` as its token.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar

from .http_server import Request
from .jobs import check_labels
from .metadata import FakeMetadataServer
from .rest import ApiError, FakeRestApi, now_rfc3339

LAUNCH = "dataflow.projects.locations.flexTemplates.launch"
LIST = "dataflow.projects.locations.jobs.list"
GET = "dataflow.projects.locations.jobs.get"
NAME = re.compile(r"[a-z]([-a-z0-9]{0,1022}[a-z0-9])?")
TERMINAL = {"JOB_STATE_DONE", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_UPDATED", "JOB_STATE_DRAINED"}


class FakeDataflow(FakeRestApi):
    discovery_name = "dataflow.v1b3"
    domain = "dataflow.googleapis.com"
    creating_methods: ClassVar[set[str]] = {LAUNCH}

    def __init__(self, metadata: FakeMetadataServer):
        super().__init__(metadata)
        self.resources: dict[str, dict[str, Any]] = {}  # by projects/P/locations/L/jobs/ID, oldest first
        self.page_size_cap = 25
        self.lagging_lists = 0

    def reset(self) -> None:
        super().reset()
        with self.lock:
            self.lagging_lists = 0

    def pending_steps(self) -> int:
        return super().pending_steps() + self.lagging_lists

    # --- what tests drive -----------------------------------------------------------------------
    def finish(self, name: str, state: str = "JOB_STATE_DONE") -> None:
        with self.lock:
            job = self.resources[name]
            job["currentState"] = state
            job["currentStateTime"] = now_rfc3339()

    def state(self, name: str) -> str:
        with self.lock:
            return self.resources[name]["currentState"]

    def lag_lists(self, times: int) -> None:
        """The next `times` listings do not show the jobs yet (an index that lags the launch)."""
        with self.lock:
            self.lagging_lists += times

    def add_other_jobs(self, project: str, location: str, count: int, name: str | None = None) -> None:
        """Jobs of other runs (or, with `name`, finished jobs of that name), so a lookup must page."""
        for _ in range(count):
            job = self._new_job(project, location, name or f"other-{uuid.uuid4().hex[:12]}", {})
            job["currentState"] = "JOB_STATE_DONE"

    # --- the API ----------------------------------------------------------------------------------
    def handle(self, method_id: str, params: dict[str, str], request: Request) -> dict[str, Any]:
        project, location = params["projectId"], params["location"]
        if method_id == LAUNCH:
            return self._launch(project, location, request.json() or {})
        if method_id == LIST:
            return self._list(project, location, request.query)
        if method_id == GET:
            return self._get(f"projects/{project}/locations/{location}/jobs/{params['jobId']}")
        self.violation(f"{method_id}: not expected from runonce")
        raise ApiError("UNIMPLEMENTED", f"{method_id} is not faked")

    def _launch(self, project: str, location: str, body: dict[str, Any]) -> dict[str, Any]:
        launch = body.get("launchParameter") or {}
        if body.get("validateOnly"):
            self.violation(f"{LAUNCH}: validateOnly launches nothing")
        name = launch.get("jobName") or ""
        if not NAME.fullmatch(name):
            raise ApiError(
                "INVALID_ARGUMENT",
                f"(jobName) The job name {name!r} is invalid: it must match [a-z]([-a-z0-9]{{0,1022}}[a-z0-9])?",
            )
        if not launch.get("containerSpecGcsPath") and not launch.get("containerSpec"):
            raise ApiError("INVALID_ARGUMENT", "Either container_spec_gcs_path or container_spec must be set")
        labels = (launch.get("environment") or {}).get("additionalUserLabels") or {}
        check_labels(labels, "additionalUserLabels")
        with self.lock:
            active = [j for j in self.resources.values() if j["name"] == name and j["currentState"] not in TERMINAL]
            if active:
                raise ApiError(
                    "ALREADY_EXISTS",
                    f"There is already an active job named {name} with id: {active[0]['id']}. If you want to "
                    "submit a second job, try again by setting a different name.",
                )
            job = self._new_job(project, location, name, labels)
            resource = f"projects/{project}/locations/{location}/jobs/{job['id']}"
        self.record_created(LAUNCH, resource, labels.get("runonce-run-id"), {"body": body, "job": job})
        return {"job": dict(job)}

    def _new_job(self, project: str, location: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
        now = datetime.now(UTC)
        job_id = now.strftime("%Y-%m-%d_%H_%M_%S-") + str(uuid.uuid4().int)[:19]
        job = {
            "id": job_id,
            "projectId": project,
            "location": location,
            "name": name,
            "type": "JOB_TYPE_BATCH",
            "currentState": "JOB_STATE_QUEUED",
            "currentStateTime": now_rfc3339(),
            "createTime": now_rfc3339(),
            "labels": dict(labels),
        }
        with self.lock:
            self.resources[f"projects/{project}/locations/{location}/jobs/{job_id}"] = job
        return job

    def _list(self, project: str, location: str, query: dict[str, list[str]]) -> dict[str, Any]:
        with self.lock:
            if self.lagging_lists:
                self.lagging_lists -= 1
                return {}
        name = (query.get("name") or [""])[0]
        state_filter = (query.get("filter") or ["ALL"])[0]
        with self.lock:
            jobs = [
                dict(j)
                for j in reversed(self.resources.values())
                if j["projectId"] == project and j["location"] == location and (not name or j["name"] == name)
            ]
        if state_filter == "ACTIVE":
            jobs = [j for j in jobs if j["currentState"] not in TERMINAL]
        elif state_filter == "TERMINATED":
            jobs = [j for j in jobs if j["currentState"] in TERMINAL]
        size = min(int((query.get("pageSize") or ["100"])[0]) or 100, self.page_size_cap)
        start = int((query.get("pageToken") or ["0"])[0] or 0)
        answer: dict[str, Any] = {"jobs": jobs[start : start + size]}
        if start + size < len(jobs):
            answer["nextPageToken"] = str(start + size)
        return answer

    def _get(self, name: str) -> dict[str, Any]:
        with self.lock:
            job = self.resources.get(name)
            if job is None:
                raise ApiError("NOT_FOUND", f"(job) Job {name.rsplit('/', 1)[1]} not found")
            return dict(job)

    def jobs_named(self, name: str) -> list[str]:
        with self.lock:
            return [resource for resource, job in self.resources.items() if job["name"] == name]
