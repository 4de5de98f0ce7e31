"""Routes whose deliveries come from Pub/Sub push or CloudEvents (Eventarc): each documented kind of
duplicate is one run, a delivery of the wrong shape for its route is refused naming what was
expected, a bad envelope is refused naming the field, and what the target receives."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from runonce.routes import parse_routes
from runonce.settings import ConfigError
from tests.support.api import JOB
from tests.support.clock import Clock
from tests.support.events import (
    FINALIZED,
    METADATA_UPDATED,
    STORAGE_SOURCE,
    SUBSCRIPTION,
    EventsHarness,
    binary,
    cloudevent,
    envelope,
    open_events_api,
    storage_event,
    storage_notification,
    storage_object,
    structured,
)


@pytest.fixture
async def events(clock: Clock):
    async with open_events_api(clock) as harness:
        yield harness


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# -- Pub/Sub push ----------------------------------------------------------------------------------


async def test_a_redelivered_message_is_one_run_and_its_message_reaches_the_target(events: EventsHarness) -> None:
    first = await events.push(envelope("101", attributes={"kind": "order"}))
    again = await events.push(envelope("101", attributes={"kind": "order"}))
    other = await events.push(envelope("102"))
    assert (first.status_code, first.json()["status"]) == (200, "processed")
    assert (again.status_code, again.json()["status"]) == (200, "duplicate")
    assert again.json()["run_id"] == first.json()["run_id"] != other.json()["run_id"]
    # The documented canonical string: source tag pubsub, the identity as sorted JSON.
    canonical = f'runonce/v1|pubsub|||orders|{{"message_id":"101","subscription":"{SUBSCRIPTION}"}}'
    assert first.json()["run_id"] == sha(canonical)
    assert len(events.target.dispatched) == 2
    sent = events.target.dispatched[0]
    assert sent.payload == {
        "subscription": SUBSCRIPTION,
        "messageId": "101",
        "publishTime": "2026-10-16T12:00:00.123Z",
        "attributes": {"kind": "order"},
        "data": {"order": 7},
    }
    assert (sent.source, sent.job, sent.task, sent.schedule_time) == (
        "pubsub",
        SUBSCRIPTION,
        "101",
        "2026-10-16T12:00:00.123000Z",
    )


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"plain text", {"data": "plain text"}),
        (b"[1, 2]", {"data": "[1, 2]"}),  # JSON, but not an object: text
        (b"\xff\xfe", {"dataBase64": "//4="}),  # not UTF-8: as Pub/Sub sent it
        (None, {}),  # attributes only
    ],
)
async def test_message_data_is_an_object_text_or_base64(events: EventsHarness, data, expected) -> None:
    response = await events.push(envelope("7", data))
    assert response.status_code == 200, response.json()
    payload = events.target.dispatched[0].payload
    assert {k: v for k, v in payload.items() if k in ("data", "dataBase64")} == expected


async def test_an_ordering_key_is_kept_and_an_empty_one_is_none(events: EventsHarness) -> None:
    body = envelope("2")
    body["message"]["orderingKey"] = ""
    assert (await events.push(body)).status_code == 200
    body = envelope("3")
    body["message"]["orderingKey"] = "customer-7"
    assert (await events.push(body)).status_code == 200
    assert events.target.dispatched[-1].payload["orderingKey"] == "customer-7"
    assert "orderingKey" not in events.target.dispatched[-2].payload


async def test_event_payload_data_sends_the_data_object_alone(events: EventsHarness) -> None:
    assert (await events.push(envelope("1"), route="order-data")).status_code == 200
    assert events.target.dispatched[0].payload == {"order": 7}
    refused = await events.push(envelope("2", b"text"), route="order-data")
    assert refused.status_code == 400
    assert refused.json()["error"]["field"] == "message.data"
    assert "event_payload: data" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "message"),
        ({"message": "x", "subscription": SUBSCRIPTION}, "message"),
        ({"message": {"data": "e30="}, "subscription": SUBSCRIPTION}, "message.messageId"),
        ({"message": {"messageId": ""}, "subscription": SUBSCRIPTION}, "message.messageId"),
        ({"message": {"messageId": 5}, "subscription": SUBSCRIPTION}, "message.messageId"),
        ({"message": {"messageId": "1", "message_id": "2"}, "subscription": SUBSCRIPTION}, "message.message_id"),
        ({"message": {"messageId": "1"}}, "subscription"),
        ({"message": {"messageId": "1"}, "subscription": "orders"}, "subscription"),
        ({"message": {"messageId": "1"}, "subscription": "projects/123456/subscriptions/s1"}, "subscription"),
        ({"message": {"messageId": "1", "data": "not base64!"}, "subscription": SUBSCRIPTION}, "message.data"),
        ({"message": {"messageId": "1", "data": 5}, "subscription": SUBSCRIPTION}, "message.data"),
        (
            {"message": {"messageId": "1", "publishTime": "yesterday"}, "subscription": SUBSCRIPTION},
            "message.publishTime",
        ),
        ({"message": {"messageId": "1", "attributes": ["a"]}, "subscription": SUBSCRIPTION}, "message.attributes"),
        ({"message": {"messageId": "1", "attributes": {"a": 1}}, "subscription": SUBSCRIPTION}, "message.attributes.a"),
    ],
)
async def test_a_bad_envelope_is_refused_naming_the_field(events: EventsHarness, body, field) -> None:
    response = await events.push(body)
    assert response.status_code == 400
    assert response.json()["status"] == "invalid"
    assert response.json()["error"]["field"] == field
    assert events.target.dispatched == []
    assert await events.store.list(events.clock(), route="orders") == []


@pytest.mark.parametrize(
    ("content", "field"), [(b"not json", "body"), (b"[1]", "message"), (b'{"a":1,"a":2}', "body"), (b"\xff", "body")]
)
async def test_a_body_that_is_no_envelope_is_refused(events: EventsHarness, content, field) -> None:
    response = await events.client.post("/v1/routes/orders:run", content=content)
    assert (response.status_code, response.json()["error"]["field"]) == (400, field)


async def test_an_unwrapped_push_is_refused_saying_why(events: EventsHarness) -> None:
    headers = {"x-goog-pubsub-message-id": "1", "x-goog-pubsub-subscription-name": SUBSCRIPTION}
    response = await events.client.post("/v1/routes/orders:run", content=b"raw data", headers=headers)
    assert response.status_code == 400
    assert "no_wrapper" in response.json()["error"]["message"]


# -- the wrong shape for the route ------------------------------------------------------------------


async def test_an_event_route_refuses_scheduler_and_tasks_headers(events: EventsHarness) -> None:
    for headers in (JOB, {"X-CloudTasks-QueueName": "q", "X-CloudTasks-TaskName": "t"}):
        response = await events.push(envelope("1"), headers=headers)
        assert response.status_code == 400
        assert response.json()["error"]["field"] in headers
        assert "source is pubsub" in response.json()["error"]["message"]
    response = await events.client.post("/v1/routes/uploads:run", headers=JOB, content=b"{}")
    assert response.status_code == 400 and "source is cloudevents" in response.json()["error"]["message"]
    assert events.target.dispatched == []


async def test_a_scheduler_route_refuses_envelopes_and_cloudevents(events: EventsHarness) -> None:
    pushed = await events.push(envelope("1"), route="nightly", headers=JOB)
    assert (pushed.status_code, pushed.json()["error"]["field"]) == (400, "body")
    assert "source: pubsub" in pushed.json()["error"]["message"]
    for mode, field in ((binary, "ce-id"), (structured, "Content-Type")):
        headers, body = mode(cloudevent())
        response = await events.client.post("/v1/routes/nightly:run", headers={**headers, **JOB}, content=body)
        assert (response.status_code, response.json()["error"]["field"]) == (400, field)
        assert "source: cloudevents" in response.json()["error"]["message"]
    unwrapped = await events.client.post(
        "/v1/routes/nightly:run", headers={**JOB, "x-goog-pubsub-message-id": "1"}, content=b"{}"
    )
    assert unwrapped.status_code == 400
    assert events.target.dispatched == []
    # ... and still takes its own deliveries, with the run_id they always had.
    ok = await events.client.post("/v1/routes/nightly:run", headers=JOB)
    assert ok.json()["run_id"] == sha("runonce/v1|scheduler|||nightly|nightly|2026-10-16T12:00:00Z")


# -- CloudEvents -----------------------------------------------------------------------------------


async def test_a_cloudevent_in_either_mode_is_one_run_per_source_and_id(events: EventsHarness) -> None:
    first = await events.event(binary(cloudevent("e-1")))
    again = await events.event(structured(cloudevent("e-1")))
    other_source = await events.event(binary(cloudevent("e-1", source="//example.com/other")))
    assert [r.json()["status"] for r in (first, again, other_source)] == ["processed", "duplicate", "processed"]
    assert first.json()["run_id"] == again.json()["run_id"] != other_source.json()["run_id"]
    source = "//pubsub.googleapis.com/projects/my-project/topics/orders"
    assert first.json()["run_id"] == sha(f'runonce/v1|cloudevents|||uploads|{{"id":"e-1","source":"{source}"}}')
    sent = events.target.dispatched[0]
    assert sent.payload["data"] == {"order": 7}
    assert {k: sent.payload[k] for k in ("id", "source", "type", "specversion")} == {
        "id": "e-1",
        "source": source,
        "type": "com.example.order.created",
        "specversion": "1.0",
    }
    assert (sent.source, sent.job, sent.task, sent.schedule_time) == (
        "cloudevents",
        source,
        "e-1",
        "2026-10-16T12:00:00Z",
    )


async def test_a_repeated_ce_header_is_refused(events: EventsHarness) -> None:
    headers = [("ce-id", "1"), ("ce-id", "2"), ("ce-source", "s"), ("ce-type", "t"), ("ce-specversion", "1.0")]
    response = await events.client.post("/v1/routes/uploads:run", headers=headers, content=b"")
    assert (response.status_code, response.json()["error"]["field"]) == (400, "ce-id")
    assert response.json()["error"]["message"] == "given more than once; an event has one of each attribute"


@pytest.mark.parametrize(
    ("headers", "body", "field"),
    [
        ({"ce-source": "s", "ce-type": "t", "ce-specversion": "1.0"}, b"{}", "ce-id"),
        ({"ce-id": "1", "ce-type": "t", "ce-specversion": "1.0"}, b"{}", "ce-source"),
        ({"ce-id": "1", "ce-source": "s", "ce-specversion": "1.0"}, b"{}", "ce-type"),
        ({"ce-id": "1", "ce-source": "s", "ce-type": "t"}, b"{}", "ce-specversion"),
        ({"ce-id": "1", "ce-source": "s", "ce-type": "t", "ce-specversion": "0.3"}, b"{}", "ce-specversion"),
        ({"ce-id": "", "ce-source": "s", "ce-type": "t", "ce-specversion": "1.0"}, b"{}", "ce-id"),
        ({"ce-id": "1", "ce-source": "s", "ce-type": "t", "ce-specversion": "1.0", "ce-time": "noon"}, b"", "ce-time"),
        (
            {
                "ce-id": "1",
                "ce-source": "s",
                "ce-type": "t",
                "ce-specversion": "1.0",
                "content-type": "application/json",
            },
            b"{bad",
            "body",
        ),
        (
            {"content-type": "application/cloudevents+json"},
            b'{"id": "1", "source": "s", "type": "t"}',
            "body.specversion",
        ),
        ({"content-type": "application/cloudevents+json"}, b"[]", "body"),
        (
            {"content-type": "application/cloudevents+json"},
            b'{"id": 1, "source": "s", "type": "t", "specversion": "1.0"}',
            "body.id",
        ),
        ({"content-type": "application/cloudevents-batch+json"}, b"[]", "Content-Type"),
        ({"content-type": "application/json"}, b"{}", "ce-id"),
    ],
)
async def test_a_bad_cloudevent_is_refused_naming_the_field(events: EventsHarness, headers, body, field) -> None:
    response = await events.client.post("/v1/routes/uploads:run", headers=headers, content=body)
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["field"] == field
    assert events.target.dispatched == []


# -- Cloud Storage: one event under several ids ------------------------------------------------------


async def test_one_storage_notification_under_several_message_ids_is_one_run(events: EventsHarness) -> None:
    answers = [await events.push(storage_notification(message_id)) for message_id in ("901", "902", "903")]
    assert [a.json()["status"] for a in answers] == ["processed", "duplicate", "duplicate"]
    assert len(events.target.dispatched) == 1
    identity = '{"bucket":"uploads","event_type":"OBJECT_FINALIZE","generation":"1700000000000001","object":"in/a.csv"}'
    assert answers[0].json()["run_id"] == sha(f"runonce/v1|pubsub|||orders|{identity}")
    # Another generation, another event type: other runs.
    newer = await events.push(storage_notification("904", obj=storage_object(generation="1700000000000002")))
    deleted = await events.push(storage_notification("905", "OBJECT_DELETE"))
    assert [newer.json()["status"], deleted.json()["status"]] == ["processed", "processed"]


async def test_storage_metadata_updates_are_told_apart_by_metageneration(events: EventsHarness) -> None:
    update = "OBJECT_METADATA_UPDATE"
    one = await events.push(storage_notification("1", update, storage_object(metageneration="2")))
    same = await events.push(storage_notification("2", update, storage_object(metageneration="2")))
    next_one = await events.push(storage_notification("3", update, storage_object(metageneration="3")))
    assert [r.json()["status"] for r in (one, same, next_one)] == ["processed", "duplicate", "processed"]
    bare = storage_notification("4", update)
    bare["message"].pop("data")
    refused = await events.push(bare)
    assert (refused.status_code, refused.json()["error"]["field"]) == (400, "message.data.metageneration")


async def test_one_eventarc_storage_event_under_several_ids_is_one_run(events: EventsHarness) -> None:
    answers = [
        await events.event(mode(storage_event(f"ev-{n}"))) for n, mode in enumerate((binary, structured, binary))
    ]
    assert [a.json()["status"] for a in answers] == ["processed", "duplicate", "duplicate"]
    updated = [
        await events.event(binary(storage_event(f"m-{n}", METADATA_UPDATED, storage_object(metageneration=m))))
        for n, m in enumerate(("2", "2", "3"))
    ]
    assert [a.json()["status"] for a in updated] == ["processed", "duplicate", "processed"]
    bad = await events.event(binary(storage_event("x", FINALIZED, {"bucket": "uploads", "name": "a"})))
    assert (bad.status_code, bad.json()["error"]["field"]) == (400, "body.generation")
    assert len(events.target.dispatched) == 3
    assert events.target.dispatched[0].job == STORAGE_SOURCE


async def test_a_route_chooses_its_identity_keys(clock: Clock) -> None:
    routes = """
