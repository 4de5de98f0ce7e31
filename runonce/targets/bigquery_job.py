"""`bigquery_job` target: one BigQuery job per run (BigQuery API v2 `jobs.insert`, REST).

BigQuery dedupes on the job id the caller picks, so runonce picks it from the run: `jobId` is
`runonce_<run_id>` (`job_id_for`). A retry after a lost answer inserts the same id again, and
BigQuery answers 409 ALREADY_EXISTS: the run's job exists, runonce reads it (`jobs.get`) and the
run completes with it. The job also carries the label `runonce-run-id` (the run_id's first 63
characters: label values hold at most 63).

Query jobs get two named parameters, `@run_id` (STRING) and `@schedule_time` (TIMESTAMP; NULL when
the run has no schedule time, as a Cloud Tasks run), so scheduled SQL can be idempotent itself:
`MERGE … WHERE day = DATE(@schedule_time)`. Named parameters need GoogleSQL: runonce sets
`useLegacySql: false` unless the route says otherwise, and refuses legacy SQL and positional
parameters at start-up.

Answers to `jobs.insert`, BigQuery's way (`error.errors[].reason`):

    409 duplicate                         the run's job exists: jobs.get, completed with it
    429, or 403 rateLimitExceeded          TargetThrottled (nothing created)
    400 / 401 / 403 / 404 (and other 4xx)  TargetFailed (nothing created)
    5xx (backendError), timeout after sending
                                          TargetOutcomeUnknown: BigQuery may have created the job
                                          before failing; the retry reconciles by jobs.get on the id
"""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from runonce.targets.base import (
    DispatchRequest,
    TargetError,
    TargetFailed,
    TargetOutcomeUnknown,
    TargetThrottled,
    parse_retry_after,
)
from runonce.targets.google import (
    PROJECT,
    RUN_ID_LABEL,
    GoogleRestTarget,
    check_labels,
    error_of,
    json_of,
    outcome_for_response,
    reconciling,
    run_id_label,
)
from runonce.targets.registry import Grant, TargetType

DEFAULT_ENDPOINT = "https://bigquery.googleapis.com"
JOB_KINDS = ("query", "load", "extract", "copy")
LOCATION_PATTERN = r"^(?:US|EU|us|eu|[a-z]+-[a-z]+[0-9]+)$"
MAX_LABELS = 64
RUN_PARAMETERS = ("run_id", "schedule_time")


def job_id_for(run_id: str) -> str:
    """The run's BigQuery job id: `runonce_` + the run_id (64 hex characters, as every run_id is;
    anything else is hashed so the id stays within BigQuery's `[A-Za-z0-9_-]{1,1024}`)."""
    if not re.fullmatch(r"[0-9a-f]{64}", run_id):
        run_id = hashlib.sha256(run_id.encode("utf-8")).hexdigest()
    return f"runonce_{run_id}"


def run_parameters(request: DispatchRequest) -> list[dict[str, Any]]:
    """`@run_id` and `@schedule_time` as named query parameters (an absent value is NULL)."""
    schedule_time = {"value": request.schedule_time} if request.schedule_time else {}
    return [
        {"name": "run_id", "parameterType": {"type": "STRING"}, "parameterValue": {"value": request.run_id}},
        {"name": "schedule_time", "parameterType": {"type": "TIMESTAMP"}, "parameterValue": schedule_time},
    ]


def _config_error(message: str, **context: Any) -> PydanticCustomError:
    return PydanticCustomError("bigquery_configuration", message, {k: repr(v) for k, v in context.items()})


def _check_query(query: Any) -> None:
    if not isinstance(query, dict) or not isinstance(query.get("query"), str) or not query["query"].strip():
        raise _config_error("configuration.query must be a mapping with the SQL text in 'query'")
    if query.get("useLegacySql") is True:
        raise _config_error(
            "configuration.query: legacy SQL takes no query parameters; runonce passes "
            "@run_id and @schedule_time, so use GoogleSQL (useLegacySql: false, the default here)"
        )
    if query.get("parameterMode", "NAMED") != "NAMED":
        raise _config_error(
            "configuration.query: parameterMode must be NAMED (runonce adds named parameters; got {mode})",
            mode=query["parameterMode"],
        )
    parameters = query.get("queryParameters", [])
    if not isinstance(parameters, list) or not all(isinstance(p, dict) for p in parameters):
        raise _config_error("configuration.query.queryParameters must be a list of parameters")
    for parameter in parameters:
        name = parameter.get("name")
        if not name:
            raise _config_error(
                "configuration.query.queryParameters: a positional parameter (no name); "
                "runonce adds named ones, and BigQuery does not mix the two"
            )
        if name in RUN_PARAMETERS:
            raise _config_error("configuration.query.queryParameters: {name} is set by runonce", name=name)


class BigQueryJobTargetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["bigquery_job"]
    project: str = Field(description="The project that runs the job (and is billed for it).")
    location: str = Field(description="Where the job runs: US, EU, or a region such as us-central1.")
    configuration: dict[str, Any] = Field(description="A JobConfiguration, as jobs.insert takes it.")

    @field_validator("project")
    @classmethod
    def _project(cls, value: str) -> str:
        if not re.fullmatch(PROJECT, value, flags=re.ASCII):
            raise _config_error(
                "must be a project ID (6-30 characters of a-z 0-9 -, starting with a letter) or number (got {value})",
                value=value,
            )
        return value

    @field_validator("location")
    @classmethod
    def _location(cls, value: str) -> str:
        if not re.fullmatch(LOCATION_PATTERN, value):
            raise _config_error(
                "must be a BigQuery location: US, EU, or a region such as us-central1 (got {value})", value=value
            )
        return value

    @field_validator("configuration")
    @classmethod
    def _configuration(cls, value: dict[str, Any]) -> dict[str, Any]:
        kinds = [kind for kind in JOB_KINDS if kind in value]
        if len(kinds) != 1:
            raise _config_error(
                f"must hold exactly one of query, load, extract, copy (got {', '.join(kinds) or 'none'})"
            )
        if not isinstance(value[kinds[0]], dict):
            raise _config_error(f"configuration.{kinds[0]} must be a mapping")
        if value.get("dryRun"):
            raise _config_error("dryRun creates no job, so a run would start nothing")
        labels = value.get("labels", {})
        if not isinstance(labels, dict):
            raise _config_error("configuration.labels must be a mapping")
        check_labels(labels, MAX_LABELS)
        if "query" in value:
            _check_query(value["query"])
        return value


def parse_resource(resource: str) -> tuple[str, str, str]:
    """`PROJECT:LOCATION.JOB_ID` (BigQuery's `Job.id`) -> (project, location, job id)."""
    project, _, rest = resource.rpartition(":")
    location, _, job_id = rest.partition(".")
    return project, location, job_id


class BigQueryJobTarget(GoogleRestTarget[BigQueryJobTargetConfig]):
    type = "bigquery_job"
    DEFAULT_ENDPOINT = DEFAULT_ENDPOINT

    def job(self, request: DispatchRequest) -> dict[str, Any]:
        """The `Job` that jobs.insert receives for this run."""
        configuration = copy.deepcopy(self.config.configuration)
        configuration["labels"] = {**configuration.get("labels", {}), RUN_ID_LABEL: run_id_label(request.run_id)}
        query = configuration.get("query")
        if query is not None:
            query.setdefault("useLegacySql", False)
            query["parameterMode"] = "NAMED"
            query["queryParameters"] = [*query.get("queryParameters", []), *run_parameters(request)]
        reference = {
            "projectId": self.config.project,
            "jobId": job_id_for(request.run_id),
            "location": self.config.location,
        }
        return {"jobReference": reference, "configuration": configuration}

    def _job_path(self, project: str, job_id: str | None = None) -> str:
        return f"bigquery/v2/projects/{project}/jobs" + (f"/{job_id}" if job_id else "")

    async def dispatch(self, request: DispatchRequest) -> str:
        job_id = job_id_for(request.run_id)
        action = f"insert BigQuery job {self.config.project}:{self.config.location}.{job_id}"
        if request.payload:
            raise TargetFailed(
                f"{action}: a bigquery_job route takes no delivery body (its job is the route's configuration)"
            )
        response = await self.send("POST", self._job_path(self.config.project), action, body=self.job(request))
        if response.status_code == 409:  # the run's job exists: an earlier attempt created it
            read = f"{action}: it already exists; read it"
            with reconciling(read):
                job = await self._get(self.config.project, self.config.location, job_id, read)
            return self._resource(job, job_id)
        if not response.is_success:
            raise insert_outcome(action, response)
        return self._resource(json_of(action, response), job_id)

    async def reconcile(self, request: DispatchRequest) -> str | None:
        job_id = job_id_for(request.run_id)
        action = f"get BigQuery job {self.config.project}:{self.config.location}.{job_id}"
        with reconciling(action):
            response = await self.send(
                "GET", self._job_path(self.config.project, job_id), action, params={"location": self.config.location}
            )
            if response.status_code == 404:
                return None
            job = json_of(action, response)
        return self._resource(job, job_id)

    async def is_running(self, resource: str) -> bool:
        project, location, job_id = parse_resource(resource)
        action = f"get BigQuery job {resource}"
        try:
            job = await self._get(project, location, job_id, action)
        except TargetOutcomeUnknown:
            raise
        except TargetError as exc:
            raise TargetOutcomeUnknown(f"cannot read the state of {resource}: {exc.message}") from exc
        return (job.get("status") or {}).get("state") != "DONE"

    async def _get(self, project: str, location: str, job_id: str, action: str) -> dict[str, Any]:
        return await self.call("GET", self._job_path(project, job_id), action, params={"location": location})

    def _resource(self, job: dict[str, Any], job_id: str) -> str:
        """BigQuery's own name for the job, `PROJECT:LOCATION.JOB_ID` (as `bq show -j` takes it)."""
        return str(job.get("id") or f"{self.config.project}:{self.config.location}.{job_id}")


def insert_outcome(action: str, response: httpx.Response) -> TargetError:
    """The outcome of a jobs.insert answer other than 2xx and 409 (see the module's table)."""
    outcome = outcome_for_response(action, response)
    reasons = {e.get("reason") for e in error_of(response.text).get("errors") or [] if isinstance(e, dict)}
    if isinstance(outcome, TargetThrottled):
        return outcome
    if "rateLimitExceeded" in reasons:
        return TargetThrottled(outcome.message, parse_retry_after(response.headers.get("retry-after")))
    if response.status_code >= 500:
        return TargetOutcomeUnknown(outcome.message)
    return outcome


TARGET = TargetType(
    name="bigquery_job",
    config=BigQueryJobTargetConfig,
    adapter=BigQueryJobTarget,
    build=BigQueryJobTarget.build,
    endpoint="bigquery",
    resource_field="project",
    # Run jobs in the project; the data the job reads and writes needs its own grants
    # (docs/how-to/targets/bigquery_job.md).
    grants=(Grant("roles/bigquery.jobUser", on="project"),),
    takes_payload=False,  # its workload is the route's: no delivery body
    event_payload="none",
)
