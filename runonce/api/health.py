"""Probes and scrapes: `/healthz` (the process is up), `/readyz` (the claim store answers),
`/metrics` (Prometheus). The access log skips their successful answers."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from runonce.api.deps import AuthDep, MetricsDep, StoreDep
from runonce.stores import StoreUnavailable

router = APIRouter()


@router.get("/healthz", summary="The process is up")
async def healthz(authenticator: AuthDep) -> dict[str, Any]:
    body: dict[str, Any] = {"status": "ok"}
    if not authenticator.enabled:
        body["warning"] = "authentication is off (RUNONCE_AUTH=none): any caller can trigger every route"
    return body


@router.get("/metrics", summary="Prometheus metrics (text format)", response_class=PlainTextResponse)
async def prometheus_metrics(metrics: MetricsDep) -> Response:
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/readyz", summary="The claim store answers")
async def readyz(store: StoreDep) -> JSONResponse:
    try:
        await store.ping()
    except StoreUnavailable as exc:
        return JSONResponse({"status": "unavailable", "error": {"message": str(exc)}}, status_code=503)
    return JSONResponse({"status": "ok"})
