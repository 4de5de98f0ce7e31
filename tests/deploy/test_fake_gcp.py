"""The fake of Google's APIs holds gcloud to the discovery documents: each check below is shown to
catch what it is for, recorded in `violations` (which fails the test that used the fake) and
answered 400, never raised past the handler."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fake_gcp import FakeGoogle

pytestmark = pytest.mark.deploy

JOBS = "v1/projects/demo-project/locations/europe-west1/jobs"
JOB = {"name": f"{JOBS[3:]}/j", "schedule": "0 3 * * *", "httpTarget": {"uri": "https://h/v1/routes/r:run"}}


@pytest.fixture
def fake() -> Iterator[FakeGoogle]:
    with FakeGoogle() as server:
        yield server


def send(fake: FakeGoogle, api: str, method: str, path: str, body: object = None) -> httpx.Response:
    return httpx.request(
        method, f"http://127.0.0.1:{fake.port}/{path}", json=body, headers={"Host": f"{api}.fake.invalid"}, timeout=10
    )


def test_a_valid_request_records_nothing(fake: FakeGoogle) -> None:
    answer = send(fake, "cloudscheduler", "POST", JOBS, JOB)
    assert answer.status_code == 200 and fake.violations == []


@pytest.mark.parametrize(
    ("api", "method", "path", "body", "violation"),
    [
        ("cloudscheduler", "POST", JOBS, {**JOB, "state": "ENABLED"}, "Job.state: output-only field in a request"),
        (
            "cloudscheduler",
            "POST",
            JOBS,
            {**JOB, "httpTarget": {**JOB["httpTarget"], "body": "not base64!"}},
            "Job.httpTarget.body: 'not base64!' is not base64",
        ),
        (
            "firestore",
            "POST",
            "v1/projects/demo-project/databases/(default)/documents:batchGet",
            {"documents": [], "readTime": "2026-10-16 12:00"},
            "readTime: '2026-10-16 12:00' is not an RFC 3339 timestamp",
        ),
        (
            "cloudscheduler",
            "GET",
            f"{JOBS}/j?view=FULL",
            None,
            "cloudscheduler.projects.locations.jobs.get: query parameter 'view' is not one the method lists",
        ),
        ("cloudscheduler", "POST", JOBS, {**JOB, "colour": "blue"}, "Job: unknown field 'colour'"),
    ],
    ids=["output-only", "bad-base64", "not-rfc3339", "unknown-query-parameter", "unknown-field"],
)
def test_each_contract_check_records_a_violation_and_answers_400(
    fake: FakeGoogle, api: str, method: str, path: str, body: object, violation: str
) -> None:
    answer = send(fake, api, method, path, body)
    assert answer.status_code == 400
    assert len(fake.violations) == 1 and violation in fake.violations[0], fake.violations
    assert answer.json()["error"]["status"] == "INVALID_ARGUMENT"


def test_a_fake_that_fails_on_a_request_records_it_instead_of_dropping_the_connection(fake: FakeGoogle) -> None:
    answer = send(fake, "cloudscheduler", "POST", f"{JOBS}/missing-name", {})  # no such method: recorded
    assert answer.status_code == 400 and "no such method" in fake.violations[0]
    fake.violations.clear()
    answer = send(fake, "iam", "POST", "v1/projects/demo-project/roles", {"role": {}})  # no roleId: the fake's KeyError
    assert answer.status_code == 500 and "the fake failed on this request: KeyError('roleId')" in fake.violations[0]
