"""A CloudEvent over HTTP, as Eventarc delivers it → an `Event` (events.py).

Binary mode: the attributes in `ce-*` headers (`ce-id`, `ce-source`, `ce-type`, `ce-specversion`
required; `ce-time`, `ce-subject` and extensions optional), the data as the body, its media type
in Content-Type. Structured mode: Content-Type `application/cloudevents+json`, the whole event as
one JSON object (`data`, or `data_base64` for bytes). Header values are taken as sent, as the
CNCF SDK sends and reads them. Batched mode is refused (one request would be several runs).

The identity is `source` + `id` (the CloudEvents spec makes the pair unique), or for a Cloud
Storage event (`google.cloud.storage.object.v1.*`) the bucket, object, generation and event type,
and the metageneration of a metadata update, all from the data.

Parsed here rather than with the `cloudevents` SDK: reading a dozen attributes is shorter than
adapting the SDK's errors and types to runonce's 400s, and the image carries one dependency less.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from runonce.errors import InvalidDelivery
from runonce.run.delivery import load_json, parse_rfc3339
from runonce.run.events import Event, decode_base64, decode_data, generation, text_field

STRUCTURED = "application/cloudevents+json"
BATCH = "application/cloudevents-batch+json"
REQUIRED = ("id", "source", "type", "specversion")
STORAGE_TYPE_PREFIX = "google.cloud.storage.object.v1."
METADATA_UPDATE = "google.cloud.storage.object.v1.metadataUpdated"
EXPECTED = "CloudEvents (binary mode: ce-id, ce-source, ce-type, ce-specversion headers; or structured mode: " + (
    f"Content-Type {STRUCTURED})"
)
"""What a CloudEvents route takes, for the errors that refuse anything else."""
MAX_ATTRIBUTE_LENGTH = 4096


def is_cloudevent(headers: Mapping[str, str]) -> str | None:
    """The header that makes a request a CloudEvent (a Scheduler route refuses one), or None."""
    if _media_type(headers) in (STRUCTURED, BATCH):
        return "Content-Type"
    for name in ("ce-id", "ce-specversion"):
        if headers.get(name) is not None:
            return name
    return None


def _media_type(headers: Mapping[str, str]) -> str:
    return headers.get("content-type", "").split(";")[0].strip().lower()


def parse_cloudevent(headers: Mapping[str, str], raw: bytes) -> Event:
    """The event a request carries. Raises `InvalidDelivery` naming the header or field at fault."""
    media = _media_type(headers)
    if media == BATCH:
        raise InvalidDelivery(
            "Content-Type", f"a batch of CloudEvents is not accepted; send one event per request ({EXPECTED})"
        )
    if media == STRUCTURED:
        return _structured(raw)
    if headers.get("ce-id") is None and headers.get("ce-specversion") is None:
        raise InvalidDelivery("ce-id", f"missing: this route's source is cloudevents: it takes {EXPECTED}")
    attributes: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower.startswith("ce-") and len(lower) > 3:
            if lower[3:] in attributes:
                raise InvalidDelivery(lower, "given more than once; an event has one of each attribute")
            attributes[lower[3:]] = str(text_field(value, lower, limit=MAX_ATTRIBUTE_LENGTH))
    if media:
        attributes["datacontenttype"] = headers["content-type"]
    data: Any = None
    if raw:
        data = load_json(raw, "body", "the body") if _is_json(media) else decode_data(raw)
    undecoded = base64.b64encode(raw).decode("ascii") if raw else None  # pragma: no mutate - codecs ignore case
    return _event(attributes, data, "ce-", "body", undecoded)


def _is_json(media: str) -> bool:
    return media in ("application/json", "text/json") or media.endswith("+json")


def _structured(raw: bytes) -> Event:
    body = load_json(raw, "body", "the body") if raw.strip() else None
    if not isinstance(body, dict):
        raise InvalidDelivery("body", f"a structured-mode CloudEvent is a JSON object ({EXPECTED})")
    attributes: dict[str, str] = {}
    for name, value in body.items():
        if name in ("data", "data_base64"):
            continue
        if not isinstance(value, str):
            raise InvalidDelivery(f"body.{name}", "a CloudEvents attribute must be a string")
        attributes[name] = str(text_field(value, f"body.{name}", limit=MAX_ATTRIBUTE_LENGTH))
    if "data" in body and "data_base64" in body:
        raise InvalidDelivery("body.data_base64", "an event has data or data_base64, not both")
    if "data_base64" in body:
        encoded = body["data_base64"]
        if not isinstance(encoded, str):
            raise InvalidDelivery("body.data_base64", "must be a base64 string")
        data = decode_data(decode_base64(encoded, "body.data_base64"))
        return _event(attributes, data, "body.", "body.data_base64", encoded)
    return _event(attributes, body.get("data"), "body.", "body.data", None)


def _event(attributes: dict[str, str], data: Any, prefix: str, data_field: str, undecoded: str | None) -> Event:
    """The event of `attributes` (names without `ce-`) and its decoded `data` (`undecoded`: its
    base64, kept when the data is not text); `prefix` says where attributes were read, for errors."""
    for name in REQUIRED:
        if name not in attributes:
            raise InvalidDelivery(f"{prefix}{name}", f"missing (every CloudEvent has it; this route takes {EXPECTED})")
    if attributes["specversion"] != "1.0":
        raise InvalidDelivery(
            f"{prefix}specversion", f"is {attributes['specversion'][:20]!r}; runonce reads CloudEvents 1.0"
        )
    time_text = attributes.get("time")
    time = parse_rfc3339(time_text, f"{prefix}time") if time_text else None
    event_type = attributes["type"]
    keys: dict[str, str] = {
        name: attributes[name] for name in ("source", "id", "type", "subject") if name in attributes
    }
    storage = event_type.startswith(STORAGE_TYPE_PREFIX)
    if storage:
        keys.update(_storage_keys(event_type, data, data_field))
    payload: dict[str, Any] = dict(attributes)
    if data is not None:
        payload["data"] = data
    elif undecoded is not None:
        payload["data_base64"] = undecoded
    return Event(
        source="cloudevents",
        keys=keys,
        job=attributes["source"],
        event_id=attributes["id"],
        time=time,
        payload=payload,
        data=data,
        data_field=data_field,
        storage=storage,
        storage_metadata_update=event_type == METADATA_UPDATE,
    )


def _storage_keys(event_type: str, data: Any, data_field: str) -> dict[str, str]:
    """A Cloud Storage event's identity keys, from its `StorageObjectData`."""
    if not isinstance(data, dict):
        raise InvalidDelivery(data_field, "a Cloud Storage event's data is a JSON object (StorageObjectData)")
    keys = {"event_type": event_type}
    for key, name in (("bucket", "bucket"), ("object", "name")):
        keys[key] = str(text_field(data.get(name), f"{data_field}.{name}", limit=MAX_ATTRIBUTE_LENGTH))
    keys["generation"] = generation(data.get("generation"), f"{data_field}.generation")
    if data.get("metageneration") is not None or event_type == METADATA_UPDATE:
        keys["metageneration"] = generation(data.get("metageneration"), f"{data_field}.metageneration")
    return keys
