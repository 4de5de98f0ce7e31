"""Property-based fuzz of event routes' intake, in process: Pub/Sub push envelopes and CloudEvents
(binary and structured) built valid, then broken field by field: any JSON in any field, fields
dropped, bytes that are not JSON or not UTF-8, any text in any ce-* header, every content type.

Every answer must be 200 (`processed`, `duplicate`) or a 400/413 naming a field, never a 500, and
afterwards the store holds a record for exactly the runs answered 200. The same request sent twice
gets the same run_id.

Budget: RUNONCE_FUZZ_SOURCES_EXAMPLES (default 300) requests per property; RUNONCE_FUZZ_SEED replays
a run; the seed is printed either way.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from tests.support.clock import Clock
from tests.support.events import envelope, open_events_api, storage_notification

EXAMPLES = int(os.environ.get("RUNONCE_FUZZ_SOURCES_EXAMPLES", "300"))
SEED = int(os.environ.get("RUNONCE_FUZZ_SEED") or random.SystemRandom().randrange(2**32))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)
edge_text = st.sampled_from(["", " ", "1", "0", "-1", "\x00", "a|b", '"', "\ud800", "٣", "9" * 30, "x" * 600])
any_text = edge_text | st.text(max_size=40)


@st.composite
def broken_envelopes(draw: st.DrawFn) -> bytes:
    """A push body: a valid envelope (plain or a Storage notification) with some fields replaced,
    dropped or added; or bytes that are no envelope."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=60) | st.text(max_size=60).map(lambda t: t.encode("utf-8", "surrogatepass")))
    message_id = draw(any_text | st.sampled_from(["1", "2"]))
    body: dict[str, Any] = (
        storage_notification(message_id) if draw(st.booleans()) else envelope(message_id, attributes={"a": "b"})
    )
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(["envelope", "message", "attributes"]))
        message = body.get("message")
        target: Any = body if where == "envelope" else message
        if where == "attributes" and isinstance(message, dict):
            target = message.get("attributes")
        if not isinstance(target, dict):
            continue  # broken already: nothing left to break there
        keys = ["message", "subscription", "deliveryAttempt"] if where == "envelope" else list(target) or ["x"]
        if where == "message":
            keys += ["data", "attributes", "messageId", "message_id", "publishTime", "orderingKey"]
        key = draw(st.sampled_from(keys))
        action = draw(st.sampled_from(["drop", "text", "json", "base64"]))
        if action == "drop":
            target.pop(key, None)
        elif action == "text":
            target[key] = draw(any_text)
        elif action == "json":
            target[key] = draw(json_values)
        else:
            target[key] = base64.b64encode(draw(st.binary(max_size=30))).decode()
    text = json.dumps(body, ensure_ascii=draw(st.booleans()))
    return text.encode("utf-8", "surrogatepass")


CE_NAMES = ["ce-id", "ce-source", "ce-type", "ce-specversion", "ce-time", "ce-subject", "ce-x", "content-type"]
CONTENT_TYPES = [
    "application/json",
    "application/cloudevents+json",
    "application/cloudevents-batch+json",
    "text/plain",
    "application/octet-stream",
    "APPLICATION/CLOUDEVENTS+JSON; charset=utf-8",
]
latin1 = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=30)


