"""The one translation of Google API answers and failures into runonce outcomes (`runonce/targets/engine.py`)."""

from __future__ import annotations

import json

import httpx
import pytest
from google.auth.exceptions import RefreshError

from runonce.targets import DispatchRequest, TargetFailed, TargetOutcomeUnknown, TargetThrottled
from runonce.targets.engine import (
    is_already_exists,
    json_of,
    operation_result,
    outcome_for_response,
    reconciling,
    translated,
)
from runonce.targets.workflows import WorkflowsTarget, WorkflowsTargetConfig


def google_error(
    status: int, code: str, message: str, details: list | None = None, headers: dict | None = None
) -> httpx.Response:
    body = {"error": {"code": status, "message": message, "status": code, "details": details or []}}
    return httpx.Response(status, content=json.dumps(body), headers=headers or {})


@pytest.mark.parametrize(
    ("status", "code", "outcome"),
    [
        (429, "RESOURCE_EXHAUSTED", TargetThrottled),
        (503, "RESOURCE_EXHAUSTED", TargetThrottled),  # the canonical code decides, not the HTTP status
        (429, "", TargetThrottled),
        (503, "UNAVAILABLE", TargetOutcomeUnknown),  # "not always safe to retry non-idempotent operations"
        (500, "INTERNAL", TargetOutcomeUnknown),
        (502, "", TargetOutcomeUnknown),
        (500, "UNKNOWN", TargetOutcomeUnknown),
        (501, "UNIMPLEMENTED", TargetFailed),  # the method is not there: nothing ran
        (409, "ABORTED", TargetFailed),
        (400, "INVALID_ARGUMENT", TargetFailed),
        (401, "UNAUTHENTICATED", TargetFailed),
        (403, "PERMISSION_DENIED", TargetFailed),
        (404, "NOT_FOUND", TargetFailed),
        (409, "ALREADY_EXISTS", TargetFailed),
        (504, "DEADLINE_EXCEEDED", TargetOutcomeUnknown),
        (504, "", TargetOutcomeUnknown),
    ],
)
def test_rest_answers(status: int, code: str, outcome: type) -> None:
    result = outcome_for_response(
        "run projects/p/locations/l/jobs/j", google_error(status, code, "the API's own words")
    )
    assert type(result) is outcome
    assert "the API's own words" in result.message
    assert result.message.startswith(f"run projects/p/locations/l/jobs/j: HTTP {status}")


def test_a_legacy_rate_limit_reason_is_throttled_at_any_status() -> None:
    """BigQuery's 403 rateLimitExceeded (the legacy `errors[].reason`) is a rate limit: nothing created."""
    body = {"error": {"code": 403, "message": "slow down", "errors": [{"reason": "rateLimitExceeded"}]}}
    result = outcome_for_response("insert", httpx.Response(403, json=body, headers={"Retry-After": "3"}))
    assert type(result) is TargetThrottled
    assert result.retry_after == 3


@pytest.mark.parametrize(
    ("status", "code", "adopted"),
    [
        (409, "ALREADY_EXISTS", True),
        (400, "ALREADY_EXISTS", True),  # the canonical code decides, whatever the HTTP status
        (409, "", True),  # a 409 without Google's error body: adopted, through a lookup that must find it
        (409, "ABORTED", False),  # a concurrency conflict created nothing
        (200, "", False),
    ],
)
def test_already_exists_is_one_rule_for_every_target(status: int, code: str, adopted: bool) -> None:
    response = google_error(status, code, "taken") if code else httpx.Response(status, text="Conflict")
    assert is_already_exists(response) is adopted


def test_rest_throttle_delay_from_retry_after_or_retry_info() -> None:
    header = outcome_for_response("x", google_error(429, "RESOURCE_EXHAUSTED", "slow", headers={"Retry-After": "12"}))
    info = outcome_for_response(
        "x",
        google_error(
            429,
            "RESOURCE_EXHAUSTED",
            "slow",
            [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "30s"}],
        ),
    )
    neither = outcome_for_response("x", google_error(429, "RESOURCE_EXHAUSTED", "slow"))
    assert (header.retry_after, info.retry_after, neither.retry_after) == (12, 30, None)


def test_resource_exhausted_status_is_throttling_whatever_the_http_status() -> None:
    assert isinstance(outcome_for_response("x", google_error(403, "RESOURCE_EXHAUSTED", "quota")), TargetThrottled)


def test_a_body_that_is_not_googles_error_shape_still_names_the_status() -> None:
    result = outcome_for_response("x", httpx.Response(502, text="<html>Bad Gateway</html>"))
    assert isinstance(result, TargetOutcomeUnknown)
    assert "HTTP 502" in result.message and "Bad Gateway" in result.message


def test_no_credentials_means_nothing_was_sent() -> None:
    with pytest.raises(TargetFailed, match="could not get Google credentials"), translated("run job"):
        raise RefreshError("metadata server unreachable")


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
    ],
)
def test_reconciliation_failures_never_release_the_claim(exc: Exception) -> None:
    with pytest.raises(TargetOutcomeUnknown, match="cannot tell whether this run already started"), reconciling("list"):
        raise exc


# --- a 2xx answer: what it names is the run's execution ----------------------------------------------


@pytest.mark.parametrize(
    ("operation", "execution", "outcome"),
    [
        ({"name": "operations/1", "done": False}, "jobs/j/executions/e", "jobs/j/executions/e"),
        # an operation that failed at once and names no execution: nothing started, release the claim
        ({"name": "operations/2", "done": True, "error": {"code": 9, "message": "job is paused"}}, None, TargetFailed),
        ({"name": "operations/3", "done": True, "error": "broken"}, None, TargetFailed),
        # names nothing but itself: recorded by its own name (the operation can be read later)
        ({"name": "operations/4", "done": False}, None, "operations/4"),
        ({"name": "operations/5", "done": False}, "", "operations/5"),
        # names nothing at all: cannot tell what started, so the claim is kept
        ({"done": False}, None, TargetOutcomeUnknown),
    ],
)
def test_a_long_running_operations_answer_names_the_execution(operation, execution, outcome) -> None:
    if isinstance(outcome, str):
        assert operation_result(operation, execution, "run job j") == outcome
        return
    with pytest.raises(outcome, match=r"^run job j: "):
        operation_result(operation, execution, "run job j")


@pytest.mark.parametrize(
    ("body", "wanted"),
    [
        ("[1, 2]", "an unexpected body"),
        ("<html>ok</html>", "a body that is not JSON"),
        ('"done"', "an unexpected body"),
    ],
)
def test_a_2xx_whose_body_is_no_json_object_keeps_the_claim(body: str, wanted: str) -> None:
    """A 2xx may have created the execution: an answer runonce cannot read is unknown, never failed."""
    with pytest.raises(TargetOutcomeUnknown, match=f"create x: HTTP 200 with {wanted}"):
        json_of("create x", httpx.Response(200, text=body))


def test_a_created_answer_that_names_no_execution_keeps_the_claim() -> None:
    config = WorkflowsTargetConfig(type="workflows", workflow="projects/p-123456/locations/us-central1/workflows/etl")
    target = WorkflowsTarget(config, None, None)  # type: ignore[arg-type]  # only reads an answer
    request = DispatchRequest(run_id="a" * 64, route="r", job="j", schedule_time=None, source="scheduler")
    assert target.created({"name": "projects/p/locations/l/workflows/etl/executions/e1"}, request).endswith("/e1")
    for answer in ({}, {"name": ""}, {"name": 7}):
        with pytest.raises(TargetOutcomeUnknown, match="the answer names no execution"):
            target.created(answer, request)
