"""The fakes are as strict as Google's API descriptions: each check below makes a fake record a
violation for a request Google would refuse, and a violation fails the test that caused it
(tests/conftest.py `strict_fakes`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from tests.fakes.cloud_run import FakeCloudRun
from tests.support.discovery import Discovery, Violation
from tests.support.procs import REPO

from .harness import JOB

TASKS_PARENT = "v2/projects/p-1/locations/us-central1/queues/q-1/tasks"


def refused(api: str, method: str, path: str, body: object = None, query: dict | None = None) -> str:
    with pytest.raises(Violation) as caught:
        Discovery(api).match(method, path, query or {}, body)
    return str(caught.value)


def accepted(api: str, method: str, path: str, body: object = None, query: dict | None = None) -> str:
    method_id, _ = Discovery(api).match(method, path, query or {}, body)
    return method_id


def task(**http_request: object) -> dict:
    return {"task": {"httpRequest": {"url": "https://example.com/run", **http_request}}}


# -- output-only fields ----------------------------------------------------------------------------


def test_an_output_only_field_marked_read_only_is_refused_by_the_live_fake(fakes) -> None:
    fake: FakeCloudRun = fakes["cloud_run_job"]
    parent = JOB.rsplit("/jobs/", 1)[0]
    response = httpx.post(
        f"{fake.url}/v2/{parent}/jobs",
        params={"jobId": "j-1"},
        json={"uid": "0f2c", "template": {"template": {"containers": [{"image": "x"}]}}},
    )
    assert response.status_code == 400
    assert fake.take_violations() == ["GoogleCloudRunV2Job.uid: output-only field in a request"]


def test_an_output_only_field_marked_only_in_its_description_is_refused() -> None:
    """cloudtasks.v2 marks Queue.purgeTime "Output only." in its description, without readOnly."""
    queue = {"name": "projects/p-1/locations/us-central1/queues/q-1", "purgeTime": "2026-10-16T12:00:00Z"}
    assert "Queue.purgeTime: output-only field" in refused(
        "cloudtasks.v2", "POST", "v2/projects/p-1/locations/us-central1/queues", queue
    )
    del queue["purgeTime"]
    assert accepted("cloudtasks.v2", "POST", "v2/projects/p-1/locations/us-central1/queues", queue)


# -- timestamps ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "when",
    [
        "2026-13-01T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "2026-10-16T24:00:00Z",
        "2026-10-16T12:00:00",
        "2026-10-16 12:00:00Z",
        "2026-10-16T12:00:00+25:00",
        "1760616000",
        "2026-10-16T12:00:00.1234567890Z",
        "2026-12-31T23:59:60Z",  # a leap second: RFC 3339 has it, protobuf's ParseTime refuses it
        "2026-10-16t12:00:00z",  # RFC 3339 allows lower case; ParseTime wants 'T' and 'Z'
    ],
)
def test_a_timestamp_that_is_not_rfc3339_is_refused(when: str) -> None:
    assert "is not an RFC 3339 timestamp" in refused(
        "cloudtasks.v2", "POST", TASKS_PARENT, {"task": {"scheduleTime": when}}
    )


@pytest.mark.parametrize(
    "when", ["2026-10-16T12:00:00Z", "2026-10-16T05:00:00.123456789-07:00", "2026-12-31T23:59:59.999999999Z"]
)
def test_rfc3339_timestamps_are_accepted(when: str) -> None:
    assert accepted("cloudtasks.v2", "POST", TASKS_PARENT, {"task": {"scheduleTime": when}})


# -- query parameters ------------------------------------------------------------------------------


def test_a_query_parameter_the_method_does_not_list_is_refused_by_the_live_fake(fakes) -> None:
    fake: FakeCloudRun = fakes["cloud_run_job"]
    response = httpx.get(f"{fake.url}/v2/{JOB}/executions", params={"pageSize": "10", "filter": "x"})
    assert response.status_code == 400
    assert fake.take_violations() == [
        "run.projects.locations.jobs.executions.list: query parameter 'filter' is not one the method lists"
    ]


def test_a_query_parameter_given_twice_must_be_repeated() -> None:
    path = "v1/projects/p-1/locations/us-central1/builds"
    assert "given 2 times" in refused("cloudbuild.v1", "GET", path, query={"pageSize": ["1", "2"]})
    assert accepted("cloudbuild.v1", "GET", path, query={"pageSize": ["1"]})


# -- base64 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", ["not base64!", "aGVsbG8$", "a", "aGVsbG8=x"])
def test_undecodable_base64_is_refused(body: str) -> None:
    assert "is not base64" in refused("cloudtasks.v2", "POST", TASKS_PARENT, task(body=body))


@pytest.mark.parametrize("body", ["aGVsbG8=", "aGVsbG8", "-_-_", "+/+/", ""])
def test_base64_in_either_alphabet_is_accepted(body: str) -> None:
    assert accepted("cloudtasks.v2", "POST", TASKS_PARENT, task(body=body))


# -- the fixture -----------------------------------------------------------------------------------

INNER = """
import pytest

from tests.fakes.google_api import FakeGoogleApi


@pytest.fixture(scope="session")
def fake():
    return FakeGoogleApi()


def test_records_a_violation(fake):
    fake.violation("Job.uid: output-only field in a request")


def test_starts_clean(fake):
    assert fake.violations == []
"""


@pytest.mark.subprocess
def test_a_recorded_violation_fails_its_test_and_the_next_test_starts_clean(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_inner.py"),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "2 passed, 1 error" in result.stdout, result.stdout + result.stderr  # the call passed, its teardown failed
    assert "ERROR at teardown of test_records_a_violation" in result.stdout
    assert "FakeGoogleApi: Job.uid: output-only field in a request" in result.stdout
