"""The `cloud_tasks_task` adapter in-process, against the fake Cloud Tasks API: what it sends, how
Cloud Tasks' dedupe by name completes a run, and how reconciliation and the state read decide."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from pydantic import ValidationError

from runonce.targets import DispatchRequest, TargetFailed, TargetOutcomeUnknown
from runonce.targets.cloud_tasks_task import CloudTasksTaskTarget, CloudTasksTaskTargetConfig
from runonce.targets.google import GoogleAuth
from tests.fakes.cloud_tasks import CREATE, EXISTED_RECENTLY, EXISTS, GET, FakeCloudTasks
from tests.fakes.metadata import FakeMetadataServer, MetadataTokenAuth

QUEUE = "projects/runonce-test/locations/us-central1/queues/exports"
URL = "https://export-abc123-uc.a.run.app/run"
SERVICE_ACCOUNT = "tasks-invoker@runonce-test.iam.gserviceaccount.com"


@pytest.fixture(scope="module")
def fake(metadata: FakeMetadataServer) -> Iterator[FakeCloudTasks]:
    fake = FakeCloudTasks(metadata)
    fake.add_queue(QUEUE)
    yield fake
    fake.close()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5) as client:
        yield client


@pytest.fixture
def auth(metadata: FakeMetadataServer) -> MetadataTokenAuth:
    return MetadataTokenAuth(metadata.host)


def config(**http_request: object) -> CloudTasksTaskTargetConfig:
    return CloudTasksTaskTargetConfig.model_validate(
        {"type": "cloud_tasks_task", "queue": QUEUE, "http_request": {"url": URL, **http_request}}
    )


def target_for(
    fake: FakeCloudTasks, http: httpx.AsyncClient, auth: GoogleAuth, **http_request: object
) -> CloudTasksTaskTarget:
    return CloudTasksTaskTarget(config(**http_request), http, auth, fake.url)


def request_for(
    name: str, *, payload: dict | None = None, task: str | None = None, created_at: datetime | None = None
) -> DispatchRequest:
    return DispatchRequest(
        run_id=hashlib.sha256(name.encode()).hexdigest(),
        route="exports",
        job="nightly-export",
        schedule_time="2026-10-16T12:00:00Z",
        source="scheduler",
        payload=payload or {},
        task=task,
        created_at=created_at or datetime.now(UTC),
    )


# -- what is sent ----------------------------------------------------------------------------------


async def test_the_task_carries_the_run_as_the_http_target_sends_it(fake, http, auth) -> None:
    target = target_for(
        fake,
        http,
        auth,
        headers={"X-Team": "data"},
        oidc_token={"service_account_email": SERVICE_ACCOUNT, "audience": "https://export.example.com"},
    )
    request = request_for("sent", payload={"mode": "full", "n": 3})
    name = await target.dispatch(request)

    assert name == f"{QUEUE}/tasks/{request.run_id}"
    assert fake.created_for(request.run_id) == [name]
    delivered = fake.delivered(name)
    assert delivered["method"] == "POST" and delivered["url"] == URL
    assert delivered["headers"] == {
        "X-Team": "data",
        "Idempotency-Key": request.run_id,
        "Content-Type": "application/json",
    }
    assert delivered["oidcToken"] == {"serviceAccountEmail": SERVICE_ACCOUNT, "audience": "https://export.example.com"}
    assert delivered["body"] == {
        "run_id": request.run_id,
        "job": "nightly-export",
        "schedule_time": "2026-10-16T12:00:00Z",
        "source": "scheduler",
        "payload": {"mode": "full", "n": 3},
    }


async def test_the_body_is_byte_for_byte_the_http_targets(fake, http, auth) -> None:
    """Same encoding as the `http` target (compact, UTF-8 unescaped), a Cloud Tasks delivery's `task` included."""
    from runonce.targets.http import HttpTarget, HttpTargetConfig

    request = request_for("bytes", payload={"city": "Zürich"}, task="task-7")
    sent: list[bytes] = []
    transport = httpx.MockTransport(lambda r: sent.append(r.content) or httpx.Response(200))
    async with httpx.AsyncClient(transport=transport) as client:
        await HttpTarget(HttpTargetConfig(type="http", url=URL), client).dispatch(request)
    task = target_for(fake, http, auth).task(request)
    assert base64.b64decode(task["httpRequest"]["body"]) == sent[0]
    assert json.loads(sent[0])["task"] == "task-7"


