"""Fixtures of the Google targets' end-to-end tests (see `harness.py`). The same scenarios run
against every adapter through the `adapter` fixture."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.cloud_build import LIST as BUILDS_LIST
from tests.fakes.cloud_build import RUN as TRIGGERS_RUN
from tests.fakes.cloud_build import FakeCloudBuild
from tests.fakes.cloud_run import LIST as EXECUTIONS_LIST
from tests.fakes.cloud_run import RUN as JOBS_RUN
from tests.fakes.cloud_run import FakeCloudRun
from tests.fakes.google_api import FakeGoogleApi
from tests.fakes.metadata import FakeMetadataServer
from tests.fakes.workflows import CREATE, LIST, FakeWorkflows
from tests.support.procs import ServerProcess, start_server

from .harness import JOB, TRIGGER, WORKFLOW, Adapter, server_env


@pytest.fixture(scope="session")
def metadata() -> Iterator[FakeMetadataServer]:
    server = FakeMetadataServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def fakes(metadata: FakeMetadataServer) -> Iterator[dict[str, FakeGoogleApi]]:
    workflows = FakeWorkflows(metadata)
    workflows.add_workflow(WORKFLOW)
    cloud_run = FakeCloudRun(metadata)
    cloud_run.add_job(JOB)
    cloud_build = FakeCloudBuild(metadata)
    cloud_build.add_trigger(TRIGGER)
    all_fakes: dict[str, FakeGoogleApi] = {
        "workflows": workflows,
        "cloud_run_job": cloud_run,
        "cloud_build_trigger": cloud_build,
    }
    yield all_fakes
    for fake in all_fakes.values():
        fake.close()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, metadata: FakeMetadataServer, fakes) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("runonce")
    proc = start_server(server_env(tmp, metadata, fakes), tmp)
    yield proc
    proc.stop()


@pytest.fixture(params=["workflows", "cloud_run_job", "cloud_build_trigger"])
def adapter(request: pytest.FixtureRequest, fakes) -> Iterator[Adapter]:
    fake = fakes[request.param]
    adapter = {
        "workflows": Adapter("workflows", "etl", fake, CREATE, LIST),
        "cloud_run_job": Adapter("cloud_run_job", "nightly", fake, JOBS_RUN, EXECUTIONS_LIST),
        "cloud_build_trigger": Adapter("cloud_build_trigger", "build", fake, TRIGGERS_RUN, BUILDS_LIST),
    }[request.param]
    fake.create_delay = 0.0
    yield adapter
    assert fake.violations == [], f"requests Google's API would reject: {fake.violations}"
    assert fake.pending_steps() == 0, "a scripted misbehaviour was never triggered"
