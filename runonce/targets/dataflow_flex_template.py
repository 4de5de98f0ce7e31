"""`dataflow_flex_template` target: one Dataflow job per run from a Flex Template (Dataflow API
v1b3 `projects.locations.flexTemplates.launch`, REST).

The run's handle is the job's name, `launchParameter.jobName` = `runonce-` + the run_id (72
characters of Dataflow's `[a-z]([-a-z0-9]{0,1022}[a-z0-9])?`). Dataflow refuses a second launch with
the name of an *active* job (409 ALREADY_EXISTS), but a finished job does not stop one. So
reconciliation is the only guard once the run's job has finished, and runonce never launches again
without asking first: every attempt after the first one lists the jobs of that name
(`projects.locations.jobs.list?name=…`) before it launches, whether or not the runner reconciled,
and a 409 is answered by the same listing. Any job of that name is the run's: the name holds the
run_id.

The template gets the run's identity as parameters where the route names them
(`run_parameters: [run_id, schedule_time]`, or `{run_id: PARAM, schedule_time: PARAM}`), and the job
carries the label `runonce-run-id` (`environment.additionalUserLabels`). A job whose
`currentState` is not terminal (DONE, FAILED, CANCELLED, UPDATED, DRAINED) is running (overlap).
Answers: `rest_jobs`'s table.
"""

from __future__ import annotations

import copy
import logging
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from runonce.targets.base import DispatchRequest, TargetOutcomeUnknown
from runonce.targets.google import json_of, read_state, reconciling, send_rest
from runonce.targets.registry import Grant, TargetType
from runonce.targets.rest_jobs import (
    ParentConfig,
    RunNamedJobTarget,
    RunParameters,
    check_route_labels,
    config_error,
    mapped_parameters,
    mapping_at,
    refuse_fields,
    refuse_mapped_parameters,
    with_label,
)

logger = logging.getLogger("runonce.target.dataflow_flex_template")

