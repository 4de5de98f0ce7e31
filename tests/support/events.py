"""Pub/Sub push envelopes and CloudEvents as Google sends them, and the delivery endpoint
in-process with one route per source (for tests/test_sources.py, the fuzzers and the emulator tests).

CloudEvents are built with the CNCF `cloudevents` SDK, the envelopes as Pub/Sub documents them
(https://cloud.google.com/pubsub/docs/push#receive_push) and as the emulator sends them (both
spellings of the message id and publish time)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from cloudevents.conversion import to_binary, to_structured
from cloudevents.http import CloudEvent

from runonce.api.main import create_app
from runonce.routes import parse_routes
from runonce.settings import Settings
from runonce.stores.memory import MemoryStore
from runonce.targets.scripted import ScriptedTarget
from tests.support.clock import Clock

SUBSCRIPTION = "projects/my-project/subscriptions/runonce-push"
PUBLISH_TIME = "2026-10-16T12:00:00.123Z"
STORAGE_SOURCE = "//storage.googleapis.com/projects/_/buckets/uploads"
FINALIZED = "google.cloud.storage.object.v1.finalized"
METADATA_UPDATED = "google.cloud.storage.object.v1.metadataUpdated"

ROUTES = """
routes:
  orders: {target: {type: log}, source: pubsub}
  uploads: {target: {type: log}, source: cloudevents}
  nightly: {target: {type: log}}
  order-data: {target: {type: log}, source: pubsub, event_payload: data}
"""


def envelope(
    message_id: str = "101",
    data: bytes | None = b'{"order": 7}',
    attributes: dict[str, str] | None = None,
    subscription: str = SUBSCRIPTION,
    publish_time: str = PUBLISH_TIME,
    **extra: Any,
) -> dict[str, Any]:
    """A push envelope, as Pub/Sub posts it (`message_id`, `publish_time`: the emulator's second spelling)."""
    message: dict[str, Any] = {
        "messageId": message_id,
        "message_id": message_id,
        "publishTime": publish_time,
        "publish_time": publish_time,
    }
    if data is not None:
        message["data"] = base64.b64encode(data).decode()
    if attributes is not None:
        message["attributes"] = attributes
    return {"message": message, "subscription": subscription, **extra}


def storage_object(bucket: str = "uploads", name: str = "in/a.csv", generation: str = "1700000000000001", **more: Any):
    """A Cloud Storage object resource (JSON_API_V1 payload, StorageObjectData), as Google writes it."""
    return {
        "kind": "storage#object",
        "bucket": bucket,
        "name": name,
        "generation": generation,
        "metageneration": "1",
        **more,
    }


def storage_notification(
    message_id: str, event_type: str = "OBJECT_FINALIZE", obj: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    """A Cloud Storage Pub/Sub notification (JSON_API_V1) under `message_id`."""
    obj = obj or storage_object()
    attributes = {
        "bucketId": obj["bucket"],
        "objectId": obj["name"],
        "objectGeneration": obj["generation"],
        "eventType": event_type,
        "payloadFormat": "JSON_API_V1",
        "notificationConfig": f"projects/_/buckets/{obj['bucket']}/notificationConfigs/1",
    }
    return envelope(message_id, json.dumps(obj).encode(), attributes, **kwargs)


def cloudevent(
    event_id: str = "e-1",
    source: str = "//pubsub.googleapis.com/projects/my-project/topics/orders",
    type_: str = "com.example.order.created",
    data: Any = None,
    **attributes: str,
) -> CloudEvent:
    """A CloudEvent built with the CNCF SDK."""
    fields = {"id": event_id, "source": source, "type": type_, "time": "2026-10-16T12:00:00Z", **attributes}
    return CloudEvent(fields, {"order": 7} if data is None else data)


def storage_event(event_id: str, type_: str = FINALIZED, obj: dict[str, Any] | None = None) -> CloudEvent:
    """An Eventarc Cloud Storage event (`google.cloud.storage.object.v1.*`) under `event_id`."""
    obj = obj or storage_object()
    return cloudevent(event_id, STORAGE_SOURCE, type_, obj, subject=f"objects/{obj['name']}")


def binary(event: CloudEvent) -> tuple[dict[str, str], bytes]:
    """Binary mode: ce-* headers, data as the body (Content-Type application/json)."""
    headers, body = to_binary(event)
    return {**headers, "content-type": "application/json"}, body


def structured(event: CloudEvent) -> tuple[dict[str, str], bytes]:
    """Structured mode: application/cloudevents+json."""
    headers, body = to_structured(event)
    return dict(headers), body


class EventsHarness:
    def __init__(self, client: httpx.AsyncClient, store: MemoryStore, target: ScriptedTarget, clock: Clock):
        self.client, self.store, self.target, self.clock = client, store, target, clock

    async def push(self, body: dict[str, Any], route: str = "orders", **kwargs: Any) -> httpx.Response:
        return await self.client.post(f"/v1/routes/{route}:run", json=body, **kwargs)

    async def event(self, mode: tuple[dict[str, str], bytes], route: str = "uploads") -> httpx.Response:
        headers, body = mode
        return await self.client.post(f"/v1/routes/{route}:run", headers=headers, content=body)


@asynccontextmanager
async def open_events_api(clock: Clock, routes: str = ROUTES) -> AsyncIterator[EventsHarness]:
    """The app serving `routes`, every route to one scripted target, over an in-memory store."""
    store, target = MemoryStore(), ScriptedTarget()
    settings = Settings(routes=routes, routes_file=None, auth="none", store="sqlite:///unused.db")
    names = parse_routes(routes, "routes")
    app = create_app(settings, store=store, targets=dict.fromkeys(names, target), clock=clock)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://runonce") as client,
    ):
        yield EventsHarness(client, store, target, clock)
