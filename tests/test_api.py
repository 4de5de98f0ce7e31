"""The delivery endpoint's contract, row by row of the status table (docs/contract.md), through the ASGI app
(the end-to-end suite repeats the important rows against a real server)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from runonce.api.main import create_app
from runonce.settings import Settings
from runonce.stores import StoreUnavailable
from runonce.stores.memory import MemoryStore
from runonce.targets import DispatchRequest, TargetFailed, TargetOutcomeUnknown, TargetThrottled
from runonce.targets.scripted import ScriptedTarget
from tests.support.api import JOB, ROUTES, Harness, run_id_of
from tests.support.clock import Clock

# -- processed / duplicate ---------------------------------------------------------------------


async def test_processed_then_duplicate_replays_the_stored_result(api: Harness) -> None:
    first = await api.deliver(json={"mode": "full"})
    assert first.status_code == 200
    body = first.json()
    assert body["status"] == "processed" and body["route"] == "etl"
    assert body["target"] == {"type": "scripted", "resource": f"scripted/{body['run_id']}"}
    assert "runonce-replayed" not in first.headers

    again = await api.deliver(json={"mode": "full"})
    assert again.status_code == 200
    assert again.json() == {**body, "status": "duplicate"}
    assert again.headers["runonce-replayed"] == "true"
    assert len(api.target.dispatched) == 1
    assert api.target.dispatched[0].payload == {"mode": "full"}


async def test_run_id_is_the_sha256_of_the_canonical_string(api: Harness) -> None:
    response = await api.deliver(headers={**JOB, "X-CloudScheduler-ScheduleTime": "2026-10-16T12:00:00.250Z"})
    expected = run_id_of("runonce/v1|scheduler|route-project|europe-west1|etl|nightly|2026-10-16T12:00:00.250000Z")
    assert response.json()["run_id"] == expected


async def test_header_names_are_case_insensitive(api: Harness) -> None:
    upper = await api.deliver(
        headers={"X-CLOUDSCHEDULER-JOBNAME": "nightly", "X-CLOUDSCHEDULER-SCHEDULETIME": "2026-10-16T12:00:00Z"}
    )
    lower = await api.deliver(
        headers={"x-cloudscheduler-jobname": "nightly", "x-cloudscheduler-scheduletime": "2026-10-16T12:00:00Z"}
    )
    assert upper.json()["status"] == "processed"
    assert lower.json()["status"] == "duplicate"
    assert upper.json()["run_id"] == lower.json()["run_id"]


async def test_offsets_naming_the_same_instant_are_the_same_run(api: Harness) -> None:
    utc = await api.deliver(headers={**JOB, "X-CloudScheduler-ScheduleTime": "2026-10-16T12:00:00Z"})
    pdt = await api.deliver(headers={**JOB, "X-CloudScheduler-ScheduleTime": "2026-10-16T05:00:00-07:00"})
    ist = await api.deliver(headers={**JOB, "X-CloudScheduler-ScheduleTime": "2026-10-16T17:30:00+05:30"})
    assert utc.json()["run_id"] == pdt.json()["run_id"] == ist.json()["run_id"]
    assert [r.json()["status"] for r in (utc, pdt, ist)] == ["processed", "duplicate", "duplicate"]


async def test_namespace_from_query_overrides_the_route_and_enters_the_key(api: Harness) -> None:
    default = await api.deliver()
    other = await api.client.post("/v1/routes/etl:run?project=other-project&location=us-east1", headers=JOB)
    assert default.json()["run_id"] == run_id_of(
        "runonce/v1|scheduler|route-project|europe-west1|etl|nightly|2026-10-16T12:00:00Z"
    )
    assert other.json()["run_id"] == run_id_of(
        "runonce/v1|scheduler|other-project|us-east1|etl|nightly|2026-10-16T12:00:00Z"
    )
    assert other.json()["status"] == "processed"  # same job, other project: another run
    assert len(api.target.dispatched) == 2


async def test_route_without_namespace_keys_on_empty_project_and_location(api: Harness) -> None:
    response = await api.deliver("bare")
    assert response.json()["run_id"] == run_id_of("runonce/v1|scheduler|||bare|nightly|2026-10-16T12:00:00Z")


async def test_force_run_ahead_of_its_schedule_time_is_a_separate_run(api: Harness) -> None:
    api.clock.now = api.clock.now.replace(hour=11, minute=0)  # an hour before 12:00, the "next" time
    forced = await api.deliver()
    api.clock.now = api.clock.now.replace(hour=12, minute=0, second=3)  # the real run, 3 s late
    scheduled = await api.deliver()

    assert forced.json()["run_id"] == run_id_of(
        "runonce/v1|scheduler-forced|route-project|europe-west1|etl|nightly|2026-10-16T12:00:00Z"
    )
    assert scheduled.json()["status"] == "processed"  # not swallowed by the force run
    assert [d.source for d in api.target.dispatched] == ["scheduler-forced", "scheduler"]


async def test_delivery_within_the_tolerance_before_its_time_is_the_scheduled_run(api: Harness) -> None:
    api.clock.now = api.clock.now.replace(hour=11, minute=59, second=56)  # 4 s early (tolerance 5 s)
    assert (await api.deliver()).json()["run_id"] == run_id_of(
        "runonce/v1|scheduler|route-project|europe-west1|etl|nightly|2026-10-16T12:00:00Z"
    )


async def test_cloud_tasks_delivery_is_keyed_by_queue_and_task(api: Harness) -> None:
    headers = {
        "X-CloudTasks-QueueName": "exports",
        "X-CloudTasks-TaskName": "task-123",
        "X-CloudTasks-TaskRetryCount": "2",
    }
    first = await api.deliver(headers=headers)
    again = await api.deliver(headers={**headers, "X-CloudTasks-TaskRetryCount": "3"})  # counters are not the key
    assert first.json()["run_id"] == run_id_of("runonce/v1|tasks|route-project|europe-west1|etl|exports|task-123")
    assert again.json()["status"] == "duplicate"
    assert api.target.dispatched[0].source == "tasks"


async def test_empty_body_and_empty_object_are_the_same_payload(api: Harness) -> None:
    assert (await api.deliver()).json()["status"] == "processed"
    assert (await api.deliver(json={})).json()["status"] == "duplicate"


async def test_key_order_and_whitespace_do_not_change_the_payload(api: Harness) -> None:
    await api.deliver(content=b'{"a": 1, "b": [1, 2]}')
    assert (await api.deliver(content=b'{"b":[1,2],"a":1}')).json()["status"] == "duplicate"


# -- error rows ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "field"),
    [
        ({}, "X-CloudScheduler-JobName"),
        ({"X-CloudScheduler-JobName": "nightly"}, "X-CloudScheduler-ScheduleTime"),
        ({**JOB, "X-CloudScheduler-ScheduleTime": "yesterday"}, "X-CloudScheduler-ScheduleTime"),
        ({**JOB, "X-CloudScheduler-ScheduleTime": "2026-10-16T12:00:00"}, "X-CloudScheduler-ScheduleTime"),
        ({**JOB, "X-CloudScheduler-ScheduleTime": "2026-02-30T12:00:00Z"}, "X-CloudScheduler-ScheduleTime"),
        ({**JOB, "X-CloudScheduler-ScheduleTime": "2026-10-16T12:00:00.0000001Z"}, "X-CloudScheduler-ScheduleTime"),
        ({**JOB, "X-CloudScheduler-JobName": "a" * 501}, "X-CloudScheduler-JobName"),
        ({**JOB, "X-CloudScheduler-JobName": "bad|name"}, "X-CloudScheduler-JobName"),
        ({**JOB, "X-CloudScheduler-JobName": "   "}, "X-CloudScheduler-JobName"),
        (
            {**JOB, "X-CloudScheduler-ScheduleTime": "2026-10-16T12:00:00Z" + " " * 490 + "x"},
            "X-CloudScheduler-ScheduleTime",
        ),
        ({"X-CloudTasks-QueueName": "q"}, "X-CloudTasks-TaskName"),
        ({**JOB, "X-CloudTasks-QueueName": "q", "X-CloudTasks-TaskName": "t"}, "X-CloudScheduler-JobName"),
    ],
    ids=[
        "no-headers",
        "no-schedule-time",
        "not-a-time",
        "no-offset",
        "feb-30",
        "nanoseconds",
        "job-501-chars",
        "job-with-pipe",
        "blank-job",
        "time-501-chars",
        "queue-without-task",
        "scheduler-and-tasks",
    ],
)
async def test_bad_identity_headers_are_400_with_the_field_and_change_nothing(api: Harness, headers, field) -> None:
    response = await api.deliver(headers=headers)
    assert response.status_code == 400
    body = response.json()
    assert body["status"] == "invalid" and body["route"] == "etl"
    assert body["error"]["field"] == field and body["error"]["message"]
    assert api.target.dispatched == [] and api.store._records == {}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("project=Bad_Project", "query.project"),
        ("location=us%7Ccentral1", "query.location"),
        ("projet=typo-project", "query.projet"),
        ("project=proj-one&project=proj-two", "query.project"),
        ("project=my-project%0A", "query.project"),  # `$` alone matches before a final newline
        ("location=us-central1%0A", "query.location"),
        ("project=my-pr%C3%B6ject", "query.project"),
        ("project=%FF%FE", "query.project"),
        ("project", "query.project"),
        ("location=", "query.location"),
    ],
)
async def test_bad_query_is_400_naming_the_parameter(api: Harness, query: str, field: str) -> None:
    response = await api.client.post(f"/v1/routes/etl:run?{query}", headers=JOB)
    assert response.status_code == 400
    assert response.json()["error"]["field"] == field
    assert api.store._records == {}


async def test_unknown_route_is_404(api: Harness) -> None:
    response = await api.deliver("nope")
    assert response.status_code == 404
    assert response.json()["status"] == "not_found" and response.json()["route"] == "nope"


async def test_body_over_32_kib_is_413_and_changes_nothing(api: Harness) -> None:
    big = json.dumps({"data": "x" * (32 * 1024)}).encode()
    response = await api.deliver(content=big)
    assert response.status_code == 413
    assert response.json()["status"] == "invalid" and response.json()["error"]["field"] == "body"
    assert api.store._records == {}


async def test_body_of_exactly_32_kib_is_accepted(api: Harness) -> None:
    body = b'{"d":"' + b"x" * (32 * 1024 - 8) + b'"}'
    assert len(body) == 32 * 1024
    assert (await api.deliver(content=body)).status_code == 200


@pytest.mark.parametrize("content", [b"not json", b"[1, 2]", b'"text"', b'{"a": NaN}', b"\xff\xfe"])
async def test_body_that_is_not_a_json_object_is_400(api: Harness, content: bytes) -> None:
    response = await api.deliver(content=content)
    assert response.status_code == 400 and response.json()["error"]["field"] == "body"
    assert api.store._records == {}


async def test_same_run_with_another_body_is_422(api: Harness) -> None:
    await api.deliver(json={"mode": "full"})
    response = await api.deliver(json={"mode": "partial"})
    assert response.status_code == 422
    assert response.json()["status"] == "payload_mismatch"
    assert len(api.target.dispatched) == 1


async def test_live_lease_is_409_with_retry_after(api: Harness) -> None:
    api.target.on_dispatch = _raise(TargetOutcomeUnknown("timeout"))
    assert (await api.deliver()).status_code == 504
    api.clock.advance(120)
    response = await api.deliver()
    assert response.status_code == 409
    assert response.json()["status"] == "in_progress"
    assert response.headers["retry-after"] == "180"


async def test_target_failure_is_502_and_the_next_delivery_dispatches_again(api: Harness) -> None:
    api.target.on_dispatch = _raise(TargetFailed("HTTP 500: boom"))
    response = await api.deliver()
    assert response.status_code == 502
    body = response.json()
    assert body["status"] == "failed" and "HTTP 500: boom" in body["error"]["message"]
    assert body["target"] == {"type": "scripted", "resource": None}

    api.target.on_dispatch = ScriptedTarget().on_dispatch
    assert (await api.deliver()).json()["status"] == "processed"
    assert len(api.target.dispatched) == 2


async def test_target_throttle_is_429_with_its_retry_after(api: Harness) -> None:
    api.target.on_dispatch = _raise(TargetThrottled("HTTP 429", retry_after=17.2))
    response = await api.deliver()
    assert response.status_code == 429
    assert response.json()["status"] == "throttled"
    assert response.headers["retry-after"] == "18"
    api.target.on_dispatch = ScriptedTarget().on_dispatch
    assert (await api.deliver()).json()["status"] == "processed"  # released: no lease to wait for


async def test_unknown_outcome_is_504_and_keeps_the_claim(api: Harness) -> None:
    api.target.on_dispatch = _raise(TargetOutcomeUnknown("read timeout"))
    response = await api.deliver()
    assert response.status_code == 504
    assert response.json()["status"] == "unknown"
    assert response.headers["retry-after"] == "300"
    assert (await api.deliver()).status_code == 409


async def test_store_unreachable_is_503_and_the_target_is_never_called(api: Harness) -> None:
    async def down(*args, **kwargs):
        raise StoreUnavailable("connection refused")

    api.store.claim = down  # type: ignore[method-assign]
    response = await api.deliver()
    assert response.status_code == 503
    assert response.json()["status"] == "unavailable"
    assert api.target.dispatched == []


# -- other endpoints -------------------------------------------------------------------------------


async def test_get_run_returns_the_record(api: Harness) -> None:
    run_id = (await api.deliver()).json()["run_id"]
    record = (await api.client.get(f"/v1/runs/{run_id}")).json()
    assert record["run_id"] == run_id and record["status"] == "completed"
    assert record["schedule_time"] == "2026-10-16T12:00:00Z" and record["job"] == "nightly"
    assert record["expire_at"] == "2026-10-17T12:00:00.000000Z"
    assert (await api.client.get(f"/v1/runs/{'0' * 64}")).status_code == 404


async def test_health_and_readiness(api: Harness) -> None:
    health = (await api.client.get("/healthz")).json()
    assert health["status"] == "ok" and "authentication is off" in health["warning"]
    assert (await api.client.get("/readyz")).status_code == 200

    async def down() -> None:
        raise StoreUnavailable("no route to host")

    api.store.ping = down  # type: ignore[method-assign]
    not_ready = await api.client.get("/readyz")
    assert not_ready.status_code == 503 and "no route to host" in not_ready.json()["error"]["message"]


async def test_openapi_documents_every_status(api: Harness) -> None:
    spec = (await api.client.get("/openapi.json")).json()
    responses = spec["paths"]["/v1/routes/{route}:run"]["post"]["responses"]
    assert {"200", "400", "401", "403", "404", "409", "413", "422", "429", "502", "503", "504"} <= set(responses)


def _raise(exc: Exception):
    async def handler(request: DispatchRequest) -> str:
        raise exc

    return handler


async def test_unknown_paths_answer_in_the_same_shape(api: Harness) -> None:
    response = await api.client.get("/nowhere")
    assert response.status_code == 404 and response.json()["status"] == "not_found"


def test_routes_are_validated_at_start_up(tmp_path: Path) -> None:
    from runonce.settings import ConfigError

    bad = tmp_path / "routes.yaml"
    bad.write_text("routes:\n  etl:\n    target: {type: http, url: not-a-url}\n")
    with pytest.raises(ConfigError, match=r"routes file .*routes.yaml: route 'etl': field 'target.url'"):
        create_app(Settings(routes_file=str(bad), auth="none"))


async def test_the_apps_drain_refuses_new_deliveries_with_503(clock: Clock) -> None:
    """`app.state.drain` is what `runonce serve` calls on SIGTERM: the runner the lifespan built
    must then refuse new runs (another instance takes them) and dispatch nothing."""
    target = ScriptedTarget()
    app = create_app(
        Settings(routes=ROUTES, auth="none", store="sqlite:///unused.db"),
        store=MemoryStore(),
        targets={"etl": target, "bare": target},
        clock=clock,
    )
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://runonce") as client,
    ):
        app.state.drain()
        response = await client.post("/v1/routes/etl:run", headers=JOB)
    assert response.status_code == 503 and response.json()["status"] == "unavailable"
    assert "shutting down" in response.json()["error"]["message"] and target.dispatched == []


async def test_starlettes_own_404_and_405_answer_in_runonces_shape(api: Harness) -> None:
    missing = await api.client.post("/v1/nothing-here", headers=JOB)
    assert (missing.status_code, missing.json()) == (
        404,
        {"status": "not_found", "route": None, "error": {"message": "Not Found"}},
    )
    wrong = await api.client.get("/v1/routes/etl:run", headers=JOB)
    assert (wrong.status_code, wrong.json()) == (
        405,
        {"status": "invalid", "route": None, "error": {"message": "Method Not Allowed"}},
    )
    assert wrong.headers["allow"] == "POST"


async def test_a_request_validation_error_answers_400_invalid_naming_the_field() -> None:
    """No endpoint today declares a typed parameter FastAPI could refuse; one that does (say an
    admin endpoint's `?limit=`) gets runonce's answer, not FastAPI's default 422 shape."""
    from fastapi import FastAPI

    from runonce.api.answers import HANDLERS

    app = FastAPI(exception_handlers=HANDLERS)

    @app.get("/v1/things")
    async def things(limit: int) -> dict[str, int]:
        return {"limit": limit}

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runonce") as client:
        response = await client.get("/v1/things", params={"limit": "many"})
    assert response.status_code == 400
    body = response.json()
    assert (body["status"], body["route"], body["error"]["field"]) == ("invalid", None, "query.limit")
    assert "integer" in body["error"]["message"]


async def test_a_validation_error_without_details_still_answers_400_invalid() -> None:
    from fastapi.exceptions import RequestValidationError
    from starlette.requests import Request

    from runonce.api.answers import validation_error

    request = Request({"type": "http", "method": "GET", "path": "/v1/things", "headers": [], "path_params": {}})
    response = await validation_error(request, RequestValidationError([]))
    assert response.status_code == 400
    assert json.loads(response.body) == {
        "status": "invalid",
        "route": None,
        "error": {"message": "invalid request", "field": ""},
    }


def test_an_error_of_no_family_is_a_type_error_naming_its_class() -> None:
    """A DeliveryError leaf added without a family in ANSWERS fails loudly, naming itself."""
    from runonce import errors
    from runonce.api.answers import render

    class Orphan(errors.DeliveryError):
        pass

    with pytest.raises(TypeError, match=r"^Orphan has no answer: add its family to ANSWERS$"):
        render(Orphan("nobody answers this"))


async def test_an_audit_body_over_32_kib_is_413_naming_the_audit_route_and_its_run(api: Harness) -> None:
    """The audit endpoint's path names no route: the 413 still says which route and run it refused."""
    big = json.dumps({"data": "x" * (32 * 1024)}).encode()
    response = await api.client.post("/v1/audit:run", headers=JOB, content=big)
    assert response.status_code == 413
    body = response.json()
    assert (body["status"], body["route"], body["error"]["field"]) == ("invalid", "_audit", "body")
    assert body["run_id"] == run_id_of("runonce/v1|scheduler|||_audit|nightly|2026-10-16T12:00:00Z")
