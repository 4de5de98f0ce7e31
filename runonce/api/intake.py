"""What every endpoint reads of a request the same way: its query parameters (repeated ones kept, so
the parser can refuse them) and its body, streamed within `MAX_BODY_BYTES` and parsed by `parse_body`.
Shared by the delivery endpoint (deliveries.py) and the audit and backfill endpoints (missed.py)."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from runonce import errors
from runonce.run.delivery import MAX_BODY_BYTES, parse_body


def query_params(request: Request) -> dict[str, list[str]]:
    """Each query parameter with every value it was given, in order."""
    values: dict[str, list[str]] = {}
    for key, value in request.query_params.multi_items():
        values.setdefault(key, []).append(value)
    return values


async def read_body(request: Request, route: str, run_id: str | None) -> tuple[dict[str, Any], str]:
    """Stream the body within `MAX_BODY_BYTES` (413 beyond), then `parse_body` it; an error names
    `route` and, once it is known, `run_id`."""
    raw = await read_raw(request, route, run_id)
    try:
        return parse_body(raw)
    except errors.InvalidDelivery as exc:
        exc.run_id = run_id  # the run is known by now: the answer names it
        raise


async def read_raw(request: Request, route: str, run_id: str | None = None) -> bytes:
    """The body's bytes, streamed within `MAX_BODY_BYTES` (413 beyond: Content-Length or the bytes)."""
    context = {"route": route, "run_id": run_id}
    declared = request.headers.get("content-length", "")
    too_long = len(declared) > len(str(MAX_BODY_BYTES))  # bounded before int(): more digits is more bytes
    if declared.isascii() and declared.isdigit() and (too_long or int(declared) > MAX_BODY_BYTES):
        raise errors.PayloadTooLarge("body", f"body is over {MAX_BODY_BYTES} bytes (Content-Length)", **context)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise errors.PayloadTooLarge("body", f"body is over {MAX_BODY_BYTES} bytes", **context)
        chunks.append(chunk)
    return b"".join(chunks)