DEFAULT_ENDPOINT = "https://dataflow.googleapis.com"
MAX_NAME_LENGTH = 1024
TERMINAL_STATES = frozenset(
    {"JOB_STATE_DONE", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_UPDATED", "JOB_STATE_DRAINED"}
)
MAX_PAGES = 20
JOB_PATTERN = r"projects/[^/]+/locations/[^/]+/jobs/[^/]+"


class DataflowFlexTemplateTargetConfig(ParentConfig):
    type: Literal["dataflow_flex_template"]
    launch_parameter: dict[str, Any] = Field(
        description="A LaunchFlexTemplateParameter, as flexTemplates.launch takes it (containerSpecGcsPath, …)."
    )
    run_parameters: RunParameters = Field(
        default_factory=dict,
        description="Which template parameters receive the run's identity: [run_id, schedule_time] or a mapping.",
    )

    @field_validator("launch_parameter")
    @classmethod
    def _launch_parameter(cls, value: dict[str, Any]) -> dict[str, Any]:
        refuse_fields(
            value,
            {
                "jobName": "runonce names the job from the run",
                "update": "updating a running streaming job is not a run's launch",
                "transformNameMappings": "it applies to updates only",
            },
            "launch_parameter",
        )
        if not value.get("containerSpecGcsPath") and not value.get("containerSpec"):
            raise config_error("launch_parameter needs containerSpecGcsPath (the template's file) or containerSpec")
        mapping_at(value, "parameters", "launch_parameter")
        check_route_labels(value, "environment.additionalUserLabels", "launch_parameter")
        return value

    @model_validator(mode="after")
    def _parameters_left_to_runonce(self) -> DataflowFlexTemplateTargetConfig:
        given = mapping_at(self.launch_parameter, "parameters", "launch_parameter")
        refuse_mapped_parameters(self.run_parameters, given, "launch_parameter.parameters")
        return self


class DataflowFlexTemplateTarget(RunNamedJobTarget):
    config: DataflowFlexTemplateTargetConfig
    type = "dataflow_flex_template"
    collection = "jobs"
    noun = "Dataflow job"
    running_states = frozenset()  # not used: a job runs until its state is terminal
    max_id_length = MAX_NAME_LENGTH
    api_version = "v1b3"

    def default_endpoint(self) -> str:
        return DEFAULT_ENDPOINT

    def resource_name(self, request: DispatchRequest) -> str:
        """The job's name: Dataflow's resource is named by the id it assigns (`_job_resource`)."""
        return self.resource_id(request)

    def create_url(self) -> str:
        return self._url(f"{self._project_path}/flexTemplates:launch")

    @property
    def _project_path(self) -> str:
        return f"projects/{self.config.project}/locations/{self.config.location}"

    def create_params(self, request: DispatchRequest) -> dict[str, str]:
        return {}

    def body(self, request: DispatchRequest) -> dict[str, Any]:
        """The LaunchFlexTemplateRequest: the route's parameter with the run's name, its label,
        and its identity in the parameters the route names."""
        launch = copy.deepcopy(self.config.launch_parameter)
        launch["jobName"] = self.resource_id(request)
        environment = launch.setdefault("environment", {})
        environment["additionalUserLabels"] = with_label(environment.get("additionalUserLabels"), request.run_id)
        mapped = mapped_parameters(self.config.run_parameters, request)
        if mapped:
            launch["parameters"] = {**(launch.get("parameters") or {}), **mapped}
        return {"launchParameter": launch}

    def created_resource(self, answer: dict[str, Any], request: DispatchRequest) -> str:
        job = answer.get("job") or {}
        if not job.get("id"):
            raise TargetOutcomeUnknown(f"launch Dataflow job {self.resource_id(request)}: the answer names no job")
        return self._job_resource(job)

    def _job_resource(self, job: dict[str, Any]) -> str:
        return f"{self._project_path}/jobs/{job['id']}"

    async def dispatch(self, request: DispatchRequest) -> str:
        if request.attempt > 1:  # an earlier attempt may have launched it: ask first, always
            found = await self.reconcile(request)
            if found is not None:
                return found
        return await super().dispatch(request)

    async def find(self, request: DispatchRequest, action: str) -> str | None:
        """The run's job among the jobs of its name (active or finished), or None."""
        name = self.resource_id(request)
        matches: list[dict[str, Any]] = []
        page_token: str | None = None  # pragma: no mutate - "" is as falsy: the first page either way
        for _ in range(MAX_PAGES):
            params = {"name": name, "filter": "ALL", "pageSize": "100"}
            if page_token:
                params["pageToken"] = page_token
            response = await send_rest(
                self._http,
                self._auth,
                "GET",  # pragma: no mutate - httpx upper-cases the method: "get" is the same request
                self._url(f"{self._project_path}/jobs"),
                action,
                params=params,
            )
            page = json_of(action, response)
            matches += [job for job in page.get("jobs") or [] if job.get("name") == name and job.get("id")]
            page_token = page.get("nextPageToken")
            if not page_token:
                break
        else:
            raise TargetOutcomeUnknown(f"{action}: more than {MAX_PAGES} pages of jobs named {name}")
        if not matches:
            return None
        if len(matches) > 1:
            logger.warning("run %s has %d Dataflow jobs: %s", request.run_id, len(matches), [j["id"] for j in matches])
        active = [job for job in matches if job.get("currentState") not in TERMINAL_STATES]
        return self._job_resource((active or matches)[0])

    async def reconcile(self, request: DispatchRequest) -> str | None:
        action = f"list Dataflow jobs named {self.resource_id(request)} in {self._project_path}"
        with reconciling(action):
            return await self.find(request, action)

    async def is_running(self, resource: str) -> bool:
        if not re.fullmatch(JOB_PATTERN, resource):
            raise TargetOutcomeUnknown(f"{resource} is not a Dataflow job's name")
        found = await read_state(self._http, self._auth, self._url(resource), resource)
        return found is not None and found.get("currentState") not in TERMINAL_STATES


TARGET = TargetType(
    name="dataflow_flex_template",
    config=DataflowFlexTemplateTargetConfig,
    adapter=DataflowFlexTemplateTarget,
    build=lambda config, context, endpoint: DataflowFlexTemplateTarget(
        config, context.http, context.google_auth, endpoint
    ),
    endpoint="dataflow",
    resource_field="project",
    grants=(
        # flexTemplates.launch, jobs.list and jobs.get in the project; reading the template file in
        # Cloud Storage needs its own grant (the docs).
        Grant("roles/dataflow.developer", on="project"),
        # The job's workers run as its service account: launching needs actAs on it.
        Grant(
            "roles/iam.serviceAccountUser",
            on="service-account",
            field="launch_parameter.environment.serviceAccountEmail",
        ),
    ),
    takes_payload=False,  # its workload is the route's: no delivery body
    event_payload="none",
)
