"""Fake BigQuery API v2 (REST): jobs.insert and jobs.get.

Requests are checked against `bigquery.v2.json` (the base class), then against what BigQuery
itself enforces beyond the schema: job ids `[A-Za-z0-9_-]{1,1024}`, label keys and values, exactly
one of query/load/extract/copy, no query parameters in legacy SQL (BigQuery's default for
jobs.insert), named parameters all named, TIMESTAMP values that parse.

It dedupes as BigQuery does: a job id is taken once per project, and inserting it again answers
409 with BigQuery's error shape (`errors[].reason` = `duplicate`). Jobs start RUNNING; `finish()`
(or `done_on_create`) makes them DONE. Errors are BigQuery's shape, not AIP-193's: `{"error":
{code, message, errors: [{message, domain, reason}], status}}`.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

from .google_api import Step
from .http_server import Reply, Request
from .metadata import FakeMetadataServer
from .rest import ApiError, FakeRestApi

INSERT = "bigquery.jobs.insert"
GET = "bigquery.jobs.get"

# google.rpc code -> (BigQuery's errors[].reason, its domain)
REASONS = {
    "ALREADY_EXISTS": ("duplicate", "global"),
    "NOT_FOUND": ("notFound", "global"),
    "INVALID_ARGUMENT": ("invalid", "global"),
    "FAILED_PRECONDITION": ("invalid", "global"),
    "PERMISSION_DENIED": ("accessDenied", "global"),
    "UNAUTHENTICATED": ("required", "global"),
    "RESOURCE_EXHAUSTED": ("rateLimitExceeded", "usageLimits"),
    "INTERNAL": ("backendError", "global"),
    "UNAVAILABLE": ("backendError", "global"),
    "DEADLINE_EXCEEDED": ("backendError", "global"),
    "UNIMPLEMENTED": ("notImplemented", "global"),
}
STATUS_OF_HTTP = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
JOB_KINDS = ("query", "load", "extract", "copy")
_JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,1024}$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_TIMESTAMP = re.compile(
    r"^\d{4}-\d{1,2}-\d{1,2}([T ]\d{1,2}:\d{2}:\d{2}(\.\d{1,6})?)?( ?(Z|UTC|[+-]\d{1,2}(:\d{2})?))?$"
)


class FakeBigQuery(FakeRestApi):
    discovery_name = "bigquery.v2"
    domain = "bigquery.googleapis.com"
    creating_methods = frozenset({INSERT})

    def __init__(self, metadata: FakeMetadataServer):
        super().__init__(metadata)
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}  # by (project, job id)
        self.done_on_create = False

    # --- what tests drive -----------------------------------------------------------------------
    def finish(self, resource: str) -> None:
        """The job `PROJECT:LOCATION.JOB_ID` is DONE (as BigQuery says once it has run)."""
        with self.lock:
            for job in self.jobs.values():
                if job["id"] == resource:
                    job["status"] = {"state": "DONE"}
                    job["statistics"]["endTime"] = str(int(time.time() * 1000))
                    return
        raise KeyError(resource)

    def add_unrelated_jobs(self, project: str, count: int) -> None:
        """Jobs of other runs and other tools, so a lookup must find the run's own."""
        for _ in range(count):
            body = {
                "jobReference": {"projectId": project, "jobId": f"bquxjob_{uuid.uuid4().hex}", "location": "US"},
                "configuration": {"query": {"query": "SELECT 1", "useLegacySql": False}},
            }
            self._insert(project, body, record=False)

    # --- the API ----------------------------------------------------------------------------------
    def handle(self, method_id: str, params: dict[str, str], request: Request) -> dict[str, Any]:
        if method_id == INSERT:
            return self._insert(params["projectId"], request.json() or {}, record=True)
        if method_id == GET:
            location = (request.query.get("location") or ["US"])[0]
            return self._get(params["projectId"], params["jobId"], location)
        self.violation(f"{method_id}: not expected from runonce")
        raise ApiError("UNIMPLEMENTED", f"{method_id} is not faked")

    def _error(self, code: str, message: str, step: Step | None = None, status: int | None = None) -> Reply:
        """BigQuery's error shape; a scripted `http_status` (403 rateLimitExceeded) sets the code."""
        status = status or (step.status if step else None) or _http_status(code)
        reason, domain = REASONS.get(code, ("invalid", "global"))
        body = {
            "error": {
                "code": status,
                "message": message,
                "errors": [{"message": message, "domain": domain, "reason": reason}],
                "status": STATUS_OF_HTTP.get(status, code),
            }
        }
        headers = {"Retry-After": step.retry_after} if step and step.retry_after else {}
        return Reply(status, body, headers)

    def _insert(self, project: str, body: dict[str, Any], record: bool) -> dict[str, Any]:
        reference = body.get("jobReference") or {}
        job_id = reference.get("jobId") or f"job_{uuid.uuid4().hex}"
        location = reference.get("location") or "US"
        if reference.get("projectId", project) != project:
            raise ApiError(
                "INVALID_ARGUMENT",
                f"Project ID in the job reference ({reference['projectId']}) does not "
                f"match the project of the request ({project})",
            )
        if not _JOB_ID.match(job_id):
            raise ApiError(
                "INVALID_ARGUMENT",
                f'Invalid job ID "{job_id}". Job IDs must be alphanumeric (plus '
                "underscores and dashes) and must be at most 1024 characters long.",
            )
        configuration = body.get("configuration") or {}
        _check_configuration(configuration)
        with self.lock:
            existing = self.jobs.get((project, job_id))
            if existing is not None:
                raise ApiError("ALREADY_EXISTS", f"Already Exists: Job {existing['id']}")
            now = str(int(time.time() * 1000))
            job = {
                "kind": "bigquery#job",
                "etag": uuid.uuid4().hex[:16],
                "id": f"{project}:{location}.{job_id}",
                "selfLink": f"https://bigquery.googleapis.com/bigquery/v2/projects/{project}/jobs/{job_id}?location={location}",
                "user_email": "runonce@runonce-test.iam.gserviceaccount.com",
                "jobReference": {"projectId": project, "jobId": job_id, "location": location},
                "configuration": {**configuration, "jobType": next(k for k in JOB_KINDS if k in configuration).upper()},
                "status": {"state": "DONE" if self.done_on_create else "RUNNING"},
                "statistics": {"creationTime": now, "startTime": now},
            }
            self.jobs[(project, job_id)] = job
        if record:
            self.record_created(INSERT, job["id"], _token(configuration), {"body": body, "job": job})
        return job

    def _get(self, project: str, job_id: str, location: str) -> dict[str, Any]:
        with self.lock:
            job = self.jobs.get((project, job_id))
            if job is None or job["jobReference"]["location"].lower() != location.lower():
                raise ApiError("NOT_FOUND", f"Not found: Job {project}:{location}.{job_id}")
            return dict(job)


