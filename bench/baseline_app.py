"""The async rewrite of the seed's handler: Google's documented Scheduler-dedup sample (seeds/000,
literally in bench/seed_handler.py) made async and pointed at the same downstream as runonce. One
Firestore transaction to claim (get + set), the call, one transaction to finish (get + update).
Served by uvicorn like runonce, so only the claim path differs.

    BENCH_DOWNSTREAM_URL=http://127.0.0.1:P/ok uvicorn bench.baseline_app:app
"""

from __future__ import annotations

import datetime
import hashlib
import os
import uuid

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse
from google.cloud import firestore

LEASE = datetime.timedelta(minutes=5)
RETENTION = datetime.timedelta(days=1)

db = firestore.AsyncClient(project=os.environ.get("BENCH_FIRESTORE_PROJECT", "runonce-bench"))
collection = db.collection(os.environ.get("BENCH_COLLECTION", "scheduler_runs"))
downstream = os.environ["BENCH_DOWNSTREAM_URL"]
http = httpx.AsyncClient(timeout=30)
app = FastAPI()


@firestore.async_transactional
async def claim_run(transaction, run_ref, attempt_id: str, now: datetime.datetime) -> str:
    snapshot = await run_ref.get(transaction=transaction)
    if snapshot.exists:
        run = snapshot.to_dict()
        if run["status"] == "completed":
            return "completed"
        if run["lease_expires"] > now:
            return "in_progress"
    transaction.set(
        run_ref,
        {"status": "in_progress", "attempt_id": attempt_id, "lease_expires": now + LEASE, "expire_at": now + RETENTION},
    )
    return "claimed"


@firestore.async_transactional
async def finish_run(transaction, run_ref, attempt_id: str, succeeded: bool) -> None:
    snapshot = await run_ref.get(transaction=transaction)
    if not snapshot.exists or snapshot.to_dict().get("attempt_id") != attempt_id:
        return
    if succeeded:
        transaction.update(run_ref, {"status": "completed"})
    else:
        transaction.delete(run_ref)


@app.post("/v1/routes/{route}:run")
async def handle_scheduled_job(route: str, request: Request) -> PlainTextResponse:
    job_name = request.headers.get("X-CloudScheduler-JobName")
    schedule_time = request.headers.get("X-CloudScheduler-ScheduleTime")
    if not job_name or not schedule_time:
        return PlainTextResponse("error: missing Cloud Scheduler headers", 400)
    run_id = hashlib.sha256(f"{job_name}/{schedule_time}".encode()).hexdigest()
    run_ref = collection.document(run_id)
    now = datetime.datetime.now(datetime.UTC)
    attempt_id = uuid.uuid4().hex

    status = await claim_run(db.transaction(), run_ref, attempt_id, now)
    if status == "completed":
        return PlainTextResponse("Duplicate run skipped", 200)
    if status == "in_progress":
        return PlainTextResponse("Run in progress", 409)
    try:
        response = await http.post(downstream, json={"run_id": run_id}, headers={"Idempotency-Key": run_id})
        response.raise_for_status()
    except Exception:
        await finish_run(db.transaction(), run_ref, attempt_id, succeeded=False)
        raise
    await finish_run(db.transaction(), run_ref, attempt_id, succeeded=True)
    return PlainTextResponse("Run processed", 200)


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}
