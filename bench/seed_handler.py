"""The seed's handler, as Google's guide writes it (shared/seeds/000, "HTTP 處理常式範例"): Flask
under functions-framework, the sync Firestore client, one transaction to claim and one to finish.
The only changes, each marked `# bench:`, give it work to do: `run_job_logic` POSTs the run to
the same local downstream runonce calls, with the run_id as the idempotency token (the guide's
proxy section asks for that), through one keep-alive `requests.Session`. Served as Cloud Run
functions serve it (gunicorn, one worker, THREADS threads; default 4 per core):

    GOOGLE_CLOUD_PROJECT=runonce-bench FIRESTORE_EMULATOR_HOST=127.0.0.1:P \
    BENCH_DOWNSTREAM_URL=http://127.0.0.1:Q/ok \
    functions-framework --source bench/seed_handler.py --target handle_scheduled_job --port 8081

bench/baseline_app.py is the async rewrite of this same logic (FastAPI, uvicorn, AsyncClient).
"""

import datetime
import hashlib
import os  # bench:
import uuid

import flask
import functions_framework
import requests  # bench:
from google.cloud import firestore

# Longer than the work takes, and at least the job's attempt deadline.
LEASE = datetime.timedelta(minutes=5)
# Keep records past the job's retry window. A TTL policy on expire_at deletes them.
RETENTION = datetime.timedelta(days=1)

db = firestore.Client()
downstream = os.environ["BENCH_DOWNSTREAM_URL"]  # bench:
session = requests.Session()  # bench: keep-alive to the downstream, as runonce's httpx client has


def run_job_logic(run_id: str) -> None:  # bench: takes the run_id to forward
    """Does the scheduled work. Replace the body with your own task."""
    response = session.post(
        downstream, json={"run_id": run_id}, headers={"Idempotency-Key": run_id}, timeout=30
    )  # bench:
    response.raise_for_status()  # bench:


@firestore.transactional
def claim_run(
    transaction: firestore.Transaction,
    run_ref: firestore.DocumentReference,
    attempt_id: str,
    now: datetime.datetime,
) -> str:
    """Claims the run unless it's done or another attempt holds the lease."""
    snapshot = run_ref.get(transaction=transaction)
    if snapshot.exists:
        run = snapshot.to_dict()
        if run["status"] == "completed":
            return "completed"
        if run["lease_expires"] > now:
            return "in_progress"
    transaction.set(
        run_ref,
        {
            "status": "in_progress",
            "attempt_id": attempt_id,
            "lease_expires": now + LEASE,
            "expire_at": now + RETENTION,
        },
    )
    return "claimed"


@firestore.transactional
def finish_run(
    transaction: firestore.Transaction,
    run_ref: firestore.DocumentReference,
    attempt_id: str,
    succeeded: bool,
) -> None:
    """Completes or releases the run, if this attempt still holds the claim."""
    snapshot = run_ref.get(transaction=transaction)
    if not snapshot.exists or snapshot.to_dict().get("attempt_id") != attempt_id:
        return  # A retry claimed the run after this attempt's lease expired.
    if succeeded:
        transaction.update(run_ref, {"status": "completed"})
    else:
        transaction.delete(run_ref)


@functions_framework.http
def handle_scheduled_job(request: flask.Request) -> tuple[str, int]:
    """Runs a job's work once per scheduled run, even if the run is delivered twice."""
    job_name = request.headers.get("X-CloudScheduler-JobName")
    schedule_time = request.headers.get("X-CloudScheduler-ScheduleTime")
    if not job_name or not schedule_time:
        return "error: missing Cloud Scheduler headers", 400

    # Retries keep the same schedule time. A forced run uses the next
    # scheduled time, so that scheduled run is then skipped.
    run_id = hashlib.sha256(f"{job_name}/{schedule_time}".encode()).hexdigest()
    run_ref = db.collection("scheduler_runs").document(run_id)
    now = datetime.datetime.now(datetime.UTC)
    attempt_id = uuid.uuid4().hex

    status = claim_run(db.transaction(), run_ref, attempt_id, now)
    if status == "completed":
        return "Duplicate run skipped", 200
    if status == "in_progress":
        # A non-2xx response keeps retries going in case that attempt fails.
        return "Run in progress", 409

    try:
        run_job_logic(run_id)  # bench: passes the run_id
    except Exception:
        # Releases the claim so that a retry can process the run.
        finish_run(db.transaction(), run_ref, attempt_id, succeeded=False)
        raise
    finish_run(db.transaction(), run_ref, attempt_id, succeeded=True)
    return "Run processed", 200
