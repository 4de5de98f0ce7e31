"""What Pub/Sub push and CloudEvents deliveries share: an `Event` (what pubsub.py and
cloudevents.py read from one request), the identity keys a route may choose, and the `Delivery`
an event becomes.

An event run's canonical string is

    runonce/v1|{source}|{project}|{location}|{route}|{identity}

where `source` is `pubsub` or `cloudevents` (never a Scheduler or Tasks tag, and six parts where
those have seven) and `identity` is the JSON object of the route's identity keys and their values
(keys sorted, ASCII-escaped, no spaces): `{"message_id":"42","subscription":"projects/p/subscriptions/s"}`.
JSON quotes every value, so no value can pass for another key or part.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from runonce.errors import InvalidDelivery
from runonce.run.delivery import IDENTITY_HEADERS, MAX_HEADER_LENGTH, Delivery, load_json
from runonce.targets.base import PayloadNotSendable, encode_json

EventSource = Literal["pubsub", "cloudevents"]
MAX_INT64 = 2**63 - 1
"""Generations and metagenerations are int64."""
EVENT_SOURCES: tuple[EventSource, ...] = ("pubsub", "cloudevents")

STORAGE_KEYS = ("bucket", "object", "generation", "event_type")
"""A Cloud Storage event's identity; `metageneration` joins it for a metadata update."""
IDENTITY_KEYS: dict[EventSource, tuple[str, ...]] = {
    "pubsub": ("subscription", "message_id", "ordering_key", *STORAGE_KEYS, "metageneration"),
    "cloudevents": ("source", "id", "type", "subject", *STORAGE_KEYS, "metageneration"),
}
"""The keys a route's `identity` may list, per source."""
DEFAULT_IDENTITY: dict[EventSource, tuple[str, ...]] = {
    "pubsub": ("subscription", "message_id"),
    "cloudevents": ("source", "id"),
}
"""A route's identity when it names none and the event is not a Cloud Storage event."""

KEY_WORDS = {
    "subscription": "the envelope's subscription",
    "message_id": "message.messageId",
    "ordering_key": "message.orderingKey",
    "source": "ce-source",
    "id": "ce-id",
    "type": "ce-type",
    "subject": "ce-subject",
    "bucket": "the bucket (attribute bucketId, or the event data's bucket)",
    "object": "the object (attribute objectId, or the event data's name)",
    "generation": "the object generation (attribute objectGeneration, or the event data's generation)",
    "metageneration": "the metageneration (the event data's metageneration)",
    "event_type": "the Storage event type (attribute eventType, or ce-type)",
}
"""Where each identity key's value comes from, in the words an error gives."""


@dataclass(frozen=True)
class EventPolicy:
    """A route's event settings (route fields `source`, `identity`, `event_payload`)."""

    source: EventSource
    identity: tuple[str, ...] | None = None
    """The keys that make the run's identity; None: the defaults (Storage events: `STORAGE_KEYS`)."""
    payload: Literal["event", "data", "none"] = "event"
    """What the target receives: the whole event (data decoded), its data alone (a JSON object), or
    nothing (the route's workload starts with the run_id alone)."""


@dataclass(frozen=True)
class Event:
    """One event as read from a request, before a route's identity is applied."""

    source: EventSource
    keys: dict[str, str]
    """Every identity key this event has a value for."""
    job: str
    """The record's `job`: the subscription, or the event's source."""
    event_id: str
    """The record's `task`: the message id or the event id."""
    time: datetime | None
    """publishTime or ce-time: what lateness is measured from."""
    payload: dict[str, Any]
    """What the target receives (event_payload: event)."""
    data: Any = None
    """The decoded data, for event_payload: data."""
    data_field: str = "data"
    storage_metadata_update: bool = False
    storage: bool = False


def default_identity(event: Event) -> tuple[str, ...]:
    if not event.storage:
        return DEFAULT_IDENTITY[event.source]
    return (*STORAGE_KEYS, "metageneration") if event.storage_metadata_update else STORAGE_KEYS


