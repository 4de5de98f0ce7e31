"""`http` target: POST the run to a URL that dedupes on the `Idempotency-Key` header itself.

No reconciliation: when an earlier attempt's outcome is unknown, the run is sent again with the
same key and the downstream answers it as a duplicate.

With `audience`, the request carries a Google-signed ID token for that audience (from the metadata
server / ADC, cached and refreshed by `google.GoogleAuth`), as Cloud Run services and Cloud
Functions that require authentication expect.
"""

from __future__ import annotations

from typing import Any, Literal

import httpx
from pydantic import AnyHttpUrl, Field

from runonce.targets.base import (
    NOTHING_SENT,
    DispatchRequest,
    Target,
    TargetConfigModel,
    TargetFailed,
    TargetOutcomeUnknown,
    TargetThrottled,
    encode_json,
    parse_retry_after,
)
from runonce.targets.engine import translated
from runonce.targets.google import GoogleAuth
from runonce.targets.registry import TargetType


class HttpTargetConfig(TargetConfigModel):
    type: Literal["http"]
    url: AnyHttpUrl
    audience: str | None = Field(
        None, min_length=1, description="Send a Google-signed ID token for this audience (e.g. the service URL)."
    )


def run_document(request: DispatchRequest) -> bytes:
    """The run as JSON, `{run_id, job, schedule_time, source, payload[, task]}`: the body of the
    request the `http` target sends (and the `cloud_tasks_task` target's task)."""
    body: dict[str, Any] = {
        "run_id": request.run_id,
        "job": request.job,
        "schedule_time": request.schedule_time,
        "source": request.source,
        "payload": request.payload,
    }
    if request.task is not None:
        body["task"] = request.task
    return encode_json(body).encode("utf-8")


class HttpTarget(Target):
    type = "http"

    def __init__(self, config: HttpTargetConfig, client: httpx.AsyncClient, auth: GoogleAuth | None = None):
        self.config = config
        self.url = str(config.url)
        self._client = client
        self._auth = auth
        if config.audience and auth is None:
            raise ValueError("an http target with an audience needs Google credentials (auth)")

    async def dispatch(self, request: DispatchRequest) -> str:
        content = run_document(request)
        headers = {"Idempotency-Key": request.run_id, "Content-Type": "application/json"}
        if self.config.audience:
            headers["Authorization"] = f"Bearer {await self._id_token(self.config.audience)}"
        try:
            response = await self._client.post(self.url, content=content, headers=headers)
        except NOTHING_SENT as exc:
            # Raised before a byte of the request left: nothing can have been created.
            raise TargetFailed(f"POST {self.url}: could not connect: {exc!r}") from exc
        except httpx.TransportError as exc:
            # Timeouts and resets after sending: the downstream may have acted on it.
            raise TargetOutcomeUnknown(f"POST {self.url}: no answer: {exc!r}") from exc
        return self._classify(response)

    async def _id_token(self, audience: str) -> str:
        assert self._auth is not None
        with translated(f"get an ID token for audience {audience}"):
            return await self._auth.id_token(audience)

    def _classify(self, response: httpx.Response) -> str:
        status = response.status_code
        if 200 <= status < 300:
            return self.url
        detail = f"POST {self.url}: HTTP {status}: {response.text[:300]}"
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        if status == 429 or (status == 503 and retry_after is not None):
            raise TargetThrottled(detail, retry_after)
        if status == 504:  # a gateway gave up waiting: the downstream may still be working on it
            raise TargetOutcomeUnknown(detail)
        raise TargetFailed(detail)


TARGET = TargetType(
    name="http",
    config=HttpTargetConfig,
    adapter=HttpTarget,
    build=lambda config, context, endpoint: HttpTarget(config, context.http, context.google_auth),
    # With an audience on Cloud Run: roles/run.invoker on that service, which the URL cannot name
    # (deploy scripts take it as --downstream-service, Terraform as downstream_services).
)