def _http_status(code: str) -> int:
    from .google_api import HTTP_STATUS_OF

    return HTTP_STATUS_OF[code]


def _token(configuration: dict[str, Any]) -> str | None:
    """The run_id a job carries: the `@run_id` parameter, else the label (the run_id's first 63)."""
    for parameter in (configuration.get("query") or {}).get("queryParameters") or []:
        if parameter.get("name") == "run_id":
            return parameter.get("parameterValue", {}).get("value")
    return (configuration.get("labels") or {}).get("runonce-run-id")


def _check_configuration(configuration: dict[str, Any]) -> None:
    """What BigQuery refuses beyond the discovery document's schema."""
    kinds = [kind for kind in JOB_KINDS if kind in configuration]
    if len(kinds) != 1:
        raise ApiError("INVALID_ARGUMENT", "Exactly one of query, load, extract or copy must be specified")
    for key, value in (configuration.get("labels") or {}).items():
        if not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
            raise ApiError(
                "INVALID_ARGUMENT",
                f"Label {key}:{value} is invalid: keys and values may contain only "
                "lowercase letters, numbers, underscores and dashes, at most 63 characters",
            )
    query = configuration.get("query")
    if query is None:
        return
    parameters = query.get("queryParameters") or []
    if parameters and query.get("useLegacySql", True):  # jobs.insert defaults to legacy SQL
        raise ApiError("INVALID_ARGUMENT", "Query parameters cannot be used in legacy SQL queries.")
    named = [p for p in parameters if p.get("name")]
    if query.get("parameterMode") == "NAMED" and len(named) != len(parameters):
        raise ApiError("INVALID_ARGUMENT", "Query parameters must all be named when parameterMode is NAMED")
    for parameter in parameters:
        kind = (parameter.get("parameterType") or {}).get("type")
        value = (parameter.get("parameterValue") or {}).get("value")
        if kind == "TIMESTAMP" and value is not None and not _TIMESTAMP.match(value):
            raise ApiError(
                "INVALID_ARGUMENT", f"Invalid TIMESTAMP value for parameter {parameter.get('name')}: {value}"
            )
