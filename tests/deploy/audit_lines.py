"""The JSON log lines runonce writes for missed runs: what the missed-runs metric of Terraform and of
deploy/audit-job.sh must count. Made by the real audit and the real JSON formatter, not written by hand."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta

import pytest

from runonce.logs import JsonFormatter
from runonce.metrics import Metrics
from runonce.missed.audit import AUDIT_ROUTE, AuditTarget
from runonce.routes import parse_routes
from runonce.stores.memory import MemoryStore
from runonce.targets import DispatchRequest


def missed_run_lines(caplog: pytest.LogCaptureFixture) -> list[dict]:
    """The lines of one audit at 12:00 over route `etl` (every 5 minutes) with an empty store: 11:45
    and 11:50 are missed."""
    routes = parse_routes(
        "routes: {etl: {target: {type: log}, job: etl-job, schedule: '*/5 * * * *', "
        "namespace: {project: proj-1, location: us-central1}}}",
        "test",
    )
    now = datetime(2026, 3, 8, 12, 0, 30, tzinfo=UTC)
    audit = AuditTarget(
        MemoryStore(),
        routes,
        lease=timedelta(seconds=300),
        retention=timedelta(days=1),
        clock=lambda: now,
        metrics=Metrics(),
    )
    with caplog.at_level(logging.ERROR, logger="runonce.audit"):
        asyncio.run(
            audit.dispatch(
                DispatchRequest(
                    run_id="a" * 64,
                    route=AUDIT_ROUTE,
                    job="runonce-audit",
                    schedule_time="2026-03-08T12:00:00Z",
                    source="scheduler",
                )
            )
        )
    return [json.loads(JsonFormatter().format(record)) for record in caplog.records]


def unmet_terms(terms: list[str], line: dict) -> list[str]:
    """The `key=value` terms of a log filter that `line` does not satisfy; `resource.*` terms are
    set by Cloud Run, not by runonce, so they are not evaluated."""
    unmet = []
    for term in terms:
        key, value = term.split("=", 1)
        if key.startswith("resource."):
            continue
        found: object = line
        for part in key.removeprefix("jsonPayload.").split("."):
            found = found.get(part) if isinstance(found, dict) else None
        if found != value.strip('"'):
            unmet.append(term)
    return unmet
