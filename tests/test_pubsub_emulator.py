"""Pub/Sub push end to end against the real Pub/Sub emulator: a topic and a push subscription to a
real `runonce serve`, whose `http` target calls a local downstream. The emulator pushes the envelopes
Pub/Sub pushes (it sends no OIDC token: the server runs with RUNONCE_AUTH=none; tests/test_sources_auth.py
holds the push token's audience and email), and redelivers what runonce nacks."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.support.downstream import Downstream
from tests.support.events import storage_object
from tests.support.procs import ServerProcess, start_server
from tests.support.pubsub_emulator import PubSubEmulator, start_pubsub_emulator

pytestmark = [pytest.mark.services, pytest.mark.e2e]


@dataclass
class Stack:
    emulator: PubSubEmulator
    server: ServerProcess
    downstream: Downstream
    topic: str
    subscription: str


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("pubsub-e2e")
    with Downstream() as downstream:
        routes = {
            "routes": {"orders": {"target": {"type": "http", "url": f"{downstream.url}/orders"}, "source": "pubsub"}}
        }
        env = {
            "RUNONCE_AUTH": "none",
            "RUNONCE_ROUTES": json.dumps(routes),
            "RUNONCE_STORE": f"sqlite:///{logs / 'runs.db'}",
            "RUNONCE_LOG_FORMAT": "text",
        }
        emulator = start_pubsub_emulator(logs)
        try:
            server = start_server(env, logs)
            try:
                topic = emulator.topic("orders")
                subscription = emulator.push_subscription("runonce-orders", topic, f"{server.url}/v1/routes/orders:run")
                yield Stack(emulator, server, downstream, topic, subscription)
            finally:
                server.stop()
        finally:
            emulator.stop()


def calls_with(downstream: Downstream, predicate, count: int, timeout: float = 30) -> list[dict]:
    """Wait until the downstream has `count` calls matching `predicate`; return them all."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [r for r in list(downstream.received) if r["path"] == "/orders" and predicate(r["body"])]
        if len(found) >= count:
            return found
        time.sleep(0.1)
    raise AssertionError(f"the downstream got {len(found)} matching calls, expected {count}: {downstream.received}")


def test_each_published_message_is_one_run_with_its_data_and_attributes(stack: Stack) -> None:
    ids = [stack.emulator.publish(stack.topic, json.dumps({"order": n}).encode(), {"n": str(n)}) for n in range(3)]
    calls = calls_with(stack.downstream, lambda body: body["task"] in ids, 3)
    time.sleep(1)  # anything pushed twice would have arrived by now
    calls = calls_with(stack.downstream, lambda body: body["task"] in ids, 3)
    assert len(calls) == 3
    assert len({c["key"] for c in calls}) == 3  # one run_id each
    for call in calls:
        body = call["body"]
        assert call["key"] == body["run_id"]
        assert body["source"] == "pubsub" and body["job"] == stack.subscription
        n = ids.index(body["task"])
        assert body["payload"]["data"] == {"order": n}
        assert body["payload"]["attributes"] == {"n": str(n)}
        record = httpx.get(f"{stack.server.url}/v1/runs/{body['run_id']}", timeout=10).json()
        assert record["status"] == "completed" and record["task"] == body["task"]


def test_a_nacked_message_comes_back_as_the_same_run(stack: Stack) -> None:
    stack.downstream.behaviour["/orders"] = (503, 0.0, None)  # the target fails: runonce answers 502, a nack
    message_id = stack.emulator.publish(stack.topic, b'{"retry": true}')
    first = calls_with(stack.downstream, lambda body: body["task"] == message_id, 1)
    del stack.downstream.behaviour["/orders"]
    calls = calls_with(stack.downstream, lambda body: body["task"] == message_id, len(first) + 1, timeout=60)
    assert len({c["key"] for c in calls}) == 1  # every push of the message is the same run
    run_id = calls[0]["key"]
    deadline = time.monotonic() + 30
    while (record := httpx.get(f"{stack.server.url}/v1/runs/{run_id}", timeout=10).json())["status"] != "completed":
        assert time.monotonic() < deadline, record
        time.sleep(0.2)
    assert record["attempts"] >= 2


def test_one_storage_event_published_under_several_message_ids_is_one_run(stack: Stack) -> None:
    obj = storage_object(name="emulated.csv", generation="1700000000000777")
    attributes = {"bucketId": obj["bucket"], "objectId": obj["name"], "objectGeneration": obj["generation"]}
    attributes.update(eventType="OBJECT_FINALIZE", payloadFormat="JSON_API_V1")
    ids = [stack.emulator.publish(stack.topic, json.dumps(obj).encode(), attributes) for _ in range(4)]
    assert len(set(ids)) == 4
    [call] = calls_with(stack.downstream, lambda body: body["payload"].get("data", {}).get("name") == obj["name"], 1)
    run_id = call["key"]
    deadline = time.monotonic() + 30
    while (answered := stack.server.output().count(f"delivery {run_id}: duplicate (200)")) < 3:
        assert time.monotonic() < deadline, f"{answered} of the 3 other pushes answered duplicate"
        time.sleep(0.1)
    assert len([r for r in list(stack.downstream.received) if r["key"] == run_id]) == 1