routes:
  by-object: {target: {type: log}, source: pubsub, identity: [bucket, object]}
  by-subject: {target: {type: log}, source: cloudevents, identity: [type, subject]}
"""
    async with open_events_api(clock, routes) as events:
        first = await events.push(storage_notification("1"), route="by-object")
        newer = storage_notification("2", obj=storage_object(generation="9"))
        assert (await events.push(newer, route="by-object")).json()["status"] == "duplicate"
        missing = await events.push(envelope("3"), route="by-object")
        assert (missing.status_code, missing.json()["error"]["field"]) == (400, "identity.bucket")
        a = await events.event(binary(cloudevent("1", subject="orders/7")), route="by-subject")
        b = await events.event(binary(cloudevent("2", source="//elsewhere", subject="orders/7")), route="by-subject")
        assert (a.json()["status"], b.json()["status"]) == ("processed", "duplicate")
        assert first.json()["run_id"] == sha('runonce/v1|pubsub|||by-object|{"bucket":"uploads","object":"in/a.csv"}')


# -- scheduled-run features on events --------------------------------------------------------------


async def test_lateness_is_measured_from_the_publish_time(clock: Clock) -> None:
    routes = "routes:\n  late: {target: {type: log}, source: pubsub, max_lateness_seconds: 60}\n"
    async with open_events_api(clock, routes) as events:
        clock.now = clock.now.replace(minute=5)  # 12:05, the message was published at 12:00
        late = await events.push(envelope("1"), route="late")
        assert (late.json()["status"], late.json()["reason"]) == ("skipped", "late")
        fresh = await events.push(envelope("2", publish_time="2026-10-16T12:04:30Z"), route="late")
        assert fresh.json()["status"] == "processed"
        assert [r.task for r in events.target.dispatched] == ["2"]


@pytest.mark.parametrize(
    "field",
    [
        "job: nightly",
        "schedule: '0 * * * *'",
        "catch_up: latest",
        "missing_schedule_time: snap",
        "forced_runs: reject",
        "time_zone: Europe/Paris",
        "body: {a: 1}",
    ],
)
def test_an_event_route_refuses_the_fields_of_schedules_and_missed_runs(field: str) -> None:
    text = f"routes:\n  r:\n    target: {{type: log}}\n    source: pubsub\n    {field}\n"
    with pytest.raises(ConfigError, match=rf"route 'r': .*field '{field.split(':')[0]}'.*source: scheduler"):
        parse_routes(text, "routes")


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ("source: pubsub\n    identity: [id]", "unknown key 'id' for source pubsub"),
        ("source: cloudevents\n    identity: [message_id]", "unknown key 'message_id'"),
        ("source: pubsub\n    identity: [bucket, bucket]", "listed twice"),
        ("source: pubsub\n    identity: []", "identity"),
        ("identity: [bucket]", "applies only to routes with source pubsub or cloudevents"),
        ("event_payload: data", "applies only to routes with source pubsub or cloudevents"),
        ("source: kafka", "source"),
    ],
)
def test_event_fields_are_checked_at_start_up(fields: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_routes(f"routes:\n  r:\n    target: {{type: log}}\n    {fields}\n", "routes")


def test_canonical_strings_of_scheduler_and_tasks_are_unchanged() -> None:
    """The event fields leave every Scheduler and Tasks run_id as it was."""
    from runonce.run.delivery import Delivery, parse_rfc3339

    scheduled = Delivery("scheduler", "p", "l", "r", "job", parse_rfc3339("2026-10-16T12:00:00Z", "t"))
    task = Delivery("tasks", "p", "l", "r", "queue", task="t1")
    assert scheduled.canonical == "runonce/v1|scheduler|p|l|r|job|2026-10-16T12:00:00Z"
    assert task.canonical == "runonce/v1|tasks|p|l|r|queue|t1"


def test_identity_values_cannot_pass_for_other_keys() -> None:
    """JSON quotes each value: a value holding `"`, `,` or `|` is never another identity."""
    from runonce.run.delivery import Delivery

    a = Delivery("pubsub", "", "", "r", "s", identity=(("message_id", '1","subscription":"x'), ("subscription", "y")))
    b = Delivery("pubsub", "", "", "r", "s", identity=(("message_id", "1"), ("subscription", 'x","subscription":"y')))
    c = Delivery("cloudevents", "", "", "r", "s", identity=(("id", "a|b"), ("source", "c")))
    d = Delivery("cloudevents", "", "", "r", "s", identity=(("id", "a"), ("source", "b|c")))
    assert len({a.run_id, b.run_id}) == 2 and len({c.run_id, d.run_id}) == 2


async def test_base64_and_raw_json_envelopes_agree(events: EventsHarness) -> None:
    """The body as bytes on the wire, whatever its key order or spacing, is the same run."""
    body = envelope("55")
    raw = json.dumps(dict(reversed(list(body.items()))), indent=2).encode()
    first = await events.client.post("/v1/routes/orders:run", content=raw)
    again = await events.push(body)
    assert (first.json()["status"], again.json()["status"]) == ("processed", "duplicate")
    assert base64.b64decode(body["message"]["data"]) == b'{"order": 7}'


async def test_overlap_skip_holds_an_event_while_the_previous_execution_runs(clock: Clock) -> None:
    routes = """