def event_delivery(
    event: Event, route: str, namespace: tuple[str, str], policy: EventPolicy
) -> tuple[Delivery, dict[str, Any], str]:
    """The run `event` is on `route`: its `Delivery`, the payload the target receives, and the
    body hash the claim compares (the identity's own: a redelivery under another message id is
    the same run, never a payload mismatch)."""
    keys = policy.identity or default_identity(event)
    identity = []
    for key in keys:
        value = event.keys.get(key)
        if value is None:
            raise InvalidDelivery(
                f"identity.{key}",
                f"the route's identity needs {KEY_WORDS[key]}, and this delivery has none",
                route=route,
            )
        identity.append((key, value))
    delivery = Delivery(
        source=event.source,
        project=namespace[0],
        location=namespace[1],
        route=route,
        job=event.job,
        schedule_time=event.time,
        task=event.event_id,
        identity=tuple(sorted(identity)),
    )
    payload = event.payload if policy.payload == "event" else {}
    if policy.payload == "data":
        if not isinstance(event.data, dict):
            raise InvalidDelivery(
                event.data_field,
                "the route sends the event's data alone (event_payload: data), which must then be a JSON object; "
                f"got {_kind(event.data)}",
                route=route,
                run_id=delivery.run_id,
            )
        payload = event.data
    try:
        encode_json(payload)
    except PayloadNotSendable as exc:
        raise InvalidDelivery(event.data_field, exc.message, route=route, run_id=delivery.run_id) from exc
    body_sha256 = hashlib.sha256(f"event|{delivery.canonical}".encode()).hexdigest()
    return delivery, payload, body_sha256


def _kind(value: Any) -> str:
    if value is None:
        return "no data"
    if isinstance(value, str):
        return "text"
    return f"JSON {type(value).__name__}"


def refuse_scheduler_headers(headers: Mapping[str, str], source: EventSource, expected: str) -> None:
    """An event route never takes a Scheduler or Tasks delivery."""
    for name in IDENTITY_HEADERS:
        if headers.get(name) is not None:
            raise InvalidDelivery(
                name,
                f"this route's source is {source}: it takes {expected}, not Cloud Scheduler or Cloud Tasks "
                "deliveries (a route with source: scheduler does)",
            )


def decode_data(raw: bytes) -> Any:
    """Event data as the target receives it: a JSON object when it is one, else UTF-8 text, else
    None (the caller keeps it base64)."""
    try:
        text = raw.decode("utf-8")  # pragma: no mutate - codecs ignore case
    except UnicodeDecodeError:
        return None
    try:
        value = load_json(raw, "data", "the data")  # pragma: no mutate - its error is caught, its words never shown
    except InvalidDelivery:
        return text
    return value if isinstance(value, dict) else text


def decode_base64(value: str, field: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)  # pragma: no mutate - codecs ignore case
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise InvalidDelivery(field, "is not base64 (RFC 4648, with padding)") from exc


def text_field(value: object, field: str, *, required: bool = True, limit: int = MAX_HEADER_LENGTH) -> str | None:
    """A non-empty string of at most `limit` characters with no control character, or None when
    absent and not `required`."""
    if value is None:
        if required:
            raise InvalidDelivery(field, "missing")
        return None
    if not isinstance(value, str):
        raise InvalidDelivery(field, f"must be a string, got {_kind(value)}")
    if not value:
        raise InvalidDelivery(field, "is empty")
    if len(value) > limit:
        raise InvalidDelivery(field, f"is {len(value)} characters long; at most {limit}")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        raise InvalidDelivery(field, "holds a control character")
    try:
        value.encode("utf-8")  # pragma: no mutate - codecs ignore case
    except UnicodeEncodeError as exc:
        raise InvalidDelivery(field, "is not valid Unicode (a lone surrogate)") from exc
    return value


def generation(value: object, field: str) -> str:
    """A Storage generation or metageneration: an int64 written as digits (JSON string or number)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidDelivery(field, f"must be a generation number, got {_kind(value)}")
    text = str(value)
    # The length bounds the parse only: 20 digits are over MAX_INT64 anyway.
    if not text.isascii() or not text.isdigit() or len(text) > 19 or int(text) > MAX_INT64:  # pragma: no mutate
        raise InvalidDelivery(field, f"must be a generation number (ASCII digits, int64), got {text[:40]!r}")
    return str(int(text))
