"""`dataflow_flex_template` target: one Dataflow job per run from a Flex Template (Dataflow API
v1b3 `projects.locations.flexTemplates.launch`, REST).

The run's handle is the job's name, `launchParameter.jobName` = `runonce-` + the run_id (72
characters of Dataflow's `[a-z]([-a-z0-9]{0,1022}[a-z0-9])?`). Dataflow refuses a second launch with
the name of an *active* job (409 ALREADY_EXISTS), but a finished job does not stop one. So
reconciliation is the only guard once the run's job has finished, and runonce never launches
without asking first: every attempt, the first one too, lists the jobs of that name
(`projects.locations.jobs.list?name=…&filter=ALL`, one GET) before it launches, so a run whose
record was lost (a store without persistence, a record past retention) after its job finished does
not launch a second job; a 409 is answered by the same listing. Any job of that name is the run's:
the name holds the run_id.

The template gets the run's identity as parameters where the route names them
(`run_parameters: [run_id, schedule_time]`, or `{run_id: PARAM, schedule_time: PARAM}`), and the job
carries the label `runonce-run-id` (`environment.additionalUserLabels`). A job whose
`currentState` is not terminal (DONE, FAILED, CANCELLED, UPDATED, DRAINED) is running (overlap).
Answers: the engine's table (`engine.py`).
"""

from __future__ import annotations

import copy
import re
from typing import Any, Literal

from pydantic import Field, model_validator

from runonce.targets.base import DispatchRequest, TargetOutcomeUnknown, config_error
from runonce.targets.engine import Call, GoogleEngineTarget, Listing, Running
from runonce.targets.presets import (
    ParentConfig,
    RunParameters,
    act_as,
    check_preset,
    mapped_parameters,
    preset_type,
    refuse_mapped_parameters,
    resource_id_for,
    with_label,
)
from runonce.targets.registry import Grant

MAX_NAME_LENGTH = 1024
SET_BY_RUNONCE = {
    "jobName": "runonce names the job from the run",
    "update": "updating a running streaming job is not a run's launch",
    "transformNameMappings": "it applies to updates only",
}
LABELS = "environment.additionalUserLabels"
TERMINAL_STATES = frozenset(
    {"JOB_STATE_DONE", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_UPDATED", "JOB_STATE_DRAINED"}
)


class DataflowFlexTemplateTargetConfig(ParentConfig):
    type: Literal["dataflow_flex_template"]
    launch_parameter: dict[str, Any] = Field(
        description="A LaunchFlexTemplateParameter, as flexTemplates.launch takes it (containerSpecGcsPath, …)."
    )
    run_parameters: RunParameters = Field(
        default_factory=dict,
        description="Which template parameters receive the run's identity: [run_id, schedule_time] or a mapping.",
    )

    @model_validator(mode="after")
    def _against_the_api(self) -> DataflowFlexTemplateTargetConfig:
        check_preset(DataflowFlexTemplateTarget, self, SET_BY_RUNONCE, LABELS, self._check_launch_parameter)
        return self

    def _check_launch_parameter(self, launch: dict[str, Any]) -> None:
        if not launch.get("containerSpecGcsPath") and not launch.get("containerSpec"):
            raise config_error("launch_parameter needs containerSpecGcsPath (the template's file) or containerSpec")
        refuse_mapped_parameters(self.run_parameters, launch.get("parameters") or {}, "launch_parameter.parameters")


class DataflowFlexTemplateTarget(GoogleEngineTarget[DataflowFlexTemplateTargetConfig]):
    type = "dataflow_flex_template"
    API = "dataflow.v1b3"
    NOUN = "Dataflow job"
    FIND_BEFORE_CREATE = True  # names are unique among active jobs only (the module's docstring)
    RUNNING = Running("currentState", final=TERMINAL_STATES)
    BODY_FIELD = ("launchParameter", "launch_parameter")
    BODY_SCHEMA = "LaunchFlexTemplateParameter"

    @property
    def _where(self) -> dict[str, str]:
        return {"projectId": self.config.project, "location": self.config.location}

    def job_name(self, request: DispatchRequest) -> str:
        return resource_id_for(request.run_id, MAX_NAME_LENGTH)  # pragma: no mutate - 72 characters, well within

    def describe(self, request: DispatchRequest) -> str:
        return f"create Dataflow job {self.job_name(request)}"

    def describe_lookup(self, request: DispatchRequest) -> str:
        parent = f"projects/{self.config.project}/locations/{self.config.location}"
        return f"list Dataflow jobs named {self.job_name(request)} in {parent}"

    def create_call(self, request: DispatchRequest) -> Call:
        """The LaunchFlexTemplateRequest: the route's parameter with the run's name, its label,
        and its identity in the parameters the route names."""
        launch = copy.deepcopy(self.config.launch_parameter)
        launch["jobName"] = self.job_name(request)
        environment = launch["environment"] = launch.get("environment") or {}
        environment["additionalUserLabels"] = with_label(environment.get("additionalUserLabels"), request.run_id)
        mapped = mapped_parameters(self.config.run_parameters, request)
        if mapped:
            launch["parameters"] = {**(launch.get("parameters") or {}), **mapped}
        return Call("projects.locations.flexTemplates.launch", self._where, {"launchParameter": launch})

    def list_call(self, request: DispatchRequest) -> Listing:
        """The jobs of the run's name, active or finished (Dataflow filters by name itself)."""
        params = {**self._where, "name": self.job_name(request), "filter": "ALL", "pageSize": "100"}
        return Listing(Call("projects.locations.jobs.list", params), items="jobs")

    def matches(self, item: dict[str, Any], request: DispatchRequest) -> str | None:
        """Any job of the run's name is the run's: the name holds the run_id."""
        if item.get("name") == self.job_name(request) and item.get("id"):
            return self._job_resource(item)
        return None

    def choose(self, found: list[tuple[str, dict[str, Any]]]) -> str:
        """An active job of the run's name before a finished one."""
        active = [name for name, job in found if job.get("currentState") not in TERMINAL_STATES]
        return (active or [name for name, _ in found])[0]

    def created(self, answer: dict[str, Any], request: DispatchRequest) -> str:
        job = answer.get("job") or {}
        if not job.get("id"):
            raise TargetOutcomeUnknown(f"{self.describe(request)}: the answer names no job")
        return self._job_resource(job)

    def _job_resource(self, job: dict[str, Any]) -> str:
        return f"projects/{self.config.project}/locations/{self.config.location}/jobs/{job['id']}"

    def state_call(self, resource: str) -> Call:
        match = re.fullmatch(r"projects/([^/]+)/locations/([^/]+)/jobs/([^/]+)", resource)
        if match is None:
            raise TargetOutcomeUnknown(f"{resource} is not a Dataflow job's name")
        project, location, job_id = match.groups()
        return Call("projects.locations.jobs.get", {"projectId": project, "location": location, "jobId": job_id})


TARGET = preset_type(
    DataflowFlexTemplateTargetConfig,
    DataflowFlexTemplateTarget,
    "dataflow",
    # flexTemplates.launch, jobs.list and jobs.get in the project; reading the template file in
    # Cloud Storage needs its own grant (the docs).
    Grant("roles/dataflow.developer", on="project"),
    # The job's workers run as its service account: launching needs actAs on it.
    act_as("launch_parameter.environment.serviceAccountEmail"),
)
