"""`Target.is_running` of every Google adapter (issue 13, overlap), in-process against the fakes,
whose executions run until the test finishes them and whose answers are checked against the
discovery documents."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from runonce.targets import Target, TargetOutcomeUnknown
from runonce.targets.cloud_build_trigger import CloudBuildTriggerTarget, CloudBuildTriggerTargetConfig
from runonce.targets.cloud_run_job import CloudRunJobTarget, CloudRunJobTargetConfig
from runonce.targets.workflows import WorkflowsTarget, WorkflowsTargetConfig
from tests.fakes.cloud_build import GET_BUILD
from tests.fakes.cloud_run import GET as GET_EXECUTION
from tests.fakes.metadata import MetadataTokenAuth
from tests.fakes.workflows import GET as GET_WORKFLOW_EXECUTION

from .harness import JOB, PROJECT, TRIGGER, WORKFLOW, request_for


@dataclass
class Case:
    target: Target
    fake: Any
    get: str  # the fake's name for the state read
    gone: str  # a well-formed name of an execution that does not exist
    states: list[
        tuple[Callable[[Any, str], None], bool | None]
    ]  # move the execution, then: running? (None: cannot tell)


@pytest.fixture(params=["workflows", "cloud_run_job", "cloud_build_trigger"])
async def case(request: pytest.FixtureRequest, metadata, fakes) -> AsyncIterator[Case]:
    auth = MetadataTokenAuth(metadata.host)
    fake = fakes[request.param]
    async with httpx.AsyncClient(timeout=10) as http:
        if request.param == "workflows":
            target: Target = WorkflowsTarget(
                WorkflowsTargetConfig(type="workflows", workflow=WORKFLOW), http, auth, fake.url
            )
            gone = f"{WORKFLOW}/executions/8d1c0c55-0b57-4a61-a34c-31e0bd1a4cf0"
            states = [
                (lambda f, r: f.finish(r, "QUEUED"), True),  # in the backlog: not started, yet not done
                (lambda f, r: f.finish(r, "UNAVAILABLE"), None),
                (lambda f, r: f.finish(r, "FAILED"), False),
            ]
            get = GET_WORKFLOW_EXECUTION
        elif request.param == "cloud_run_job":
            target = CloudRunJobTarget(CloudRunJobTargetConfig(type="cloud_run_job", job=JOB), http, auth, fake.url)
            gone = f"{JOB}/executions/nightly-zzzzz"
            states = [(lambda f, r: f.finish(r, "failed"), False)]
            get = GET_EXECUTION
        else:
            target = CloudBuildTriggerTarget(
                CloudBuildTriggerTargetConfig(type="cloud_build_trigger", trigger=TRIGGER), http, auth, fake.url
            )
            gone = f"projects/{PROJECT}/locations/us-central1/builds/0b7e8c1a-1111-2222-3333-444455556666"
            states = [
                (lambda f, r: f.set_status(r, "WORKING"), True),
                (lambda f, r: f.set_status(r, "STATUS_UNKNOWN"), None),
                (lambda f, r: f.set_status(r, "TIMEOUT"), False),
            ]
            get = GET_BUILD
        try:
            yield Case(target, fake, get, gone, states)
        finally:
            await target.aclose()
    assert fake.violations == [], f"requests Google's API would reject: {fake.violations}"


async def test_an_execution_runs_until_it_is_done(case: Case) -> None:
    resource = await case.target.dispatch(request_for(f"state-{case.target.type}"))
    reads = case.fake.calls[case.get]
    assert await case.target.is_running(resource) is True
    for move, running in case.states:
        move(case.fake, resource)
        if running is None:
            with pytest.raises(
                TargetOutcomeUnknown, match=f"^get {resource}: (state UNAVAILABLE|status STATUS_UNKNOWN)$"
            ):
                await case.target.is_running(resource)
        else:
            assert await case.target.is_running(resource) is running
    assert case.fake.calls[case.get] == reads + 1 + len(case.states)


async def test_a_successful_execution_is_done(case: Case) -> None:
    resource = await case.target.dispatch(request_for(f"done-{case.target.type}"))
    case.fake.finish(resource)
    assert await case.target.is_running(resource) is False


async def test_an_execution_that_no_longer_exists_is_not_running(case: Case) -> None:
    assert await case.target.is_running(case.gone) is False


@pytest.mark.parametrize("case", ["cloud_run_job", "cloud_build_trigger"], indirect=True)
async def test_a_resource_that_names_no_execution_cannot_tell(case: Case) -> None:
    """Cloud Run and Cloud Build record the operation's name when the answer named no execution."""
    operation = f"projects/{PROJECT}/locations/us-central1/operations/0b7e8c1a-1111"
    reads = case.fake.calls[case.get]
    with pytest.raises(TargetOutcomeUnknown, match=r"is not an? (execution|build)'s name"):
        await case.target.is_running(operation)
    assert case.fake.calls[case.get] == reads  # nothing asked of the API


@pytest.mark.parametrize(
    ("code", "message"),
    [("PERMISSION_DENIED", "Permission denied on the execution"), ("UNAVAILABLE", "The service is unavailable.")],
)
async def test_a_failed_read_cannot_tell(case: Case, code: str, message: str) -> None:
    resource = await case.target.dispatch(request_for(f"unreadable-{case.target.type}-{code}"))
    case.fake.fail(case.get, code, message)
    with pytest.raises(TargetOutcomeUnknown, match=f"^cannot read the state of {resource}: get {resource}: ") as raised:
        await case.target.is_running(resource)
    assert code in raised.value.message and message in raised.value.message
