"""Logs: one JSON object per line in Cloud Logging's structured format (`RUNONCE_LOG_FORMAT=json`,
the default on Cloud Run), or readable text locally. Never both in one stream: uvicorn's own
access log is off and runonce writes one access line per request itself (`api/access_log.py`).

Cloud Logging reads these special fields of a JSON line:
`severity`, `message`, `time`, `logging.googleapis.com/trace` (`projects/P/traces/T`, which ties the
line to the request's trace and to Cloud Run's request log), `logging.googleapis.com/spanId`,
`logging.googleapis.com/labels` (runonce puts `run_id` and `route` there, so one filter on
`labels.run_id` finds every line of a run), and `httpRequest` (on the access line).

The trace and labels of the request being served travel in a context variable, so every line
logged while serving it carries them, whichever module logs it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import httpx

from runonce.tls import client_context

TRACE = "logging.googleapis.com/trace"
SPAN_ID = "logging.googleapis.com/spanId"
TRACE_SAMPLED = "logging.googleapis.com/trace_sampled"
LABELS = "logging.googleapis.com/labels"

_context: ContextVar[dict[str, Any] | None] = ContextVar("runonce_log_context", default=None)

# Matched whole (fullmatch), in ASCII: only what matches is logged (a span id is at most 64 bits).
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_CLOUD_TRACE = re.compile(r"([0-9a-fA-F]{32})(?:/([0-9]{1,20}))?(?:;o=([01]))?")


def trace_fields(headers: Any, project: str | None) -> dict[str, Any]:
    """The trace fields for a request, from W3C `traceparent` or `X-Cloud-Trace-Context`."""
    trace_id = span_id = None
    sampled = False
    if match := _TRACEPARENT.fullmatch(headers.get("traceparent", "").strip(" \t")):
        trace_id, span_id, sampled = match.group(1), match.group(2), int(match.group(3), 16) & 1 == 1
    elif match := _CLOUD_TRACE.fullmatch(headers.get("x-cloud-trace-context", "").strip(" \t")):
        trace_id, sampled = match.group(1).lower(), match.group(3) == "1"
        span = int(match.group(2)) if match.group(2) else None  # decimal there, hex here
        span_id = f"{span:016x}" if span is not None and span < 2**64 else None
    if trace_id is None or trace_id == "0" * 32:
        return {}
    fields: dict[str, Any] = {TRACE: f"projects/{project}/traces/{trace_id}" if project else trace_id}
    if span_id:
        fields[SPAN_ID] = span_id
    fields[TRACE_SAMPLED] = sampled
    return fields


def bind(**values: Any) -> None:
    """Add fields (trace fields, or `labels={...}` merged) to every line of the current request."""
    current = dict(_context.get() or {})
    labels = values.pop("labels", None)
    if labels:
        current["labels"] = {**current.get("labels", {}), **labels}
    current.update(values)
    _context.set(current)


def new_context() -> None:
    _context.set({})


def discover_project(timeout: float = 1.0) -> str | None:
    """The project for trace names: GOOGLE_CLOUD_PROJECT, else (on Cloud Run) the metadata server."""
    for name in ("GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "GCP_PROJECT"):
        if os.environ.get(name):
            return os.environ[name]
    if not os.environ.get("K_SERVICE"):
        return None
    host = os.environ.get("GCE_METADATA_HOST", "metadata.google.internal")
    try:
        response = httpx.get(
            f"http://{host}/computeMetadata/v1/project/project-id",
            headers={"Metadata-Flavor": "Google"},
            timeout=timeout,
            verify=client_context(),
        )
        return response.text.strip() if response.status_code == 200 else None
    except httpx.HTTPError:
        return None


class JsonFormatter(logging.Formatter):
    """One Cloud Logging entry per line. Extra fields come from `extra={"fields": {...}}`."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": record.levelname if record.levelname != "WARN" else "WARNING",
            "message": record.getMessage(),
            "time": datetime.fromtimestamp(record.created, UTC).isoformat().replace("+00:00", "Z"),
            "logger": record.name,
        }
        if record.exc_info:
            entry["message"] += "\n" + self.formatException(record.exc_info)
        context = _context.get() or {}
        labels = dict(context.get("labels", {}))
        for key, value in context.items():
            if key != "labels":
                entry[key] = value
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            fields = dict(fields)
            labels.update(fields.pop(LABELS, {}))
            entry.update(fields)
        if labels:
            entry[LABELS] = labels
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`time level logger: message key=value …` for a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            shown = {k: v for k, v in fields.items() if k not in ("httpRequest", LABELS)}
            pairs = [f"{key}={_text_value(value)}" for key, value in _dotted(shown, "")]
            if pairs:
                line += " " + " ".join(pairs)
        return line


def _dotted(fields: dict[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    """`target={"type": "http"}` as `target.type=http`: the names Cloud Logging's filters use
    (`jsonPayload.target.type`), instead of a Python dict on a terminal."""
    for key, value in fields.items():
        if isinstance(value, dict):
            yield from _dotted(value, f"{prefix}{key}.")
        elif value not in (None, ""):
            yield f"{prefix}{key}", value


def _text_value(value: Any) -> str:
    """A value as one token: a string as it is unless it has a space, a quote or `=`; JSON otherwise."""
    if isinstance(value, str) and not any(c.isspace() or c in "\"'=" for c in value):
        return value
    return json.dumps(value, default=str, ensure_ascii=False)


def _formatter(log_format: str) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else TextFormatter()


def configure_logging(log_format: str, level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(_formatter(log_format))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per outbound call is noise


def uvicorn_log_config(log_format: str) -> dict[str, Any]:
    """uvicorn's own lines in our format, on stdout; its access log off (`api/access_log.py` writes ours)."""
    formatter = {"()": "runonce.logs.JsonFormatter"} if log_format == "json" else {"()": "runonce.logs.TextFormatter"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "handlers": {
            "default": {"class": "logging.StreamHandler", "formatter": "default", "stream": "ext://sys.stdout"}
        },
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"handlers": ["default"], "level": "WARNING", "propagate": False},
        },
    }
