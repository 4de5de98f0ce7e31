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

Answers to `jobs.insert`: the engine's table (`engine.py`), BigQuery's rows of it included: 409
ALREADY_EXISTS (reason `duplicate`) adopts the run's job, a 403 `rateLimitExceeded` is throttled, a
5xx (`backendError`) is unknown and the retry reconciles by `jobs.get` on the id.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from runonce.targets.base import DispatchRequest, TargetConfigModel, config_error
from runonce.targets.engine import Call, GoogleEngineTarget, Running, run_hex
from runonce.targets.google import RUN_ID_LABEL, run_id_label
from runonce.targets.presets import RUN_FIELDS, ProjectId, check_preset, preset_type
from runonce.targets.registry import Grant

LOCATION_PATTERN = r"(?:US|EU|us|eu|[a-z]+-[a-z]+[0-9]+|aws-[a-z]+-[a-z]+-[0-9]+|azure-[a-z]+[0-9]*)"
"""BigQuery's locations: the multi-regions, the regions, and BigQuery Omni's AWS and Azure regions
(`aws-us-east-1`, `azure-eastus2`)."""


def job_id_for(run_id: str) -> str:
    """The run's BigQuery job id: `runonce_` + the run_id (64 hex characters, as every run_id is;
    anything else is hashed so the id stays within BigQuery's `[A-Za-z0-9_-]{1,1024}`)."""
    return f"runonce_{run_hex(run_id)}"


def run_parameters(request: DispatchRequest) -> list[dict[str, Any]]:
    """`@run_id` and `@schedule_time` as named query parameters (an absent value is NULL)."""
    schedule_time = {"value": request.schedule_time} if request.schedule_time else {}
    return [
        {"name": "run_id", "parameterType": {"type": "STRING"}, "parameterValue": {"value": request.run_id}},
        {"name": "schedule_time", "parameterType": {"type": "TIMESTAMP"}, "parameterValue": schedule_time},
    ]


def _check_configuration(configuration: dict[str, Any]) -> None:
    """What the document cannot say of a JobConfiguration: a real job (one kind of job, neither none
    nor two, the document's "[Pick one]" says), and a query that takes runonce's named parameters."""
    if configuration.get("dryRun"):
        raise config_error("dryRun creates no job, so a run would start nothing")
    query = configuration.get("query")
    if query is None:
        return
    if not query["query"].strip():
        raise config_error("configuration.query.query: the SQL text is empty (only blanks); a query job runs SQL")
    if query.get("useLegacySql") is True or re.match(r"\s*#legacySQL\b", query["query"], re.IGNORECASE):
        raise config_error(
            "configuration.query: legacy SQL takes no query parameters; runonce passes "
            "@run_id and @schedule_time, so use GoogleSQL (useLegacySql: false, the default here)"
        )
    mode = query.get("parameterMode", "NAMED")
    if mode != "NAMED":
        raise config_error(
            f"configuration.query: parameterMode must be NAMED (runonce adds named parameters; got {mode!r})"
        )
    names: set[str] = set()
    for parameter in query.get("queryParameters") or []:
        name = parameter.get("name")
        if str(name).lower() in names:  # BigQuery's parameter names ignore letter case, as its identifiers do
            raise config_error(f"configuration.query.queryParameters: {name!r} twice; a name is unique in a query")
        names.add(str(name).lower())
        if not name:
            raise config_error(
                "configuration.query.queryParameters: a positional parameter (no name); "
                "runonce adds named ones, and BigQuery does not mix the two"
            )
        if str(name).lower() in RUN_FIELDS:
            raise config_error(f"configuration.query.queryParameters: {name!r} is set by runonce")


class BigQueryJobTargetConfig(TargetConfigModel):
    type: Literal["bigquery_job"]
    project: ProjectId = Field(description="The project that runs the job (and is billed for it).")
    location: str = Field(
        description="Where the job runs: US, EU, a region such as us-central1, or an Omni region such as aws-us-east-1."
    )
    configuration: dict[str, Any] = Field(description="A JobConfiguration, as jobs.insert takes it.")

    @field_validator("location")
    @classmethod
    def _location(cls, value: str) -> str:
        if not re.fullmatch(LOCATION_PATTERN, value):
            raise config_error(
                f"must be a BigQuery location: US, EU, a region such as us-central1, or an Omni region such as "
                f"aws-us-east-1 (got {value!r})"
            )
        return value

    @model_validator(mode="after")
    def _against_the_api(self) -> BigQueryJobTargetConfig:
        check_preset(BigQueryJobTarget, self, {}, "labels", _check_configuration)
        return self


def parse_resource(resource: str) -> tuple[str, str, str]:
    """`PROJECT:LOCATION.JOB_ID` (BigQuery's `Job.id`) -> (project, location, job id)."""
    project, _, rest = resource.rpartition(":")
    location, _, job_id = rest.partition(".")
    return project, location, job_id


class BigQueryJobTarget(GoogleEngineTarget[BigQueryJobTargetConfig]):
    type = "bigquery_job"
    API = "bigquery.v2"
    NOUN = "BigQuery job"
    RUNNING = Running("status.state", final=frozenset({"DONE"}))
    BODY_FIELD = ("configuration", "configuration")
    BODY_SCHEMA = "JobConfiguration"

    def _job_name(self, request: DispatchRequest) -> str:
        return f"{self.config.project}:{self.config.location}.{job_id_for(request.run_id)}"

    def describe(self, request: DispatchRequest) -> str:
        return f"insert BigQuery job {self._job_name(request)}"

    def describe_lookup(self, request: DispatchRequest) -> str:
        return f"get BigQuery job {self._job_name(request)}"

    def job(self, request: DispatchRequest) -> dict[str, Any]:
        """The `Job` that jobs.insert receives for this run."""
        configuration = copy.deepcopy(self.config.configuration)
        labels = configuration.get("labels") or {}
        configuration["labels"] = {**labels, RUN_ID_LABEL: run_id_label(request.run_id)}
        query = configuration.get("query")
        if query is not None:
            if query.get("useLegacySql") is None:
                query["useLegacySql"] = False
            query["parameterMode"] = "NAMED"
            query["queryParameters"] = [*(query.get("queryParameters") or []), *run_parameters(request)]
        reference = {
            "projectId": self.config.project,
            "jobId": job_id_for(request.run_id),
            "location": self.config.location,
        }
        return {"jobReference": reference, "configuration": configuration}

    def create_call(self, request: DispatchRequest) -> Call:
        return Call("jobs.insert", {"projectId": self.config.project}, self.job(request))

    def lookup_call(self, request: DispatchRequest) -> Call:
        return self._get(self.config.project, self.config.location, job_id_for(request.run_id))

    def created(self, answer: dict[str, Any], request: DispatchRequest) -> str:
        """BigQuery's own name for the job, `PROJECT:LOCATION.JOB_ID` (as `bq show -j` takes it)."""
        return str(answer.get("id") or self._job_name(request))

    def state_call(self, resource: str) -> Call:
        return self._get(*parse_resource(resource))

    @staticmethod
    def _get(project: str, location: str, job_id: str) -> Call:
        return Call("jobs.get", {"projectId": project, "jobId": job_id, "location": location})


TARGET = preset_type(
    BigQueryJobTargetConfig,
    BigQueryJobTarget,
    "bigquery",
    # Run jobs in the project; the data the job reads and writes needs its own grants
    # (docs/how-to/targets/bigquery_job.md).
    Grant("roles/bigquery.jobUser", on="project"),
)
