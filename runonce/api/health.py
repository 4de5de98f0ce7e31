"""Probes and scrapes: `/healthz` (the process is up), `/readyz` (the claim store answers),
`/metrics` (Prometheus). The access log skips their successful answers.

The probes need no credentials, so they say up or down and nothing more: the store's address and
its driver's words, which name hosts and may quote configuration, go to the log.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from runonce.api.deps import MetricsDep, StoreDep
from runonce.stores import StoreUnavailable

logger = logging.getLogger("runonce.health")

router = APIRouter()


@router.get("/healthz", summary="The process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/metrics", summary="Prometheus metrics (text format)", response_class=PlainTextResponse)
async def prometheus_metrics(metrics: MetricsDep) -> Response:
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/readyz", summary="The claim store answers")
async def readyz(store: StoreDep) -> JSONResponse:
    try:
        await store.ping()
    except StoreUnavailable as exc:
        logger.warning("not ready: the claim store did not answer: %s", exc)
        return JSONResponse({"status": "unavailable"}, status_code=503)
    return JSONResponse({"status": "ok"})
