"""Adapter paths that the proxy reaches rarely, driven in-process against the same fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from runonce.targets import TargetFailed
from runonce.targets.cloud_build_trigger import CloudBuildTriggerTarget, CloudBuildTriggerTargetConfig
from runonce.targets.cloud_run_job import CloudRunJobTarget, CloudRunJobTargetConfig
from runonce.targets.workflows import WorkflowsTarget, WorkflowsTargetConfig
from tests.fakes.cloud_build import GET_TRIGGER
from tests.fakes.cloud_build import LIST as BUILDS_LIST
from tests.fakes.cloud_run import LIST as EXECUTIONS_LIST
from tests.fakes.metadata import MetadataTokenAuth
from tests.fakes.workflows import CREATE

from .harness import JOB, TRIGGER, WORKFLOW, request_for


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


async def test_cloud_run_reconciles_by_listing_the_job_executions(http, metadata, fakes) -> None:
    fake = fakes["cloud_run_job"]
    target = CloudRunJobTarget(
        CloudRunJobTargetConfig(type="cloud_run_job", job=JOB), http, MetadataTokenAuth(metadata.host), fake.url
    )
    request = request_for("listed")
    created = await target.dispatch(request)
    lists = fake.calls[EXECUTIONS_LIST]
    assert await target.reconcile(request) == created
    assert await target.reconcile(request_for("other")) is None  # another run's token: nothing
    assert fake.calls[EXECUTIONS_LIST] == lists + 2
    assert fake.violations == []


async def test_cloud_build_payload_must_be_substitutions(http, metadata, fakes) -> None:
    fake = fakes["cloud_build_trigger"]
    target = CloudBuildTriggerTarget(
        CloudBuildTriggerTargetConfig(type="cloud_build_trigger", trigger=TRIGGER),
        http,
        MetadataTokenAuth(metadata.host),
        fake.url,
    )
    request = request_for("bad-payload", {"mode": "full"})
    with pytest.raises(TargetFailed, match="payload field 'mode'"):
        await target.dispatch(request)
    assert fake.created_for(request.run_id) == []

    good = request_for("good-payload", {"_MODE": "full"})
    build = await target.dispatch(good)
    [created] = [c for c in fake.created if c.resource == build]
    assert created.data["body"]["source"]["substitutions"]["_MODE"] == "full"
    assert fake.violations == []  # what was sent is a RunBuildTriggerRequest Google accepts


async def test_cloud_build_trigger_by_name_is_resolved_once(http, metadata, fakes) -> None:
    fake = fakes["cloud_build_trigger"]
    target = CloudBuildTriggerTarget(
        CloudBuildTriggerTargetConfig(type="cloud_build_trigger", trigger=TRIGGER),
        http,
        MetadataTokenAuth(metadata.host),
        fake.url,
    )
    gets = fake.calls[GET_TRIGGER]
    for name in ("first", "second"):
        assert await target.reconcile(request_for(name)) is None
    assert fake.calls[GET_TRIGGER] == gets + 1
    assert fake.calls[BUILDS_LIST] >= 2
    assert fake.violations == []


async def test_workflows_argument_over_the_api_limit_creates_nothing(http, metadata, fakes) -> None:
    fake = fakes["workflows"]
    target = WorkflowsTarget(
        WorkflowsTargetConfig(type="workflows", workflow=WORKFLOW), http, MetadataTokenAuth(metadata.host), fake.url
    )
    request = request_for("huge", {"blob": "x" * 33000})
    creates = fake.calls[CREATE]
    try:
        with pytest.raises(TargetFailed, match="over the API's 32768 bytes"):
            await target.dispatch(request)
    finally:
        await target.aclose()
    assert fake.created_for(request.run_id) == []
    assert fake.calls[CREATE] == creates  # refused before sending: nothing reached the API
    assert fake.violations == []
