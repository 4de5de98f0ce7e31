"""A Pub/Sub push delivery → an `Event` (events.py).

Pub/Sub posts the wrapped envelope

    {"message": {"data": BASE64, "attributes": {...}, "messageId": "...", "publishTime": "...",
                 "orderingKey": "..."}, "subscription": "projects/P/subscriptions/S", "deliveryAttempt": N}

(`message_id` and `publish_time` are accepted as the same fields: Pub/Sub sends both spellings).
The run's identity is the subscription and the message id, or for a Cloud Storage notification
(attributes `bucketId`, `objectId`, `objectGeneration`, `eventType`) the bucket, object,
generation and event type, and the metageneration of a metadata update (from the data, which a
JSON_API_V1 notification carries): Cloud Storage may publish one event under several message ids.

The unwrapped form (a push subscription with `no_wrapper`) is refused: without the envelope the
subscription and message id arrive only as optional headers, and the attributes as headers
indistinguishable from the request's own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from runonce.errors import InvalidDelivery
from runonce.run.delivery import PROJECT_PATTERN, load_json, matches, parse_rfc3339
from runonce.run.events import Event, decode_base64, decode_data, generation, text_field

SUBSCRIPTION_PATTERN = r"projects/([^/]+)/subscriptions/([A-Za-z][A-Za-z0-9._~+%-]{2,254})"
"""A subscription's resource name; its id is 3 to 255 characters, a letter first."""
MAX_ATTRIBUTES = 100
"""Pub/Sub's own limit on a message's attributes."""
STORAGE_ATTRIBUTES = ("bucketId", "objectId", "objectGeneration", "eventType")
"""The attributes of a Cloud Storage notification that identify its event."""
METADATA_UPDATE = "OBJECT_METADATA_UPDATE"
UNWRAPPED_HEADERS = ("x-goog-pubsub-message-id", "x-goog-pubsub-subscription-name")
EXPECTED = 'Pub/Sub push envelopes ({"message": {...}, "subscription": ...})'
"""What a Pub/Sub route takes, for the errors that refuse anything else."""


def is_envelope(body: object) -> bool:
    """Whether a JSON body is shaped like a Pub/Sub push envelope (a Scheduler route refuses one)."""
    return isinstance(body, dict) and isinstance(body.get("message"), dict) and "subscription" in body


def parse_pubsub(headers: Mapping[str, str], raw: bytes) -> Event:
    """The event a push request carries. Raises `InvalidDelivery` naming the field at fault."""
    for name in UNWRAPPED_HEADERS:
        if headers.get(name) is not None:
            raise InvalidDelivery(
                name,
                "an unwrapped push (no_wrapper) is not accepted: its subscription and message id come only as "
                "optional headers; turn no_wrapper off on the push subscription so it sends the JSON envelope",
            )
    envelope = load_json(raw, "body", "the body") if raw.strip() else {}
    if not isinstance(envelope, dict) or "message" not in envelope:
        raise InvalidDelivery("message", f"missing: this route's source is pubsub: it takes {EXPECTED}")
    message = envelope["message"]
    if not isinstance(message, dict):
        raise InvalidDelivery("message", "must be a JSON object")
    subscription = _subscription(envelope.get("subscription"))
    message_id = _either(message, "messageId", "message_id")
    publish_text = _either(
        message, "publishTime", "publish_time", required=False
    )  # pragma: no mutate - None is as false
    publish_time = parse_rfc3339(publish_text, "message.publishTime") if publish_text else None
    ordering_key = message.get("orderingKey") or None  # "" is no ordering key, as Pub/Sub's JSON may say
    ordering_key = text_field(
        ordering_key, "message.orderingKey", required=False, limit=1024
    )  # pragma: no mutate - None is as false
    attributes = _attributes(message.get("attributes"))
    data_text = message.get("data")
    if data_text is not None and not isinstance(data_text, str):
        raise InvalidDelivery("message.data", "must be a base64 string")
    data_raw = decode_base64(data_text, "message.data") if data_text else b""
    data = decode_data(data_raw) if data_raw else None
    assert message_id is not None  # pragma: no mutate - required above
    keys = {"subscription": subscription, "message_id": message_id}
    if ordering_key:
        keys["ordering_key"] = ordering_key
    storage = all(name in attributes for name in STORAGE_ATTRIBUTES)
    event_type = attributes.get("eventType")
    if storage:
        keys.update(_storage_keys(attributes, data))
    payload: dict[str, Any] = {"subscription": subscription, "messageId": message_id, "attributes": attributes}
    if publish_text:
        payload["publishTime"] = publish_text
    if ordering_key:
        payload["orderingKey"] = ordering_key
    if data is not None:
        payload["data"] = data
    elif data_raw:
        payload["dataBase64"] = data_text  # bytes that are not UTF-8: as Pub/Sub sent them
    return Event(
        source="pubsub",
        keys=keys,
        job=subscription,
        event_id=message_id,
        time=publish_time,
        payload=payload,
        data=data,
        data_field="message.data",
        storage=storage,
        storage_metadata_update=storage and event_type == METADATA_UPDATE,
    )