async def test_put_and_patch_are_sent_as_configured(fake, http, auth) -> None:
    for method in ("PUT", "PATCH"):
        request = request_for(f"method-{method}")
        name = await target_for(fake, http, auth, http_method=method).dispatch(request)
        assert fake.delivered(name)["method"] == method


async def test_a_payload_no_task_can_carry_sends_nothing(fake, http, auth) -> None:
    request = request_for("nan", payload={"x": float("nan")})
    creates = fake.calls[CREATE]
    with pytest.raises(TargetFailed, match="not finite"):
        await target_for(fake, http, auth).dispatch(request)
    assert fake.calls[CREATE] == creates


# -- dedupe by name --------------------------------------------------------------------------------


async def test_already_exists_completes_the_run_with_its_task(fake, http, auth, caplog) -> None:
    target = target_for(fake, http, auth)
    request = request_for("twice")
    first = await target.dispatch(request)
    with caplog.at_level("INFO", logger="runonce.target.cloud_tasks_task"):
        assert await target.dispatch(request) == first  # 409 "Requested entity already exists"
    assert f"run {request.run_id}: task {first} already exists; nothing created" in caplog.messages
    fake.finish(first)
    assert await target.dispatch(request) == first  # 409 "… existed too recently"
    assert fake.created_for(request.run_id) == [first]
    assert fake.calls[CREATE] >= 3


async def test_the_fake_answers_a_duplicate_name_as_cloud_tasks_does(fake, http, auth) -> None:
    request = request_for("shape")
    task = target_for(fake, http, auth).task(request)
    headers = {"Authorization": f"Bearer {await auth.access_token()}"}
    url = f"{fake.url}/v2/{QUEUE}/tasks"
    assert (await http.post(url, json={"task": task}, headers=headers)).status_code == 200
    again = await http.post(url, json={"task": task}, headers=headers)
    assert again.status_code == 409
    assert again.json() == {"error": {"code": 409, "message": EXISTS, "status": "ALREADY_EXISTS"}}
    fake.finish(task["name"])
    recent = await http.post(url, json={"task": task}, headers=headers)
    assert recent.json()["error"]["message"] == EXISTED_RECENTLY


async def test_a_409_that_is_not_already_exists_is_a_refusal(fake, http, auth) -> None:
    fake.fail(CREATE, "ABORTED", "The operation was aborted.", http_status=409)
    request = request_for("aborted")
    with pytest.raises(TargetFailed, match="HTTP 409 ABORTED: The operation was aborted"):
        await target_for(fake, http, auth).dispatch(request)
    assert fake.created_for(request.run_id) == []


async def test_google_is_the_default_endpoint_and_a_refused_connection_sends_nothing(http, auth) -> None:
    from tests.support.procs import free_port

    seen: list[str] = []
    transport = httpx.MockTransport(lambda r: seen.append(str(r.url)) or httpx.Response(200, json={}))
    async with httpx.AsyncClient(transport=transport) as client:
        request = request_for("default-endpoint")
        await CloudTasksTaskTarget(config(), client, auth).dispatch(request)
    assert seen == [f"https://cloudtasks.googleapis.com/v2/{QUEUE}/tasks"]

    closed = CloudTasksTaskTarget(config(), http, auth, f"http://127.0.0.1:{free_port()}")
    with pytest.raises(
        TargetFailed, match=f"^create task {QUEUE}/tasks/[0-9a-f]{{64}}: could not connect, nothing was sent"
    ):
        await closed.dispatch(request)
    with pytest.raises(TargetOutcomeUnknown, match=f"get task {QUEUE}/tasks/[0-9a-f]{{64}}: could not connect"):
        await closed.reconcile(request)


async def test_a_missing_queue_is_a_refusal_with_the_apis_message(fake, http, auth) -> None:
    target = CloudTasksTaskTarget(
        CloudTasksTaskTargetConfig(
            type="cloud_tasks_task", queue=QUEUE.replace("exports", "gone"), http_request={"url": URL}
        ),
        http,
        auth,
        fake.url,
    )
    with pytest.raises(TargetFailed, match="HTTP 404 NOT_FOUND: Queue does not exist"):
        await target.dispatch(request_for("no-queue"))


# -- reconciliation and state ----------------------------------------------------------------------


async def test_reconcile_finds_a_queued_task_and_lets_a_recent_run_re_send(fake, http, auth) -> None:
    target = target_for(fake, http, auth)
    request = request_for("reconciled")
    name = await target.dispatch(request)
    assert await target.reconcile(request) == name  # still queued: 200
    fake.finish(name)
    assert await target.reconcile(request) is None  # gone, but the name is remembered: a re-send is 409
    assert await target.dispatch(request) == name
    assert await target.reconcile(request_for("never-sent")) is None
    assert fake.created_for(request.run_id) == [name]


