"""What the delivery and runs endpoints accept, in-process: anything a caller can send is either a
precise 400 (field and rule, nothing claimed, the store untouched) or a run. The property-based
version against a real server is tests/test_fuzz.py."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runonce import errors
from runonce.api.main import create_app
from runonce.logs import SPAN_ID, trace_fields
from runonce.run.delivery import Delivery
from runonce.run.runner import Rules, Runner
from runonce.settings import Settings
from runonce.stores.base import FAILED
from runonce.stores.memory import MemoryStore
from runonce.targets import Target
from runonce.targets.http import HttpTarget, HttpTargetConfig
from runonce.targets.scripted import ScriptedTarget
from tests.support.clock import Clock
from tests.support.downstream import Downstream

ROUTES = "routes:\n  etl:\n    target: {type: log}\n    namespace: {project: route-project, location: europe-west1}\n"
JOB = {"X-CloudScheduler-JobName": "nightly", "X-CloudScheduler-ScheduleTime": "2026-10-16T12:00:00Z"}


class SpyStore(MemoryStore):
    """The in-memory store, counting reads and claims (to prove a rejected request never reached it)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    async def get(self, run_id, now):
        self.calls.append("get")
        return await super().get(run_id, now)

    async def claim(self, new, now, lease, retention):
        self.calls.append("claim")
        return await super().claim(new, now, lease, retention)


class Client:
    def __init__(self, http: httpx.AsyncClient, store: SpyStore, target: ScriptedTarget, clock: Clock):
        self.http, self.store, self.target, self.clock = http, store, target, clock

    async def deliver(self, headers: dict | None = None, **kwargs) -> httpx.Response:
        return await self.http.post("/v1/routes/etl:run", headers=JOB if headers is None else headers, **kwargs)


@pytest.fixture
async def client(clock: Clock) -> AsyncIterator[Client]:
    store, target = SpyStore(), ScriptedTarget()
    app = create_app(
        Settings(routes=ROUTES, auth="none", store="sqlite:///unused.db"),
        store=store,
        targets={"etl": target},
        clock=clock,
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runonce") as http,
    ):
        yield Client(http, store, target, clock)


def assert_invalid(response: httpx.Response, field: str, status: int = 400) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["status"] == "invalid" and body["error"]["field"] == field, body
    return body


# -- defect 7: GET /v1/runs/{run_id} --------------------------------------------------------------


@pytest.mark.parametrize("run_id", ["__x__", "%2E%2E", "%2E", "a" * 63, "A" * 64, "g" * 64, "0" * 65, "%20" + "0" * 61])
async def test_a_run_id_that_is_not_64_lowercase_hex_is_400_and_the_store_is_never_called(
    client: Client, run_id: str
) -> None:
    response = await client.http.get(f"/v1/runs/{run_id}")
    body = assert_invalid(response, "run_id")
    assert "64 lowercase hex" in body["error"]["message"]
    assert client.store.calls == []


# -- defect 6: /metrics cardinality ---------------------------------------------------------------


def delivery_series(app) -> set[tuple[str, str]]:
    text = generate_latest(app.state.metrics.registry).decode()
    return {
        (sample.labels["route"], sample.labels["outcome"])
        for family in text_string_to_metric_families(text)
        if family.name == "runonce_deliveries"
        for sample in family.samples
        if sample.name == "runonce_deliveries_total"
    }


async def test_random_route_names_add_no_metric_series(client: Client) -> None:
    app = client.http._transport.app  # type: ignore[attr-defined]
    await client.deliver()
    for _ in range(50):
        response = await client.http.post(f"/v1/routes/{secrets.token_hex(8)}:run", headers=JOB)
        assert response.status_code == 404
    assert delivery_series(app) == {("etl", "processed"), ("_unknown", "not_found")}


async def test_nothing_is_labelled_by_route_before_authentication() -> None:
    settings = Settings(
        routes=ROUTES,
        auth="oidc",
        audience=["https://runonce.example"],
        allowed_callers=["scheduler@p.iam.gserviceaccount.com"],
        store="sqlite:///unused.db",
    )
    app = create_app(settings, store=MemoryStore(), targets={"etl": ScriptedTarget()})
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runonce") as http,
    ):
        for route in ("etl", "not-configured"):
            assert (await http.post(f"/v1/routes/{route}:run", headers=JOB)).status_code == 401
    assert delivery_series(app) == {("_unknown", "unauthenticated")}


# -- defect 2: a body that parses but cannot be sent ----------------------------------------------


def delivery_at(clock: Clock) -> Delivery:
    return Delivery(source="scheduler", project="", location="", route="etl", job="nightly", schedule_time=clock())