def _subscription(value: object) -> str:
    name = text_field(value, "subscription")
    assert name is not None  # pragma: no mutate - required
    found = re.fullmatch(SUBSCRIPTION_PATTERN, name, flags=re.ASCII)  # pragma: no mutate - explicit ASCII classes
    if found is None or not matches(PROJECT_PATTERN, found.group(1)):
        raise InvalidDelivery(
            "subscription",
            "is not a subscription's resource name (projects/PROJECT/subscriptions/ID: an id of 3 to 255 "
            "letters, digits and - _ . ~ + %, a letter first)",
        )
    return name


def _either(message: dict[str, Any], name: str, alias: str, *, required: bool = True) -> str | None:
    """A message field Pub/Sub sends under two spellings (`messageId` and `message_id`): both
    may be present, and must then agree."""
    first = text_field(message.get(name), f"message.{name}", required=False)  # pragma: no mutate - None is as false
    second = text_field(message.get(alias), f"message.{alias}", required=False)  # pragma: no mutate - as above
    if first is not None and second is not None and first != second:
        raise InvalidDelivery(f"message.{alias}", f"differs from message.{name}; a message has one")
    value = first if first is not None else second
    if value is None and required:
        raise InvalidDelivery(f"message.{name}", "missing (Pub/Sub sends it with every message)")
    return value


def _attributes(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidDelivery("message.attributes", "must be a JSON object of strings")
    if len(value) > MAX_ATTRIBUTES:
        raise InvalidDelivery("message.attributes", f"has {len(value)} attributes; Pub/Sub allows {MAX_ATTRIBUTES}")
    for name, text in value.items():
        text_field(name, "message.attributes", limit=256)  # a name: 1 to 256 characters
        if not isinstance(text, str):
            raise InvalidDelivery(f"message.attributes.{name}", "must be a string")
    return dict(value)


def _storage_keys(attributes: dict[str, str], data: Any) -> dict[str, str]:
    """A Cloud Storage notification's identity keys; the metageneration from a JSON_API_V1 payload."""
    for name in STORAGE_ATTRIBUTES:
        if not attributes[name]:
            raise InvalidDelivery(f"message.attributes.{name}", "is empty")
    keys = {
        "bucket": attributes["bucketId"],
        "object": attributes["objectId"],
        "generation": generation(attributes["objectGeneration"], "message.attributes.objectGeneration"),
        "event_type": attributes["eventType"],
    }
    if isinstance(data, dict) and data.get("metageneration") is not None:
        keys["metageneration"] = generation(data["metageneration"], "message.data.metageneration")
    elif attributes["eventType"] == METADATA_UPDATE:
        raise InvalidDelivery(
            "message.data.metageneration",
            "missing: a metadata update is told apart from the next one by its metageneration, which the "
            "notification's payload carries (payload format JSON_API_V1; NONE sends no data)",
        )
    return keys