async def test_reconcile_past_the_name_memory_cannot_tell(fake, http, auth) -> None:
    """A run first claimed more than ~50 minutes ago whose task is not in the queue: it may have run
    and been forgotten, so a re-send could run it twice. Never dispatched blind."""
    target = target_for(fake, http, auth)
    claimed = datetime.now(UTC) - timedelta(minutes=51)
    old = request_for("old", created_at=claimed)
    with pytest.raises(
        TargetOutcomeUnknown, match=r"cannot tell whether this run already started: task .* is not in the queue"
    ) as raised:
        await target.reconcile(old)
    assert raised.value.message.endswith(
        f"the run was first claimed at {claimed:%Y-%m-%dT%H:%M:%SZ}, so a task it created may have run and been "
        "deleted "
        "longer ago than Cloud Tasks remembers its name (about an hour); a re-send could run it twice"
    )
    unknown_age = DispatchRequest(**{**old.__dict__, "created_at": None})
    with pytest.raises(TargetOutcomeUnknown, match="first claimed at an unknown time"):
        await target.reconcile(unknown_age)
    recent = request_for("recent", created_at=datetime.now(UTC) - timedelta(minutes=49))
    assert await target.reconcile(recent) is None
    # A task still queued is found whatever the run's age (tasks may wait in a queue for days).
    name = await target.dispatch(old)
    assert await target.reconcile(old) == name


async def test_is_running_while_queued_and_done_once_deleted(fake, http, auth) -> None:
    target = target_for(fake, http, auth)
    name = await target.dispatch(request_for("state"))
    assert await target.is_running(name) is True
    fake.finish(name)
    assert await target.is_running(name) is False


@pytest.mark.parametrize("code", ["PERMISSION_DENIED", "UNAVAILABLE", "INTERNAL", "RESOURCE_EXHAUSTED"])
async def test_is_running_cannot_tell_on_any_other_answer(fake, http, auth, code: str) -> None:
    target = target_for(fake, http, auth)
    name = await target.dispatch(request_for(f"state-{code}"))
    fake.fail(GET, code, "no state for you")
    with pytest.raises(TargetOutcomeUnknown) as raised:
        await target.is_running(name)
    assert raised.value.message.startswith(f"cannot read the state of {name}: get {name}: HTTP ")
    assert raised.value.message.endswith(": no state for you")


async def test_a_404_without_googles_not_found_is_not_done(http, auth) -> None:
    """A proxy's or a wrong endpoint's 404 says nothing about the task."""
    transport = httpx.MockTransport(lambda r: httpx.Response(404, text="<html>Not Found</html>"))
    async with httpx.AsyncClient(transport=transport) as client:
        target = CloudTasksTaskTarget(config(), client, auth, "http://127.0.0.1:9")
        with pytest.raises(TargetOutcomeUnknown, match="HTTP 404"):
            await target.is_running(f"{QUEUE}/tasks/x")
        with pytest.raises(TargetOutcomeUnknown, match="cannot tell"):
            await target.reconcile(request_for("proxy"))


# -- configuration ---------------------------------------------------------------------------------


