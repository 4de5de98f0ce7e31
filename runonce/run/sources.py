"""Which parser reads a route's deliveries, by the route's `source`, and the refusals that keep
each route to its own shape: an event route never takes Scheduler headers (events.py), and a
Scheduler route never takes a Pub/Sub envelope or a CloudEvent (here)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from runonce.errors import InvalidDelivery
from runonce.run import cloudevents, pubsub
from runonce.run.delivery import Delivery
from runonce.run.events import Event, EventPolicy, EventSource, event_delivery, refuse_scheduler_headers

PARSERS: dict[EventSource, tuple[Callable[[Mapping[str, str], bytes], Event], str]] = {
    "pubsub": (pubsub.parse_pubsub, pubsub.EXPECTED),
    "cloudevents": (cloudevents.parse_cloudevent, cloudevents.EXPECTED),
}
"""Each event source's parser, and what it takes in words."""

SCHEDULER_EXPECTED = (
    "this route's source is scheduler: it takes Cloud Scheduler or Cloud Tasks deliveries "
    "(X-CloudScheduler-* or X-CloudTasks-* headers)"
)


def parse_event(
    policy: EventPolicy, route: str, headers: Mapping[str, str], raw: bytes, namespace: tuple[str, str]
) -> tuple[Delivery, dict[str, Any], str]:
    """An event route's delivery: its `Delivery`, payload and body hash (events.event_delivery).
    Raises `InvalidDelivery` naming the header or field at fault."""
    parse, expected = PARSERS[policy.source]
    refuse_scheduler_headers(headers, policy.source, expected)
    return event_delivery(parse(headers, raw), route, namespace, policy)


def refuse_event_headers(headers: Mapping[str, str]) -> None:
    """A Scheduler route refuses a CloudEvent, and a Pub/Sub push's own headers, before anything else."""
    header = cloudevents.is_cloudevent(headers)
    if header is not None:
        raise InvalidDelivery(
            header, f"this is a CloudEvent; {SCHEDULER_EXPECTED} (a route with source: cloudevents takes events)"
        )
    for name in pubsub.UNWRAPPED_HEADERS:
        if headers.get(name) is not None:
            raise InvalidDelivery(
                name, f"this is a Pub/Sub push; {SCHEDULER_EXPECTED} (a route with source: pubsub takes them)"
            )


def refuse_envelope(payload: Mapping[str, Any]) -> None:
    """A Scheduler route refuses a body that is a Pub/Sub push envelope."""
    if pubsub.is_envelope(payload):
        raise InvalidDelivery(
            "body",
            f"this body is a Pub/Sub push envelope; {SCHEDULER_EXPECTED} (a route with source: pubsub takes envelopes)",
        )
