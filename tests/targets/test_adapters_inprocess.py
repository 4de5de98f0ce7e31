"""Adapter paths that the proxy reaches rarely, driven in-process against the same fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from runonce.targets import TargetFailed, TargetOutcomeUnknown
from runonce.targets.cloud_build_trigger import CloudBuildTriggerTarget, CloudBuildTriggerTargetConfig
from runonce.targets.cloud_run_job import CloudRunJobTarget, CloudRunJobTargetConfig
from runonce.targets.workflows import WorkflowsTarget, WorkflowsTargetConfig
from tests.fakes.cloud_build import GET_TRIGGER
from tests.fakes.cloud_build import LIST as BUILDS_LIST
from tests.fakes.cloud_run import LIST as EXECUTIONS_LIST
from tests.fakes.cloud_run import RUN
from tests.fakes.metadata import MetadataTokenAuth
from tests.fakes.workflows import CREATE

from .harness import JOB, TRIGGER, WORKFLOW, request_for


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


def _cloud_run(http: httpx.AsyncClient, metadata, fake) -> CloudRunJobTarget:
    config = CloudRunJobTargetConfig(type="cloud_run_job", job=JOB)
    return CloudRunJobTarget(config, http, MetadataTokenAuth(metadata.host), fake.url)


def _cloud_build(http: httpx.AsyncClient, metadata, fake) -> CloudBuildTriggerTarget:
    config = CloudBuildTriggerTargetConfig(type="cloud_build_trigger", trigger=TRIGGER)
    return CloudBuildTriggerTarget(config, http, MetadataTokenAuth(metadata.host), fake.url)


async def test_cloud_run_reconciles_by_listing_the_job_executions(http, metadata, fakes) -> None:
    fake = fakes["cloud_run_job"]
    target = _cloud_run(http, metadata, fake)
    request = request_for("listed")
    created = await target.dispatch(request)
    lists = fake.calls[EXECUTIONS_LIST]
    assert await target.reconcile(request) == created
    assert await target.reconcile(request_for("other")) is None  # another run's token: nothing
    assert fake.calls[EXECUTIONS_LIST] == lists + 2
    assert fake.violations == []


async def test_cloud_build_payload_must_be_substitutions(http, metadata, fakes) -> None:
    fake = fakes["cloud_build_trigger"]
    target = _cloud_build(http, metadata, fake)
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
    target = _cloud_build(http, metadata, fake)
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


async def test_cloud_run_job_carries_the_delivery_body_as_runonce_payload(http, metadata, fakes) -> None:
    """The delivery's body reaches the job's container as compact JSON in `RUNONCE_PAYLOAD`; a run
    without a body sets no such variable."""
    fake = fakes["cloud_run_job"]
    target = _cloud_run(http, metadata, fake)
    with_body = request_for("with-a-body", {"day": "2026-10-16", "note": "café"})
    without = request_for("without-a-body")
    for request in (with_body, without):
        await target.dispatch(request)
    env_of = {
        c.token: {v["name"]: v["value"] for v in c.data["overrides"]["containerOverrides"][0]["env"]}
        for c in fake.created
        if c.token in (with_body.run_id, without.run_id)
    }
    assert env_of[with_body.run_id]["RUNONCE_PAYLOAD"] == '{"day":"2026-10-16","note":"café"}'
    assert "RUNONCE_PAYLOAD" not in env_of[without.run_id]
    assert env_of[without.run_id]["IDEMPOTENCY_KEY"] == without.run_id
    assert fake.violations == []


async def test_cloud_run_job_refuses_a_body_over_an_env_vars_limit_and_sends_nothing(http, metadata, fakes) -> None:
    """Cloud Run holds an env var's value to 32 KiB: a bigger delivery body fails (the claim is
    released) before anything is sent."""
    fake = fakes["cloud_run_job"]
    target = _cloud_run(http, metadata, fake)
    request = request_for("too-big-a-body", {"blob": "x" * 32760})
    runs = fake.calls[RUN]
    with pytest.raises(TargetFailed, match="env RUNONCE_PAYLOAD is over Cloud Run's 32768 bytes"):
        await target.dispatch(request)
    assert fake.calls[RUN] == runs
    assert fake.created_for(request.run_id) == []


async def test_a_trigger_by_name_whose_read_has_no_id_keeps_the_claim(http, metadata, fakes) -> None:
    """Builds name their trigger by id: when the trigger's read gives none, runonce cannot tell
    whether the run's build exists, so the lookup is unknown (the claim is kept), never 'none'."""
    fake = fakes["cloud_build_trigger"]
    target = _cloud_build(http, metadata, fake)
    saved = fake.triggers[TRIGGER]
    fake.triggers[TRIGGER] = {key: value for key, value in saved.items() if key != "id"}
    try:
        with pytest.raises(TargetOutcomeUnknown, match="the answer has no trigger id"):
            await target.reconcile(request_for("trigger-without-id"))
    finally:
        fake.triggers[TRIGGER] = saved