def test_defaults() -> None:
    http_request = config().http_request
    assert (http_request.http_method, http_request.headers, http_request.oidc_token) == ("POST", {}, None)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"queue": "exports"}, "must be a queue's full name, projects/PROJECT/locations/LOCATION/queues/QUEUE"),
        (
            {"queue": "projects/runonce-test/locations/us-central1/queues/ex_ports"},
            "the queue ID 'ex_ports' must be 1-100 characters of A-Z a-z 0-9 -",
        ),
        ({"queue": f"projects/runonce-test/locations/us-central1/queues/{'q' * 101}"}, "must be 1-100 characters"),
        ({"queue": "projects/Runonce/locations/us-central1/queues/q"}, "the project 'Runonce' is not a project ID"),
        ({"url": "ftp://example.com/x"}, "must be an http:// or https:// URL with a host (got 'ftp://example.com/x')"),
        ({"url": "https:///path"}, "must be an http:// or https:// URL with a host"),
        ({"url": "https://example.com/a b"}, "must be an http:// or https:// URL with a host"),
        ({"url": "https://example.com/\x7f"}, "holds the control character '\\x7f' at position 20; a URL holds none"),
        ({"url": "https://example.com/a\x00b"}, "holds the control character '\\x00' at position 21"),
        ({"url": "https://example.com/\x1b[0m"}, "holds the control character '\\x1b'"),
        ({"url": "https://example.com/x\n"}, "holds the control character '\\n'"),
        ({"url": "https://exa\x01mple.com/"}, "percent-encode it"),
        ({"url": "https://example.com/" + "x" * 2070}, "is longer than Cloud Tasks' 2083 characters"),
        (
            {"http_method": "GET"},
            "must be POST, PUT or PATCH, in capitals: the run travels as the request body, and Cloud Tasks "
            "sends a body with no other method (got 'GET')",
        ),
        ({"http_method": "DELETE"}, "must be POST, PUT or PATCH, in capitals: the run travels"),
        ({"http_method": "post"}, "must be POST, PUT or PATCH, in capitals: the run travels"),
        ({"url": "https://example.com:99999/hook"}, "has a port that is not one (1-65535)"),
        ({"url": "https://example.com:0/hook"}, "has a port that is not one (1-65535)"),
        ({"headers": {"Idempotency-Key": "x"}}, "header 'Idempotency-Key' is set by runonce"),
        ({"headers": {"content-type": "text/plain"}}, "header 'content-type' is set by runonce"),
        ({"headers": {"Host": "x"}}, "header 'Host' is set by Cloud Tasks"),
        ({"headers": {"User-Agent": "x"}}, "header 'User-Agent' is set by Cloud Tasks"),
        ({"headers": {"X-Google-Foo": "x"}}, "header 'X-Google-Foo' is set by Cloud Tasks"),
        ({"headers": {"X-AppEngine-Country": "x"}}, "header 'X-AppEngine-Country' is set by Cloud Tasks"),
        ({"headers": {"X-CloudTasks-TaskName": "x"}}, "header 'X-CloudTasks-TaskName' is set by Cloud Tasks"),
        ({"headers": {"Bad Name": "x"}}, "header name 'Bad Name' is not an HTTP token"),
        ({"headers": {"X-A": "line\nbreak"}}, "header 'X-A': the value holds a control character"),
        ({"headers": {"X-Big": "x" * 82000}}, "Cloud Tasks takes less than 80 KB"),
        (
            {"headers": {"Authorization": "Bearer x"}, "oidc_token": {"service_account_email": SERVICE_ACCOUNT}},
            "header Authorization: Cloud Tasks sets it from oidc_token",
        ),
        ({"oidc_token": {"service_account_email": "someone@example.com"}}, "must be a service account's email"),
        ({"oidc_token": {"service_account_email": SERVICE_ACCOUNT, "audience": ""}}, "at least 1 character"),
        ({"oidc_token": {"email": SERVICE_ACCOUNT}}, "Extra inputs are not permitted"),
        ({"body": "x"}, "Extra inputs are not permitted"),
    ],
)
def test_each_mistake_is_named(fields: dict, expected: str) -> None:
    fields = dict(fields)  # the parameter is shared by every run of this case (mutmut runs it twice in one process)
    queue = fields.pop("queue", QUEUE)
    with pytest.raises(ValidationError) as raised:
        CloudTasksTaskTargetConfig.model_validate(
            {"type": "cloud_tasks_task", "queue": queue, "http_request": {"url": URL, **fields}}
        )
    assert expected in str(raised.value)


def test_a_static_authorization_header_is_allowed_without_oidc() -> None:
    assert config(headers={"Authorization": "Bearer static"}).http_request.headers == {"Authorization": "Bearer static"}


def test_a_routes_file_mistake_names_the_route_and_the_field() -> None:
    from runonce.routes import parse_routes
    from runonce.settings import ConfigError

    text = (
        f"routes:\n  r:\n    target: {{type: cloud_tasks_task, queue: {QUEUE}, "
        f"http_request: {{url: '{URL}', http_method: GET}}}}\n"
    )
    with pytest.raises(ConfigError) as raised:
        parse_routes(text, "routes file r.yaml")
    assert str(raised.value) == (
        "routes file r.yaml: route 'r': field 'target.http_request.http_method': must be POST, PUT or PATCH, in "
        "capitals: the run travels as the request body, and Cloud Tasks sends a body with no other method (got 'GET')"
    )
    routes = parse_routes(text.replace("GET", "PUT"), "routes file r.yaml")
    assert routes["r"].target.http_request.http_method == "PUT"
