"""Prometheus metrics, served at `GET /metrics` in the text format (prometheus-client).

One registry per app, so several apps in one process (tests) never collide. Values are per
process: run one uvicorn worker per container (Cloud Run's shape) or scrape each worker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

# Dispatches are API calls that may take seconds; store operations are single RPCs.
DISPATCH_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
STORE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self.deliveries = Counter(
            "runonce_deliveries",
            "Deliveries answered, by route and outcome (the response's status).",
            ["route", "outcome"],
            registry=self.registry,
        )
        self.runs_skipped = Counter(
            "runonce_runs_skipped",
            "Runs recorded skipped, not dispatched, by route and reason (late, overlap).",
            ["route", "reason"],
            registry=self.registry,
        )
        self.dispatch_seconds = Histogram(
            "runonce_dispatch_seconds",
            "Time spent in the target (reconcile + dispatch), by target type.",
            ["target_type"],
            buckets=DISPATCH_BUCKETS,
            registry=self.registry,
        )
        self.store_seconds = Histogram(
            "runonce_store_seconds",
            "Claim-store operation latency, by operation.",
            ["operation"],
            buckets=STORE_BUCKETS,
            registry=self.registry,
        )
        self.missed_runs = Counter(
            "runonce_missed_runs",
            "Scheduled runs the audit found no record of (POST /v1/audit:run), by route.",
            ["route"],
            registry=self.registry,
        )
        self.dispatches_in_flight = Gauge(
            "runonce_dispatches_in_flight",
            "Dispatches (and reconciliations) running now.",
            registry=self.registry,
        )

    @contextmanager
    def store_timer(self, operation: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.store_seconds.labels(operation).observe(time.perf_counter() - started)

    @contextmanager
    def dispatching(self, target_type: str) -> Iterator[None]:
        started = time.perf_counter()
        self.dispatches_in_flight.inc()
        try:
            yield
        finally:
            self.dispatches_in_flight.dec()
            self.dispatch_seconds.labels(target_type).observe(time.perf_counter() - started)

    def count_certs_fetches(self, read: Callable[[], int]) -> None:
        """Expose a count kept elsewhere (the OIDC certificate cache) as a counter."""
        self.registry.register(_ReadCounter("runonce_certs_fetches", "Fetches of token-signing certificates.", read))


class _ReadCounter(Collector):
    def __init__(self, name: str, documentation: str, read: Callable[[], int]):
        self.name, self.documentation, self.read = name, documentation, read

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.documentation, value=self.read())