def runner_for(target: Target, clock: Clock) -> Runner:
    return Runner(
        MemoryStore(),
        {"etl": target},
        routes={"etl": Rules()},
        lease=timedelta(seconds=300),
        retention=timedelta(days=1),
        dispatch_timeout=timedelta(seconds=30),
        clock=clock,
    )


@pytest.mark.parametrize("content", [b'{"x": 1e400}', b'{"x": [-1e999]}', b'{"a": {"b": 2e308}}'])
async def test_a_body_no_target_could_send_is_400_and_nothing_is_claimed(client: Client, content: bytes) -> None:
    body = assert_invalid(await client.deliver(content=content), "body")
    assert "finite" in body["error"]["message"]
    assert client.store.calls == [] and client.target.dispatched == []


async def test_an_unsendable_payload_reaching_the_runner_fails_and_releases_the_claim(clock: Clock) -> None:
    """The http target's JSON encoder refuses inf before a byte leaves: that is `failed` (502, claim
    released, nothing called), never `unknown` (504, claim kept through lease after lease)."""
    with Downstream() as downstream:
        async with httpx.AsyncClient() as http:
            runner = runner_for(HttpTarget(HttpTargetConfig(type="http", url=f"{downstream.url}/etl"), http), clock)
            with pytest.raises(errors.Failed):
                await runner.run(delivery_at(clock), {"x": float("inf")}, "0" * 64)
        assert downstream.calls == {}
    assert (await runner.store.get(delivery_at(clock).run_id, clock())).status == FAILED


async def test_an_unsendable_payload_is_failed_by_the_runner_before_any_adapter_sees_it(clock: Clock) -> None:
    """The runner checks the payload itself, so an adapter that does not encode it (the scripted
    target here) is never handed one it could not send."""
    target = ScriptedTarget()
    runner = runner_for(target, clock)
    with pytest.raises(errors.Failed, match="finite"):
        await runner.run(delivery_at(clock), {"x": float("nan")}, "0" * 64)
    assert target.dispatched == []
    assert (await runner.store.get(delivery_at(clock).run_id, clock())).status == FAILED


@pytest.mark.parametrize("raised", [httpx.ConnectError("refused"), httpx.PoolTimeout("pool full")])
async def test_a_raw_error_raised_before_sending_is_failed_not_unknown(clock: Clock, raised: Exception) -> None:

    async def never_connects(request):
        raise raised

    runner = runner_for(ScriptedTarget(never_connects), clock)
    with pytest.raises(errors.Failed, match="nothing was sent"):
        await runner.run(delivery_at(clock), {}, "0" * 64)
    assert (await runner.store.get(delivery_at(clock).run_id, clock())).status == FAILED


# -- defect 4: no 500 on bad input; every refusal names its field ---------------------------------

TASK = {"X-CloudTasks-QueueName": "exports", "X-CloudTasks-TaskName": "task-1"}


@pytest.mark.parametrize(
    "content",
    [
        b'{"s": "\\ud800"}',  # a lone surrogate: parses, but is no Unicode string
        b'{"s": "\\udfff\\ud800"}',
        b'{"s": "\xff\xfe"}',  # not UTF-8
        b'{"s": "\xc3"}',
        b"[" * 32000,  # nesting deeper than the parser's recursion limit, within 32 KiB
        b'{"a":' * 5000 + b"1" + b"}" * 5000,
        b'{"a":' * 65 + b"1" + b"}" * 65,  # parses, deeper than any target sends
        b'{"a": 1, "a": 2}',  # duplicate keys: which one is meant?
        b'{"n": 123456789012345678901234567890}',  # beyond 64-bit integers
        b'{"n": -9223372036854775809}',
        b"1" * 5000,  # beyond Python's digit limit
        b'"text"',
        b"[]",
        b"null",
        b"true",
        b"0",
        b"\xef\xbb\xbf{}",  # a UTF-8 BOM
        b"\x00",
    ],
)
async def test_a_bad_body_is_400_naming_the_body_and_nothing_is_claimed(client: Client, content: bytes) -> None:
    assert_invalid(await client.deliver(content=content), "body")
    assert client.store.calls == []


@pytest.mark.parametrize(
    "value",
    [
        "0001-01-01T00:00:00+01:00",  # before datetime's first instant once in UTC
        "0001-01-01T00:00:00Z",
        "0001-01-01T00:00:00-23:59",
        "9999-12-31T23:59:59-01:00",  # after its last
        "9999-12-31T23:59:59.999999Z",
        "9999-12-31T00:00:00+23:59",
        "٢٠٢٦-10-16T12:00:00Z",  # Arabic-Indic digits are digits to str.isdigit and int()
        "2026-10-16T12:00:00Z\n",
        "1969-12-31T23:59:59Z",
    ],
)
async def test_a_schedule_time_outside_the_representable_range_is_400(client: Client, value: str) -> None:
    headers = {**JOB, "X-CloudScheduler-ScheduleTime": value.encode()}  # as UTF-8 bytes: httpx sends str as ASCII
    assert_invalid(await client.deliver(headers=headers), "X-CloudScheduler-ScheduleTime")
    assert client.store.calls == []