routes:
  serial:
    source: pubsub
    overlap: skip
    target: {type: workflows, workflow: projects/my-project/locations/europe-west1/workflows/w}
"""
    async with open_events_api(clock, routes) as events:
        running = {"now": True}

        async def is_running(resource: str) -> bool:
            return running["now"]

        events.target.on_is_running = is_running
        first = await events.push(envelope("1"), route="serial")
        second = await events.push(envelope("2"), route="serial")
        assert first.json()["status"] == "processed"
        assert (second.json()["status"], second.json()["reason"]) == ("skipped", "overlap")
        again = await events.push(envelope("2"), route="serial")  # a redelivery replays the skip: acked
        assert (again.status_code, again.json()["status"]) == (200, "skipped")
        running["now"] = False
        third = await events.push(envelope("3"), route="serial")
        assert third.json()["status"] == "processed"
        assert [r.task for r in events.target.dispatched] == ["1", "3"]


async def test_status_counts_event_runs_by_route(events: EventsHarness) -> None:
    await events.push(envelope("1"))
    await events.push(envelope("1"))
    await events.event(binary(cloudevent("e-1")))
    status = (await events.client.get("/v1/status")).json()
    by_route = {row["route"]: row for row in status["routes"]}
    assert by_route["orders"]["counts"] == {"completed": 1}
    assert by_route["uploads"]["counts"] == {"completed": 1}
    assert by_route["orders"]["last_status"] == "completed"


def test_the_pubsub_column_acks_exactly_the_answers_pubsub_acks() -> None:
    """Pub/Sub push acks 102, 200, 201, 202 and 204: the statuses reference must say ack for those
    answers and nack (or never answered on event routes) for every other."""
    from runonce.api.answers import ANSWERS, SUCCESSES

    for answer in (*SUCCESSES, *ANSWERS.values()):
        acked = answer.http_status in (102, 200, 201, 202, 204)
        assert answer.pubsub.startswith("ack") == acked, answer
        assert acked or answer.pubsub.startswith(("nack", "not answered on event routes")), answer
