"""Fakes of two Google APIs that `google_api` routes call in the tests, each checking every request
against its discovery document (the base class) and enforcing what the API itself enforces beyond
it, with the API's own dedupe:

- Cloud Batch (`batch.v1`): jobs.create / jobs.get. The jobId must start with a lowercase letter,
  at most 63 characters of a-z 0-9 -, not ending in -. A taken jobId answers 409 ALREADY_EXISTS.
  A requestId seen in the last hour answers the first request's Job again. Jobs start QUEUED;
  `finish(name)` makes them SUCCEEDED.
- Dataproc Serverless (`dataproc.v1`): batches.create / batches.get. The batchId is 4-63
  characters of a-z 0-9 -; the requestId at most 40 of A-Z a-z 0-9 _ -. A requestId seen before
  answers the first request's Operation again (until `forget_request_ids()`, Dataproc's own memory
  running out); a taken batchId answers 409 ALREADY_EXISTS. The answer is a long-running Operation
  whose metadata names the batch.

`created_for(handle)` lists the resources created with that jobId / batchId.
"""

from __future__ import annotations

import copy
import re
import uuid
from typing import Any, ClassVar

from .http_server import Request
from .metadata import FakeMetadataServer
from .rest import ApiError, FakeRestApi, now_rfc3339

BATCH_CREATE = "batch.projects.locations.jobs.create"
BATCH_GET = "batch.projects.locations.jobs.get"
DATAPROC_CREATE = "dataproc.projects.locations.batches.create"
DATAPROC_GET = "dataproc.projects.locations.batches.get"

_BATCH_JOB_ID = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")
_DATAPROC_BATCH_ID = re.compile(r"^[a-z0-9][a-z0-9-]{2,61}[a-z0-9]$")
_DATAPROC_REQUEST_ID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


class FakeBatch(FakeRestApi):
    discovery_name = "batch.v1"
    domain = "batch.googleapis.com"
    creating_methods: ClassVar[set[str]] = {BATCH_CREATE}

    def __init__(self, metadata: FakeMetadataServer):
        super().__init__(metadata)
        self.jobs: dict[str, dict[str, Any]] = {}
        self.request_ids: dict[str, dict[str, Any]] = {}

    def finish(self, name: str, state: str = "SUCCEEDED") -> None:
        with self.lock:
            self.jobs[name]["status"] = {"state": state}

    def handle(self, method_id: str, params: dict[str, str], request: Request) -> dict[str, Any]:
        if method_id == BATCH_CREATE:
            query = {k: v[0] for k, v in request.query.items()}
            return self._create(params["parent"], query.get("jobId"), query.get("requestId"), request.json() or {})
        if method_id == BATCH_GET:
            with self.lock:
                job = self.jobs.get(params["name"])
                if job is None:
                    raise ApiError("NOT_FOUND", f'Job "{params["name"]}" not found')
                return copy.deepcopy(job)
        self.violation(f"{method_id}: not expected from runonce")
        raise ApiError("UNIMPLEMENTED", f"{method_id} is not faked")

    def _create(self, parent: str, job_id: str | None, request_id: str | None, body: dict[str, Any]) -> dict[str, Any]:
        if job_id is not None and not _BATCH_JOB_ID.match(job_id):
            raise ApiError(
                "INVALID_ARGUMENT",
                f"job_id {job_id!r}: at most 63 characters, start with a lowercase letter, only a-z 0-9 -",
            )
        if not body.get("taskGroups"):
            raise ApiError("INVALID_ARGUMENT", "job must have at least one task group")
        with self.lock:
            if request_id and request_id in self.request_ids:
                return copy.deepcopy(self.request_ids[request_id])
            name = f"{parent}/jobs/{job_id or 'j-' + uuid.uuid4().hex[:20]}"
            if name in self.jobs:
                raise ApiError("ALREADY_EXISTS", f'Job "{name}" already exists')
            job = {
                **copy.deepcopy(body),
                "name": name,
                "uid": f"j-{uuid.uuid4()}",
                "status": {"state": "QUEUED"},
                "createTime": now_rfc3339(),
            }
            self.jobs[name] = job
            if request_id:
                self.request_ids[request_id] = job
        self.record_created(BATCH_CREATE, name, job_id, {"body": body, "job": job})
        return copy.deepcopy(job)


class FakeDataproc(FakeRestApi):
    discovery_name = "dataproc.v1"
    domain = "dataproc.googleapis.com"
    creating_methods: ClassVar[set[str]] = {DATAPROC_CREATE}

    def __init__(self, metadata: FakeMetadataServer):
        super().__init__(metadata)
        self.batches: dict[str, dict[str, Any]] = {}
        self.request_ids: dict[str, dict[str, Any]] = {}

    def forget_request_ids(self) -> None:
        """Dataproc's memory of request ids runs out: a re-sent create meets the batchId instead."""
        with self.lock:
            self.request_ids.clear()

    def handle(self, method_id: str, params: dict[str, str], request: Request) -> dict[str, Any]:
        if method_id == DATAPROC_CREATE:
            query = {k: v[0] for k, v in request.query.items()}
            return self._create(params["parent"], query.get("batchId"), query.get("requestId"), request.json() or {})
        if method_id == DATAPROC_GET:
            with self.lock:
                batch = self.batches.get(params["name"])
                if batch is None:
                    raise ApiError("NOT_FOUND", f"Not found: Batch {params['name']}")
                return copy.deepcopy(batch)
        self.violation(f"{method_id}: not expected from runonce")
        raise ApiError("UNIMPLEMENTED", f"{method_id} is not faked")

    def _create(
        self, parent: str, batch_id: str | None, request_id: str | None, body: dict[str, Any]
    ) -> dict[str, Any]:
        if batch_id is not None and not _DATAPROC_BATCH_ID.match(batch_id):
            raise ApiError("INVALID_ARGUMENT", f"Batch id {batch_id!r} must be 4-63 characters of [a-z0-9-]")
        if request_id is not None and not _DATAPROC_REQUEST_ID.match(request_id):
            raise ApiError("INVALID_ARGUMENT", f"Request id {request_id!r}: at most 40 of [A-Za-z0-9_-]")
        if not any(key in body for key in ("pysparkBatch", "sparkBatch", "sparkSqlBatch", "sparkRBatch")):
            raise ApiError("INVALID_ARGUMENT", "Batch must specify a batch config")
        with self.lock:
            if request_id and request_id in self.request_ids:
                return copy.deepcopy(self.request_ids[request_id])
            name = f"{parent}/batches/{batch_id or uuid.uuid4().hex}"
            if name in self.batches:
                raise ApiError("ALREADY_EXISTS", f"Already exists: Failed to create batch: Batch {name}")
            batch = {
                **copy.deepcopy(body),
                "name": name,
                "uuid": str(uuid.uuid4()),
                "state": "PENDING",
                "createTime": now_rfc3339(),
            }
            self.batches[name] = batch
            region = parent.split("/")[3]
            operation = {
                "name": f"projects/{parent.split('/')[1]}/regions/{region}/operations/{uuid.uuid4()}",
                "metadata": {
                    "@type": "type.googleapis.com/google.cloud.dataproc.v1.BatchOperationMetadata",
                    "batch": name,
                    "batchUuid": batch["uuid"],
                    "operationType": "BATCH",
                },
            }
            if request_id:
                self.request_ids[request_id] = operation
        self.record_created(DATAPROC_CREATE, name, batch_id, {"body": body, "batch": batch})
        return copy.deepcopy(operation)
