"""Fake Dataproc API v1 (REST): projects.locations.batches.create and .get, checked against
`dataproc.v1.json` (see `jobs.FakeJobsApi`), and what Dataproc enforces beyond it: `batchId` 4-63
characters of a-z 0-9 -, `requestId` at most 40 of letters, digits, _ and -, exactly one workload.
The create answers a long-running operation whose metadata names the batch (Dataproc's
BatchOperationMetadata); batches start PENDING."""

from __future__ import annotations

import re
import uuid
from typing import Any

from .jobs import FakeJobsApi
from .rest import ApiError, now_rfc3339

CREATE = "dataproc.projects.locations.batches.create"
GET = "dataproc.projects.locations.batches.get"
WORKLOADS = ("pysparkBatch", "sparkBatch", "sparkRBatch", "sparkSqlBatch", "pysparkNotebookBatch")


class FakeDataproc(FakeJobsApi):
    discovery_name = "dataproc.v1"
    domain = "dataproc.googleapis.com"
    create_method = CREATE
    get_method = GET
    collection = "batches"
    id_param = "batchId"
    id_pattern = re.compile(r"[a-z0-9-]{4,63}")
    id_rule = "must be 4-63 characters; valid characters are /[a-z][0-9]-/"
    request_id_param = "requestId"
    request_id_pattern = re.compile(r"[A-Za-z0-9_-]{1,40}")
    initial_state = "PENDING"
    final_state = "SUCCEEDED"

    def check_body(self, body: dict[str, Any]) -> None:
        if len([kind for kind in WORKLOADS if kind in body]) != 1:
            raise ApiError("INVALID_ARGUMENT", "Batch must specify exactly one workload")

    def new_resource(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        parts = name.split("/")
        operation = f"projects/{parts[1]}/regions/{parts[3]}/operations/{uuid.uuid4()}"
        return {
            **body,
            "name": name,
            "uuid": str(uuid.uuid4()),
            "createTime": now_rfc3339(),
            "state": self.initial_state,
            "stateTime": now_rfc3339(),
            "creator": "runonce@runonce-test.iam.gserviceaccount.com",
            "operation": operation,
        }

    def answer_of(self, resource: dict[str, Any]) -> dict[str, Any]:
        metadata = {
            "@type": "type.googleapis.com/google.cloud.dataproc.v1.BatchOperationMetadata",
            "batch": resource["name"],
            "batchUuid": resource["uuid"],
            "createTime": resource["createTime"],
            "operationType": "BATCH",
            "description": f"Batch job {resource['name'].rsplit('/', 1)[1]} submitted",
        }
        return {"name": resource["operation"], "metadata": metadata}

    def properties_of(self, name: str) -> dict[str, str]:
        with self.lock:
            return (self.resources[name].get("runtimeConfig") or {}).get("properties") or {}