@st.composite
def broken_cloudevents(draw: st.DrawFn) -> tuple[dict[str, str], bytes]:
    """Binary-mode headers with some values replaced or dropped, or a structured body broken like an envelope."""
    headers = {
        "ce-id": draw(st.sampled_from(["e1", "e2"]) | latin1),
        "ce-source": "//storage.googleapis.com/projects/_/buckets/b",
        "ce-type": draw(st.sampled_from(["com.example.t", "google.cloud.storage.object.v1.finalized"])),
        "ce-specversion": "1.0",
        "ce-time": draw(st.sampled_from(["2026-10-16T12:00:00Z", "noon", "9999-12-31T23:59:59+00:00"])),
    }
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(CE_NAMES))
        if draw(st.booleans()):
            headers.pop(name, None)
        else:
            headers[name] = draw(st.sampled_from(CONTENT_TYPES) if name == "content-type" else latin1)
    data: Any = draw(st.sampled_from([{"bucket": "b", "name": "o", "generation": "1"}, {}]) | json_values)
    if headers.get("content-type", "").lower().startswith("application/cloudevents+json"):
        event = {k[3:]: v for k, v in headers.items() if k.startswith("ce-")}
        event["data"] = data
        if draw(st.booleans()):
            event[draw(st.sampled_from(["id", "source", "data_base64", "specversion"]))] = draw(json_values)
        return {"content-type": headers["content-type"]}, json.dumps(event).encode()
    body = draw(st.sampled_from([json.dumps(data).encode(), b"", b"\xff\xfe", b"{bad"]))
    return headers, body


class Fuzz:
    """One app for every example; counts the answers and checks each."""

    def __init__(self) -> None:
        self.statuses: Counter[str] = Counter()
        self.accepted: set[str] = set()
        self.loop = asyncio.new_event_loop()
        self._context = open_events_api(Clock())
        self.events = self.loop.run_until_complete(self._context.__aenter__())

    def send(self, route: str, headers: dict[str, str], body: bytes) -> None:
        async def twice() -> tuple[Any, Any]:
            url = f"/v1/routes/{route}:run"
            raw = {name: value.encode("latin-1") for name, value in headers.items()}  # any byte, as on the wire
            first = await self.events.client.post(url, headers=raw, content=body)
            second = await self.events.client.post(url, headers=raw, content=body)
            return first, second

        first, second = self.loop.run_until_complete(twice())
        for response in (first, second):
            answer = response.json()
            self.statuses[f"{response.status_code} {answer['status']}"] += 1
            assert (response.status_code, answer["status"]) in {
                (200, "processed"),
                (200, "duplicate"),
                (400, "invalid"),
                (413, "invalid"),
            }, answer
            if response.status_code == 200:
                self.accepted.add(answer["run_id"])
            else:
                assert answer["error"]["field"], answer
        assert first.status_code == second.status_code, (first.json(), second.json())
        if first.status_code == 200:
            assert second.json() == {**first.json(), "status": "duplicate"}

    def run(self, route: str, strategy: st.SearchStrategy, capsys: pytest.CaptureFixture) -> None:
        @seed(SEED)
        @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(strategy)
        def property(request: Any) -> None:
            headers, body = request if isinstance(request, tuple) else ({"content-type": "application/json"}, request)
            self.send(route, headers, body)

        property()
        stored = {
            r.run_id
            for r in self.loop.run_until_complete(
                self.events.store.list(self.events.clock(), route=route, limit=10_000)
            )
        }
        assert stored == self.accepted
        with capsys.disabled():
            print(
                f"\nfuzz {route}: {sum(self.statuses.values())} requests, seed {SEED} "
                f"(RUNONCE_FUZZ_SEED={SEED} replays, RUNONCE_FUZZ_SOURCES_EXAMPLES={EXAMPLES} sets the budget); "
                f"answers {dict(sorted(self.statuses.items()))}"
            )

    def close(self) -> None:
        self.loop.run_until_complete(self._context.__aexit__(None, None, None))
        self.loop.close()


@pytest.fixture
def fuzz() -> Any:
    harness = Fuzz()
    yield harness
    harness.close()


def test_fuzz_pubsub_envelopes(fuzz: Fuzz, capsys: pytest.CaptureFixture) -> None:
    fuzz.run("orders", broken_envelopes(), capsys)
    assert fuzz.statuses["200 processed"] > 0 and fuzz.statuses["400 invalid"] > 0


def test_fuzz_cloudevents(fuzz: Fuzz, capsys: pytest.CaptureFixture) -> None:
    fuzz.run("uploads", broken_cloudevents(), capsys)
    assert fuzz.statuses["200 processed"] > 0 and fuzz.statuses["400 invalid"] > 0