@pytest.mark.parametrize(
    ("utc", "offset"),
    [
        ("9998-12-31T23:59:59Z", "9999-01-01T00:59:59+01:00"),  # the last second, in year 9999 east of UTC
        ("1970-01-01T00:00:00Z", "1969-12-31T23:00:00-01:00"),  # the first, in year 1969 west of UTC
    ],
)
async def test_the_schedule_time_window_is_in_utc_whatever_the_offset(client: Client, utc: str, offset: str) -> None:
    """A time inside [1970, 9999) in UTC is accepted however it is written, and keys the same run."""
    first = await client.deliver(headers={**JOB, "X-CloudScheduler-ScheduleTime": utc})
    again = await client.deliver(headers={**JOB, "X-CloudScheduler-ScheduleTime": offset})
    assert first.status_code == again.status_code == 200, again.text
    assert again.json()["run_id"] == first.json()["run_id"] and again.json()["status"] == "duplicate"


async def test_a_project_number_in_the_query_is_400_saying_how_to_find_the_project_id(client: Client) -> None:
    response = await client.http.post("/v1/routes/etl:run?project=123456789012", headers=JOB)
    body = assert_invalid(response, "query.project")
    assert body["error"]["message"] == (
        "is a project number; use the project id (gcloud projects describe NUMBER --format='value(projectId)')"
    )
    assert client.store.calls == []


@pytest.mark.parametrize("header", ["X-CloudTasks-TaskRetryCount", "X-CloudTasks-TaskExecutionCount"])
@pytest.mark.parametrize("value", ["9223372036854775808", "1" * 40, "²", "٣", "-1", "1.0", "0x10", " ", "+1"])
async def test_a_cloud_tasks_counter_that_is_not_a_64_bit_count_is_400(client: Client, header: str, value: str) -> None:
    assert_invalid(await client.deliver(headers={**TASK, header: value.encode()}), header)
    assert client.store.calls == []


async def test_a_64_bit_counter_is_recorded(client: Client) -> None:
    response = await client.deliver(headers={**TASK, "X-CloudTasks-TaskRetryCount": "9223372036854775807"})
    assert response.status_code == 200
    record = await client.store.get(response.json()["run_id"], client.clock())
    assert record.task_retry_count == 9223372036854775807


@pytest.mark.parametrize(
    "header, value",
    [
        ("X-CloudScheduler-JobName", "nïghtly"),
        ("X-CloudScheduler-JobName", "nightly\xa0"),
        ("X-CloudTasks-TaskName", "task\x85"),
    ],
)
async def test_identity_headers_are_ascii_and_only_spaces_and_tabs_are_trimmed(
    client: Client, header: str, value: str
) -> None:
    """str.strip() also strips U+00A0 and U+0085: `nightly\xa0` would have been the job `nightly`."""
    base = TASK if header.startswith("X-CloudTasks") else JOB
    response = await client.deliver(headers={**base, header: value.encode("latin-1")})
    assert_invalid(response, header)
    assert client.store.calls == []


@pytest.mark.parametrize(
    "path",
    [
        "/v1/routes/%00:run",
        "/v1/routes/%FF:run",
        "/v1/routes/" + "x" * 5000 + ":run",
        "/v1/routes/:run",
        "/v1/routes/etl%2Fx:run",
        "/v1/routes/etl:run/",
        "/v1/routes/etl",
        "/v1/routes/ÿ:run",
    ],
)
async def test_a_route_path_that_names_no_route_is_a_json_404(client: Client, path: str) -> None:
    response = await client.http.post(path, headers=JOB)
    assert response.status_code == 404 and response.json()["status"] == "not_found"
    assert client.store.calls == []


async def test_a_wrong_method_is_a_json_405(client: Client) -> None:
    response = await client.http.get("/v1/routes/etl:run", headers=JOB)
    assert response.status_code == 405 and response.json()["status"] == "invalid"


# -- defect 5: only validated values are logged ----------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [f"{'a' * 32}/{'٣' * 3};o=1", f"{'a' * 32}/{'9' * 30};o=1", f"{'a' * 32}/18446744073709551616", f"{'a' * 32}/1\n"],
)
def test_a_trace_span_id_is_logged_only_when_it_is_a_64_bit_decimal(header: str) -> None:
    assert SPAN_ID not in trace_fields({"x-cloud-trace-context": header}, "p")
