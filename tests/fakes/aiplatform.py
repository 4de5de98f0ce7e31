"""Fake Vertex AI API v1 (REST): projects.locations.pipelineJobs.create and .get, checked against
`aiplatform.v1.json` (see `jobs.FakeJobsApi`), and what Vertex enforces beyond it: `pipelineJobId`
fewer than 128 characters of a-z 0-9 -, starting with a letter; a pipelineSpec or a templateUri.
Pipeline jobs start PIPELINE_STATE_PENDING."""

from __future__ import annotations

import re
from typing import Any

from .jobs import FakeJobsApi
from .rest import ApiError, now_rfc3339

CREATE = "aiplatform.projects.locations.pipelineJobs.create"
GET = "aiplatform.projects.locations.pipelineJobs.get"


class FakeAiPlatform(FakeJobsApi):
    discovery_name = "aiplatform.v1"
    domain = "aiplatform.googleapis.com"
    create_method = CREATE
    get_method = GET
    collection = "pipelineJobs"
    id_param = "pipelineJobId"
    id_pattern = re.compile(r"[a-z][-a-z0-9]{0,126}")
    id_rule = "must be less than 128 characters, valid characters are /[a-z][0-9]-/, starting with a letter"
    initial_state = "PIPELINE_STATE_PENDING"
    final_state = "PIPELINE_STATE_SUCCEEDED"

    def check_body(self, body: dict[str, Any]) -> None:
        if not body.get("pipelineSpec") and not body.get("templateUri"):
            raise ApiError("INVALID_ARGUMENT", "PipelineJob needs a pipeline_spec or a template_uri")

    def new_resource(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        now = now_rfc3339()
        return {**body, "name": name, "state": self.initial_state, "createTime": now, "updateTime": now}

    def parameters_of(self, name: str) -> dict[str, Any]:
        with self.lock:
            return (self.resources[name].get("runtimeConfig") or {}).get("parameterValues") or {}
