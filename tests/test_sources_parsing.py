"""The event parsers one request at a time (runonce/run/pubsub.py, cloudevents.py, events.py,
sources.py): what each field becomes, and the field and reason of each refusal."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from runonce.errors import InvalidDelivery
from runonce.run import pubsub
from runonce.run.cloudevents import is_cloudevent, parse_cloudevent
from runonce.run.events import EventPolicy, decode_base64, event_delivery, generation, text_field
from runonce.run.pubsub import is_envelope, parse_pubsub
from runonce.run.sources import parse_event, refuse_envelope, refuse_event_headers
from tests.support.events import SUBSCRIPTION, envelope, storage_notification, storage_object

STRUCTURED = {"content-type": "application/cloudevents+json"}
BINARY = {"ce-id": "e1", "ce-source": "//s", "ce-type": "t", "ce-specversion": "1.0"}


def refused(call: Any, *args: Any) -> tuple[str | None, str]:
    with pytest.raises(InvalidDelivery) as caught:
        call(*args)
    return caught.value.field, caught.value.reason


def structured(**event: Any) -> bytes:
    return json.dumps({"id": "e1", "source": "//s", "type": "t", "specversion": "1.0", **event}).encode()


# -- CloudEvents, structured mode ------------------------------------------------------------------


def test_structured_mode_reads_attributes_and_data() -> None:
    event = parse_cloudevent(STRUCTURED, structured(subject="x", data={"a": 1}, time="2026-10-16T12:00:00Z"))
    assert event.payload == {
        "id": "e1",
        "source": "//s",
        "type": "t",
        "specversion": "1.0",
        "subject": "x",
        "time": "2026-10-16T12:00:00Z",
        "data": {"a": 1},
    }
    assert (event.job, event.event_id, event.data, event.data_field) == ("//s", "e1", {"a": 1}, "body.data")
    assert event.keys == {"source": "//s", "id": "e1", "type": "t", "subject": "x"}
    assert event.time is not None and event.time.isoformat() == "2026-10-16T12:00:00+00:00"


def test_structured_data_base64_is_decoded_when_it_is_text_and_kept_otherwise() -> None:
    text = parse_cloudevent(STRUCTURED, structured(data_base64=base64.b64encode(b'{"a": 1}').decode()))
    assert (text.payload["data"], "data_base64" not in text.payload) == ({"a": 1}, True)
    assert text.data_field == "body.data_base64"
    raw = parse_cloudevent(STRUCTURED, structured(data_base64="//4="))
    assert raw.payload["data_base64"] == "//4=" and "data" not in raw.payload and raw.data is None


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        (b"", "body", "a structured-mode CloudEvent is a JSON object"),
        (b"   ", "body", "a structured-mode CloudEvent is a JSON object"),
        (b"{nope", "body", "the body is not valid JSON"),
        (b"[1]", "body", "a structured-mode CloudEvent is a JSON object"),
        (structured(data=1, data_base64="AA=="), "body.data_base64", "an event has data or data_base64, not both"),
        (structured(data_base64=5), "body.data_base64", "must be a base64 string"),
        (structured(data_base64="***"), "body.data_base64", "is not base64"),
        (structured(subject=7), "body.subject", "a CloudEvents attribute must be a string"),
        (structured(subject="a\nb"), "body.subject", "holds a control character"),
        (structured(subject=""), "body.subject", "is empty"),
        (structured(specversion="0.3"), "body.specversion", "is '0.3'; runonce reads CloudEvents 1.0"),
        (structured(time="later"), "body.time", "is not an RFC 3339 timestamp"),
    ],
)
def test_structured_refusals_name_the_field(body: bytes, field: str, reason: str) -> None:
    got_field, got_reason = refused(parse_cloudevent, STRUCTURED, body)
    assert got_field == field and got_reason.startswith(reason), got_reason


def test_a_structured_event_missing_an_attribute_says_which() -> None:
    body = json.dumps({"id": "e1", "type": "t", "specversion": "1.0"}).encode()
    field, reason = refused(parse_cloudevent, STRUCTURED, body)
    assert field == "body.source" and reason.startswith("missing (every CloudEvent has it")
    encoded = json.dumps({"id": "e1", "type": "t", "specversion": "1.0", "data_base64": "AA=="}).encode()
    assert refused(parse_cloudevent, STRUCTURED, encoded)[0] == "body.source"


def test_attributes_and_storage_names_may_be_long() -> None:
    """Attributes up to 4096 characters (a Cloud Storage object name is up to 1024 bytes)."""
    long_name = "d/" + "x" * 1500
    event = parse_cloudevent(STRUCTURED, structured(subject="objects/" + long_name, data={"a": 1}))
    assert event.keys["subject"] == "objects/" + long_name
    storage = parse_cloudevent(STRUCTURED, storage_event("finalized", storage_object(name=long_name)))
    assert storage.keys["object"] == long_name
    binary = parse_cloudevent({**BINARY, "ce-subject": "s" * 4096}, b"")
    assert binary.keys["subject"] == "s" * 4096


# -- CloudEvents, binary mode ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "body", "data"),
    [
        ("application/json", b'{"a": 1}', {"a": 1}),
        ("Application/JSON; charset=utf-8", b'{"a": 1}', {"a": 1}),
        ("application/vnd.x+json", b"[1, 2]", [1, 2]),  # JSON data of any kind
        ("text/json", b'"s"', "s"),
        ("text/plain", b'{"a": 1}', {"a": 1}),  # an object in text: read as one
        ("text/plain", b"hello", "hello"),
        (None, b"hello", "hello"),
    ],
)
def test_binary_data_follows_its_content_type(content_type: str | None, body: bytes, data: Any) -> None:
    headers = {**BINARY, **({"content-type": content_type} if content_type else {})}
    event = parse_cloudevent(headers, body)
    assert event.payload["data"] == data
    assert event.payload.get("datacontenttype") == content_type
    assert event.data_field == "body"


def test_binary_mode_reads_ce_headers_only() -> None:
    headers = {**BINARY, "ce-x": "1", "ce-": "nameless", "content-type": "text/plain", "x-other": "no", "cex": "no"}
    event = parse_cloudevent(headers, b"hi")
    assert event.payload == {
        "id": "e1",
        "source": "//s",
        "type": "t",
        "specversion": "1.0",
        "x": "1",
        "datacontenttype": "text/plain",
        "data": "hi",
    }


def test_binary_bytes_that_are_not_text_stay_base64_and_extensions_are_kept() -> None:
    event = parse_cloudevent({**BINARY, "ce-traceparent": "00-ab", "content-type": "application/octet-stream"}, b"\xff")
    assert event.payload["data_base64"] == "/w==" and "data" not in event.payload
    assert event.payload["traceparent"] == "00-ab"
    empty = parse_cloudevent(BINARY, b"")
    assert "data" not in empty.payload and "data_base64" not in empty.payload and empty.time is None


@pytest.mark.parametrize(
    ("headers", "field", "reason"),
    [
        ({"ce-source": "s"}, "ce-id", "missing: this route's source is cloudevents"),
        ({"ce-specversion": "1.0", "ce-source": "s", "ce-type": "t"}, "ce-id", "missing (every CloudEvent has it"),
        ({"ce-id": "1", "ce-type": "t", "ce-specversion": "1.0"}, "ce-source", "missing (every CloudEvent has it"),
        ({**BINARY, "ce-specversion": "1.0-" + "x" * 40}, "ce-specversion", "is '1.0-" + "x" * 16 + "'; runonce"),
        ({"ce-specversion": "1.0", "ce-id": "1", "ce-type": "t"}, "ce-source", "missing (every CloudEvent"),
        ({**BINARY, "ce-specversion": "2"}, "ce-specversion", "is '2'"),
        ({**BINARY, "ce-time": "2026-13-01T00:00:00Z"}, "ce-time", "is not a date and time that exists"),
        ({**BINARY, "ce-subject": "x" * 4097}, "ce-subject", "is 4097 characters long; at most 4096"),
        ({"content-type": "application/cloudevents-batch+json"}, "Content-Type", "a batch of CloudEvents"),
    ],
)
def test_binary_refusals_name_the_header(headers: dict[str, str], field: str, reason: str) -> None:
    got_field, got_reason = refused(parse_cloudevent, headers, b"")
    assert got_field == field and got_reason.startswith(reason), got_reason


def test_is_cloudevent_names_the_header_that_makes_one() -> None:
    assert is_cloudevent({"content-type": "application/cloudevents+json; charset=utf-8"}) == "Content-Type"
    assert is_cloudevent({"content-type": "application/cloudevents-batch+json"}) == "Content-Type"
    assert is_cloudevent({"ce-specversion": "1.0"}) == "ce-specversion"
    assert is_cloudevent({"ce-id": "1", "ce-specversion": "1.0"}) == "ce-id"
    assert is_cloudevent({"content-type": "application/json", "ce-source": "s"}) is None


# -- Cloud Storage events --------------------------------------------------------------------------


def storage_event(type_: str, data: Any) -> bytes:
    return structured(type=f"google.cloud.storage.object.v1.{type_}", data=data)


def test_an_eventarc_storage_event_is_keyed_by_its_object() -> None:
    event = parse_cloudevent(STRUCTURED, storage_event("finalized", storage_object(generation=42)))
    assert event.storage and not event.storage_metadata_update
    assert {k: event.keys[k] for k in ("bucket", "object", "generation", "metageneration", "event_type")} == {
        "bucket": "uploads",
        "object": "in/a.csv",
        "generation": "42",
        "metageneration": "1",
        "event_type": "google.cloud.storage.object.v1.finalized",
    }
    updated = parse_cloudevent(STRUCTURED, storage_event("metadataUpdated", storage_object()))
    assert updated.storage_metadata_update


@pytest.mark.parametrize(
    ("type_", "data", "field"),
    [
        ("finalized", "text", "body.data"),
        ("finalized", [1], "body.data"),
        ("finalized", {"name": "o", "generation": "1"}, "body.data.bucket"),
        ("finalized", {"bucket": "b", "generation": "1"}, "body.data.name"),
        ("finalized", {"bucket": "b", "name": "o"}, "body.data.generation"),
        ("finalized", {"bucket": "b", "name": "o", "generation": "x1"}, "body.data.generation"),
        ("metadataUpdated", {"bucket": "b", "name": "o", "generation": "1"}, "body.data.metageneration"),
    ],
)
def test_a_storage_event_without_its_identity_is_refused(type_: str, data: Any, field: str) -> None:
    got_field, reason = refused(parse_cloudevent, STRUCTURED, storage_event(type_, data))
    assert got_field == field
    if field == "body.data":
        assert reason == "a Cloud Storage event's data is a JSON object (StorageObjectData)"


# -- Pub/Sub ---------------------------------------------------------------------------------------


def push(body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    return parse_pubsub(headers or {}, json.dumps(body).encode())


def test_a_push_becomes_its_message() -> None:
    body = envelope("9", attributes={"k": "v"})
    del body["message"]["messageId"], body["message"]["publishTime"]  # the other spelling alone
    event = push(body)
    assert (event.source, event.job, event.event_id, event.data_field) == ("pubsub", SUBSCRIPTION, "9", "message.data")
    assert event.keys == {"subscription": SUBSCRIPTION, "message_id": "9"}
    assert event.payload["publishTime"] == "2026-10-16T12:00:00.123Z"
    assert not event.storage
    bare = envelope("9", data=None)
    del bare["message"]["publishTime"], bare["message"]["publish_time"]
    quiet = push(bare)
    assert quiet.time is None and "publishTime" not in quiet.payload and quiet.payload["attributes"] == {}


def test_a_hundred_attributes_are_accepted() -> None:
    body = envelope("1", attributes={f"a{n}": "v" for n in range(100)})
    assert len(push(body).payload["attributes"]) == 100


def test_an_ordering_key_can_be_an_identity_key() -> None:
    body = envelope("1")
    body["message"]["orderingKey"] = "customer-7"
    assert push(body).keys["ordering_key"] == "customer-7"
    assert "ordering_key" not in push(envelope("1")).keys


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        (
            {"attributes": {f"a{n}": "v" for n in range(101)}},
            "message.attributes",
            "has 101 attributes; Pub/Sub allows 100",
        ),
        ({"attributes": {"a": 1}}, "message.attributes.a", "must be a string"),
        ({"messageId": None, "message_id": None}, "message.messageId", "missing (Pub/Sub sends it with every message)"),
        ({"attributes": {"": "v"}}, "message.attributes", "is empty"),
        ({"attributes": {"k" * 257: "v"}}, "message.attributes", "is 257 characters long"),
        ({"attributes": 5}, "message.attributes", "must be a JSON object of strings"),
        ({"orderingKey": 5}, "message.orderingKey", "must be a string"),
        ({"messageId": "a\tb"}, "message.messageId", "holds a control character"),
        ({"messageId": "x" * 501}, "message.messageId", "is 501 characters long; at most 500"),
        ({"publishTime": "2026-10-16T12:00:00Z", "publish_time": "2026-10-16T12:00:01Z"}, "message.publish_time", ""),
    ],
)
def test_push_refusals_name_the_field(change: dict[str, Any], field: str, reason: str) -> None:
    body = envelope("1")
    body["message"].update(change)
    got_field, got_reason = refused(push, body)
    assert got_field == field and got_reason.startswith(reason), got_reason


@pytest.mark.parametrize(
    "subscription",
    ["projects/my-project/subscriptions/ab", "projects/my-project/subscriptions/1bc", "projects/x/subscriptions/abc"],
)
def test_a_subscription_name_is_checked(subscription: str) -> None:
    assert refused(push, envelope("1", subscription=subscription)) == (
        "subscription",
        "is not a subscription's resource name (projects/PROJECT/subscriptions/ID: an id of 3 to 255 "
        "letters, digits and - _ . ~ + %, a letter first)",
    )


def test_a_subscription_id_has_its_own_charset() -> None:
    name = "projects/my-project/subscriptions/Orders_1.v2~x+y%20"
    assert push(envelope("1", subscription=name)).job == name


def test_a_body_that_is_no_envelope_says_what_a_pubsub_route_takes() -> None:
    for raw in (b"", b"  ", b"[]", b'{"subscription": "s"}'):
        field, reason = refused(parse_pubsub, {}, raw)
        assert field == "message"
        assert reason == "missing: this route's source is pubsub: it takes " + pubsub.EXPECTED
    field, reason = refused(parse_pubsub, {}, b"{oops")
    assert field == "body" and reason.startswith("the body is not valid JSON: ")


@pytest.mark.parametrize("header", ["x-goog-pubsub-message-id", "x-goog-pubsub-subscription-name"])
def test_an_unwrapped_push_is_refused_naming_its_header(header: str) -> None:
    assert refused(parse_pubsub, {header: "1"}, b"raw") == (
        header,
        "an unwrapped push (no_wrapper) is not accepted: its subscription and message id come only as "
        "optional headers; turn no_wrapper off on the push subscription so it sends the JSON envelope",
    )


def test_a_storage_notification_is_keyed_by_its_object() -> None:
    event = push(storage_notification("1", obj=storage_object(generation="0042")))
    assert event.storage and not event.storage_metadata_update
    assert {k: event.keys[k] for k in ("bucket", "object", "generation", "event_type", "metageneration")} == {
        "bucket": "uploads",
        "object": "in/a.csv",
        "generation": "42",
        "event_type": "OBJECT_FINALIZE",
        "metageneration": "1",
    }
    updated = push(storage_notification("2", "OBJECT_METADATA_UPDATE"))
    assert updated.storage_metadata_update
    partial = storage_notification("3")
    del partial["message"]["attributes"]["eventType"]
    assert not push(partial).storage  # not a Storage notification: keyed by its message id


@pytest.mark.parametrize(
    ("attribute", "value", "field"),
    [
        ("bucketId", "", "message.attributes.bucketId"),
        ("objectGeneration", "12a", "message.attributes.objectGeneration"),
        ("objectGeneration", "1" * 20, "message.attributes.objectGeneration"),
    ],
)
def test_a_storage_notification_with_a_bad_attribute_is_refused(attribute: str, value: str, field: str) -> None:
    body = storage_notification("1")
    body["message"]["attributes"][attribute] = value
    got_field, reason = refused(push, body)
    assert got_field == field
    assert reason == "is empty" if value == "" else reason.startswith("must be a generation number")


def test_a_storage_notification_needs_a_good_metageneration() -> None:
    bad = storage_notification("1", obj=storage_object(metageneration="one"))
    assert refused(push, bad)[0] == "message.data.metageneration"
    update = storage_notification("2", "OBJECT_METADATA_UPDATE")
    update["message"]["data"] = base64.b64encode(b'{"bucket": "uploads"}').decode()
    field, reason = refused(push, update)
    assert field == "message.data.metageneration"
    assert reason == (
        "missing: a metadata update is told apart from the next one by its metageneration, which the "
        "notification's payload carries (payload format JSON_API_V1; NONE sends no data)"
    )


def test_is_envelope_is_the_shape_of_a_push() -> None:
    assert is_envelope({"message": {}, "subscription": "s"})
    assert not is_envelope({"message": {}})
    assert not is_envelope({"message": "x", "subscription": "s"})
    assert not is_envelope([])
    refuse_envelope({"message": "hello", "mode": "full"})  # a Scheduler body that merely has a message
    with pytest.raises(InvalidDelivery):
        refuse_envelope({"message": {"data": ""}, "subscription": "s"})


def test_a_scheduler_route_names_the_header_of_a_push_or_event() -> None:
    for name in ("x-goog-pubsub-message-id", "x-goog-pubsub-subscription-name"):
        field, reason = refused(refuse_event_headers, {name: "1"})
        assert field == name and reason.startswith("this is a Pub/Sub push; this route's source is scheduler")
    field, reason = refused(refuse_event_headers, {"ce-id": "1"})
    assert field == "ce-id" and reason.startswith("this is a CloudEvent")
    refuse_event_headers({"content-type": "application/json", "x-goog-other": "1"})


# -- identity, payload, helpers --------------------------------------------------------------------


def test_the_identity_of_a_route_and_its_payload_choice() -> None:
    event = push(envelope("5"))
    delivery, payload, sha = event_delivery(event, "r", ("p", "l"), EventPolicy("pubsub", ("message_id",), "none"))
    assert delivery.identity == (("message_id", "5"),) and payload == {}
    assert delivery.canonical == 'runonce/v1|pubsub|p|l|r|{"message_id":"5"}'
    assert (delivery.project, delivery.location, delivery.route, delivery.task) == ("p", "l", "r", "5")
    again, _, same = event_delivery(
        push(envelope("5", b"other")), "r", ("p", "l"), EventPolicy("pubsub", ("message_id",))
    )
    assert again.run_id == delivery.run_id and same == sha  # the body is not part of an event's identity
    field, reason = refused(event_delivery, event, "r", ("", ""), EventPolicy("pubsub", ("bucket",)))
    assert field == "identity.bucket" and "the route's identity needs the bucket" in reason
    field, reason = refused(
        event_delivery, push(envelope("6", None)), "r", ("", ""), EventPolicy("pubsub", None, "data")
    )
    assert field == "message.data" and reason.endswith("got no data")
    field, reason = refused(
        event_delivery, push(envelope("6", b"[1]")), "r", ("", ""), EventPolicy("pubsub", None, "data")
    )
    assert reason.endswith("got text")


def test_an_unsendable_event_is_refused_with_its_run_id() -> None:
    body = envelope("7", json.dumps({"n": 2**64}).encode())
    with pytest.raises(InvalidDelivery) as caught:
        parse_event(EventPolicy("pubsub"), "r", {}, json.dumps(body).encode(), ("", ""))
    assert caught.value.field == "message.data" and caught.value.run_id is not None
    assert "64 bits" in caught.value.reason


def test_an_ordering_key_is_at_most_1024_characters_and_data_is_a_string() -> None:
    body = envelope("1")
    body["message"]["orderingKey"] = "k" * 1024
    assert push(body).keys["ordering_key"] == "k" * 1024
    body["message"]["orderingKey"] = "k" * 1025
    assert refused(push, body) == ("message.orderingKey", "is 1025 characters long; at most 1024")
    body = envelope("1")
    body["message"]["data"] = {"a": 1}
    assert refused(push, body) == ("message.data", "must be a base64 string")


def test_binary_mode_needs_every_required_header() -> None:
    headers = {"ce-id": "1", "ce-source": "s", "ce-type": "t"}
    assert refused(parse_cloudevent, headers, b"")[0] == "ce-specversion"
    field, reason = refused(parse_cloudevent, {**BINARY, "content-type": "application/json"}, b"{bad")
    assert field == "body" and reason.startswith("the body is not valid JSON: ")


def test_a_message_that_is_not_an_object_is_refused() -> None:
    assert refused(push, {"message": [1], "subscription": SUBSCRIPTION}) == ("message", "must be a JSON object")


def test_an_event_route_refuses_scheduler_headers_saying_what_it_takes() -> None:
    raw = json.dumps(envelope("1")).encode()
    with pytest.raises(InvalidDelivery) as caught:
        parse_event(EventPolicy("pubsub"), "r", {"X-CloudTasks-TaskName": "t"}, raw, ("", ""))
    assert (caught.value.field, caught.value.reason) == (
        "X-CloudTasks-TaskName",
        'this route\'s source is pubsub: it takes Pub/Sub push envelopes ({"message": {...}, "subscription": ...}), '
        "not Cloud Scheduler or Cloud Tasks deliveries (a route with source: scheduler does)",
    )


def test_event_refusals_carry_the_route_and_once_known_the_run_id() -> None:
    with pytest.raises(InvalidDelivery) as missing:
        event_delivery(push(envelope("1")), "r", ("", ""), EventPolicy("pubsub", ("bucket",)))
    assert (missing.value.route, missing.value.run_id) == ("r", None)
    with pytest.raises(InvalidDelivery) as not_object:
        event_delivery(push(envelope("1", b"text")), "r", ("", ""), EventPolicy("pubsub", None, "data"))
    expected = event_delivery(push(envelope("1")), "r", ("", ""), EventPolicy("pubsub"))[0].run_id
    assert (not_object.value.route, not_object.value.run_id) == ("r", expected)
    assert not_object.value.reason == (
        "the route sends the event's data alone (event_payload: data), which must then be a JSON object; got text"
    )
    body = envelope("1", json.dumps({"n": 2**64}).encode())
    with pytest.raises(InvalidDelivery) as unsendable:
        event_delivery(push(body), "r", ("", ""), EventPolicy("pubsub"))
    assert (unsendable.value.route, unsendable.value.run_id) == ("r", expected)


def test_an_events_body_hash_is_its_identitys() -> None:
    _, _, sha = event_delivery(push(envelope("1")), "r", ("", ""), EventPolicy("pubsub"))
    _, _, other = event_delivery(push(envelope("2")), "r", ("", ""), EventPolicy("pubsub"))
    assert len(sha) == 64 and int(sha, 16) >= 0 and sha != other


def test_the_helpers_say_what_is_wrong() -> None:
    assert text_field("x" * 500, "f") == "x" * 500  # at the limit
    assert text_field("a b", "f") == "a b"  # a space is no control character
    assert refused(text_field, None, "f") == ("f", "missing")
    assert text_field(None, "f", required=False) is None
    assert refused(text_field, "\ud800", "f") == ("f", "is not valid Unicode (a lone surrogate)")
    assert refused(text_field, "a\x7fb", "f")[1] == "holds a control character"
    assert refused(text_field, ["x"], "f")[1] == "must be a string, got JSON list"
    assert generation(7, "g") == "7" and generation("0012", "g") == "12"
    assert generation("9223372036854775807", "g") == "9223372036854775807"  # int64's largest
    assert refused(generation, "9223372036854775808", "g")[1].startswith("must be a generation number (ASCII")
    assert refused(generation, "x" * 50, "g")[1].endswith(repr("x" * 40))
    assert refused(generation, True, "g")[1].startswith("must be a generation number")
    assert refused(generation, 1.5, "g")[1] == "must be a generation number, got JSON float"
    assert refused(generation, "١٢", "g")[1].startswith("must be a generation number (ASCII digits")
    assert refused(decode_base64, "é", "d") == ("d", "is not base64 (RFC 4648, with padding)")
    assert decode_base64("aGk=", "d") == b"hi"
