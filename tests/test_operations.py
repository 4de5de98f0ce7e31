"""What an operator sees: the JSON log stream of a running process, /metrics, and SIGTERM."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sqlite3
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.downstream import Downstream
from tests.support.procs import ServerProcess, start_server

pytestmark = pytest.mark.e2e

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SECRET_BODY = "body-secret-0b5e"
SECRET_TOKEN = "eyJhbGciOiJSUzI1NiJ9.token-secret-77aa.c2ln"


def env(downstream: Downstream, tmp_path: Path, **extra: str) -> dict[str, str]:
    routes = {
        "routes": {
            name: {
                "target": {"type": "http", "url": f"{downstream.url}/{name}"},
                "namespace": {"project": "ops-project", "location": "europe-west1"},
            }
            for name in ("ok", "fail", "slow")
        }
    }
    return {
        "RUNONCE_AUTH": "none",
        "RUNONCE_ROUTES": json.dumps(routes),
        "RUNONCE_STORE": f"sqlite:///{tmp_path / 'runs.db'}",
        "RUNONCE_LOG_FORMAT": "json",
        "GOOGLE_CLOUD_PROJECT": "ops-project",
        **extra,
    }


def job(name: str, when: str = "2026-10-16T12:00:00Z") -> dict[str, str]:
    return {"X-CloudScheduler-JobName": name, "X-CloudScheduler-ScheduleTime": when}


def json_lines(server: ServerProcess) -> list[dict]:
    lines = [line for line in server.output().splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every line must be JSON: one format per stream


@pytest.fixture
def downstream():
    with Downstream() as service:
        yield service


async def test_json_logs_have_one_outcome_line_per_delivery_with_cloud_logging_fields(
    downstream: Downstream, tmp_path: Path
) -> None:
    downstream.set("/fail", 500)
    server = start_server(env(downstream, tmp_path), tmp_path)
    try:
        async with httpx.AsyncClient(base_url=server.url) as client:
            ok = await client.post(
                "/v1/routes/ok:run",
                headers={
                    **job("nightly"),
                    "traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01",
                    "Authorization": f"Bearer {SECRET_TOKEN}",
                },
                json={"secret": SECRET_BODY},
            )
            dup = await client.post(
                "/v1/routes/ok:run",
                headers={**job("nightly"), "X-Cloud-Trace-Context": f"{TRACE_ID}/12345;o=1"},
                json={"secret": SECRET_BODY},
            )
            failed = await client.post("/v1/routes/fail:run", headers=job("flaky"))
            invalid = await client.post(
                "/v1/routes/ok:run?token=" + SECRET_TOKEN, headers={"X-CloudScheduler-JobName": "x"}
            )
            await client.get("/healthz")
    finally:
        server.stop()
    assert [r.status_code for r in (ok, dup, failed, invalid)] == [200, 200, 502, 400]

    entries = json_lines(server)
    outcomes = [e for e in entries if "outcome" in e]
    assert [e["outcome"] for e in outcomes] == ["processed", "duplicate", "failed", "invalid"]  # one each

    first = outcomes[0]
    run_id = ok.json()["run_id"]
    assert first["severity"] == "INFO" and first["message"] and first["time"].endswith("Z")
    assert first["logging.googleapis.com/trace"] == f"projects/ops-project/traces/{TRACE_ID}"
    assert first["logging.googleapis.com/spanId"] == "00f067aa0ba902b7"
    assert first["logging.googleapis.com/labels"] == {"run_id": run_id, "route": "ok"}
    assert first["run_id"] == run_id and first["route"] == "ok" and first["source"] == "scheduler"
    assert first["job"] == "nightly" and first["schedule_time"] == "2026-10-16T12:00:00Z"
    assert first["namespace"] == "ops-project/europe-west1" and first["attempt"] == 1
    assert first["http_status"] == 200 and first["caller"] == "anonymous"
    assert first["target"] == {"type": "http", "resource": f"{downstream.url}/ok"}
    assert isinstance(first["latency_ms"], float)
    http_request = first["httpRequest"]
    assert http_request["requestMethod"] == "POST" and http_request["status"] == 200
    assert http_request["requestUrl"] == "/v1/routes/ok:run" and http_request["latency"].endswith("s")

    assert outcomes[1]["logging.googleapis.com/spanId"] == f"{12345:016x}"  # X-Cloud-Trace-Context: decimal
    assert outcomes[2]["severity"] == "WARNING" and "HTTP 500" in outcomes[2]["error"]
    assert outcomes[3]["http_status"] == 400 and outcomes[3]["run_id"] is None

    text = server.output()
    assert SECRET_BODY not in text and SECRET_TOKEN not in text and "Authorization" not in text
    assert not any("/healthz" in e.get("message", "") for e in entries)  # probes are not logged


async def test_text_logs_locally(downstream: Downstream, tmp_path: Path) -> None:
    server = start_server(env(downstream, tmp_path, RUNONCE_LOG_FORMAT="text"), tmp_path)
    try:
        async with httpx.AsyncClient(base_url=server.url) as client:
            await client.post("/v1/routes/ok:run", headers=job("nightly"))
    finally:
        server.stop()
    lines = server.output().splitlines()
    [outcome] = [line for line in lines if "outcome=processed" in line]
    assert "runonce.access" in outcome and "route=ok" in outcome and "job=nightly" in outcome
    assert "target.type=http" in outcome and "{" not in outcome  # dotted fields, not a Python dict
    assert not any(line.startswith("{") for line in lines)


async def test_metrics_are_scraped_and_parsed(downstream: Downstream, tmp_path: Path) -> None:
    downstream.set("/fail", 500)
    server = start_server(env(downstream, tmp_path), tmp_path)
    try:
        async with httpx.AsyncClient(base_url=server.url) as client:
            for _ in range(3):
                await client.post("/v1/routes/ok:run", headers=job("nightly"))
            await client.post("/v1/routes/fail:run", headers=job("flaky"))
            scraped = await client.get("/metrics")
    finally:
        server.stop()
    assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(scraped.text)
        for sample in family.samples
    }
    assert samples[("runonce_deliveries_total", (("outcome", "processed"), ("route", "ok")))] == 1
    assert samples[("runonce_deliveries_total", (("outcome", "duplicate"), ("route", "ok")))] == 2
    assert samples[("runonce_deliveries_total", (("outcome", "failed"), ("route", "fail")))] == 1
    assert samples[("runonce_dispatch_seconds_count", (("target_type", "http"),))] == 2
    assert samples[("runonce_store_seconds_count", (("operation", "claim"),))] == 4
    assert samples[("runonce_store_seconds_count", (("operation", "finish"),))] == 2
    assert samples[("runonce_dispatches_in_flight", ())] == 0


def test_certs_fetches_are_counted_when_oidc_is_on() -> None:
    from runonce.api.main import create_app
    from runonce.settings import Settings

    app = create_app(
        Settings(
            routes='{"routes": {"r": {"target": {"type": "log"}}}}',
            auth="oidc",
            audience=["https://runonce.example"],
            allowed_callers=["a@p.iam.gserviceaccount.com"],
        )
    )
    text = __import__("prometheus_client").generate_latest(app.state.metrics.registry).decode()
    assert "runonce_certs_fetches_total 0.0" in text


# -- SIGTERM ------------------------------------------------------------------------------------


async def _exited_cleanly(server: ServerProcess) -> None:
    """uvicorn finishes its shutdown, then re-raises the SIGTERM it caught (exit status -15)."""
    assert await asyncio.to_thread(server.proc.wait, 15) in (0, -signal.SIGTERM)
    assert any("Finished server process" in e["message"] for e in json_lines(server))


async def _post_later(url: str, route: str, name: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        return await client.post(f"/v1/routes/{route}:run", headers=job(name))


async def _wait_until(check, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.02)


async def test_sigterm_lets_a_dispatch_in_flight_finish(downstream: Downstream, tmp_path: Path) -> None:
    downstream.set("/slow", 200, delay=1.0)
    server = start_server(env(downstream, tmp_path, RUNONCE_SHUTDOWN_GRACE_SECONDS="5"), tmp_path)
    delivery = asyncio.create_task(_post_later(server.url, "slow", "in-flight"))
    await _wait_until(lambda: downstream.calls["/slow"] == 1)  # the dispatch is under way
    server.proc.send_signal(signal.SIGTERM)

    response = await delivery
    assert response.status_code == 200 and response.json()["status"] == "processed"
    await _exited_cleanly(server)
    assert any("shutting down" in e["message"] for e in json_lines(server))


async def test_sigterm_cuts_a_long_dispatch_at_the_grace_and_keeps_the_claim(
    downstream: Downstream, tmp_path: Path
) -> None:
    downstream.set("/slow", 200, delay=8)
    server = start_server(
        env(downstream, tmp_path, RUNONCE_SHUTDOWN_GRACE_SECONDS="0.5", RUNONCE_DISPATCH_TIMEOUT_SECONDS="6"), tmp_path
    )
    delivery = asyncio.create_task(_post_later(server.url, "slow", "too-long"))
    await _wait_until(lambda: downstream.calls["/slow"] == 1)
    server.proc.send_signal(signal.SIGTERM)

    response = await delivery
    assert response.status_code == 504 and response.json()["status"] == "unknown"
    assert "shutdown grace" in response.json()["error"]["message"]
    await _exited_cleanly(server)
    row = (
        sqlite3.connect(tmp_path / "runs.db")
        .execute("SELECT status FROM runs WHERE run_id = ?", (response.json()["run_id"],))
        .fetchone()
    )
    assert row == ("in_progress",)  # kept: the next attempt reconciles after the lease


async def test_sigterm_releases_a_claim_not_yet_dispatched(downstream: Downstream, tmp_path: Path) -> None:
    server = start_server(env(downstream, tmp_path, RUNONCE_STORE_TIMEOUT_SECONDS="10"), tmp_path)
    async with httpx.AsyncClient(base_url=server.url) as client:
        assert (await client.get("/readyz")).status_code == 200
    blocker = sqlite3.connect(tmp_path / "runs.db", isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # the claim waits for the store...
    delivery = asyncio.create_task(_post_later(server.url, "ok", "not-yet"))
    await asyncio.sleep(0.5)
    server.proc.send_signal(signal.SIGTERM)  # ...while shutdown begins
    await asyncio.sleep(0.3)
    blocker.execute("ROLLBACK")
    blocker.close()

    response = await delivery
    assert response.status_code == 503 and response.json()["status"] == "unavailable"
    assert "released" in response.json()["error"]["message"]
    assert downstream.calls["/ok"] == 0
    await _exited_cleanly(server)
    row = (
        sqlite3.connect(tmp_path / "runs.db")
        .execute("SELECT status, last_error FROM runs WHERE run_id = ?", (response.json()["run_id"],))
        .fetchone()
    )
    assert row == ("failed", "runonce shut down before dispatching")  # claimable at once by the retry


SENTINEL = "zqx{}qxz"
"""A sentinel per position; `zqx7qxz` in the logs says which value leaked."""


def sentinel_requests(url: str, tokens: dict[str, str]) -> list[httpx.Response]:
    """One request per place a caller can put a value, each carrying its own sentinel, most of them
    refused (so the value reaches an error message) and some accepted (so it reaches the outcome line)."""
    s = [SENTINEL.format(i) for i in range(40)]
    valid = job("nightly")
    cases: list[tuple[str, dict, dict | None, bytes | None]] = [  # (path+query, headers, json, raw body)
        (f"/v1/routes/{s[0]}:run", valid, None, None),  # unknown route
        (f"/v1/routes/ok:run?project={s[1]}_", valid, None, None),  # invalid query values
        (f"/v1/routes/ok:run?location={s[2]}_", valid, None, None),
        (f"/v1/routes/ok:run?{s[3]}=x", valid, None, None),  # unknown query parameter
        (f"/v1/routes/ok:run?project=ops-project&token={s[4]}", valid, None, None),
        ("/v1/routes/ok:run", {**valid, "X-CloudScheduler-JobName": f"{s[5]} bad"}, None, None),
        ("/v1/routes/ok:run", {**valid, "X-CloudScheduler-ScheduleTime": s[6]}, None, None),
        ("/v1/routes/ok:run", {"X-CloudTasks-QueueName": "q", "X-CloudTasks-TaskName": f"{s[7]}!"}, None, None),
        ("/v1/routes/ok:run", {"X-CloudTasks-QueueName": f"{s[8]}.", "X-CloudTasks-TaskName": "t"}, None, None),
        (
            "/v1/routes/ok:run",
            {"X-CloudTasks-QueueName": "q", "X-CloudTasks-TaskName": "t1", "X-CloudTasks-TaskRetryCount": s[9]},
            None,
            None,
        ),
        (
            "/v1/routes/ok:run",
            {
                **job("body-1"),
                "User-Agent": s[10],
                "X-Custom": s[11],
                "Content-Type": s[12],
                "traceparent": s[13],
                "X-Cloud-Trace-Context": s[14],
                "Cookie": s[15],
            },
            {"k": s[16]},
            None,
        ),
        ("/v1/routes/ok:run", job("body-2"), None, f'{{"k": "{s[17]}"'.encode()),  # not JSON
        ("/v1/routes/ok:run", job("body-3"), None, f'{{"{s[18]}": 1, "{s[18]}": 2}}'.encode()),  # duplicate key
        ("/v1/routes/ok:run", job("body-4"), None, f'{{"k": "{s[19]}", "n": 1e400}}'.encode()),
        ("/v1/routes/ok:run", job("body-5"), None, f'["{s[20]}"]'.encode()),
        ("/v1/routes/ok:run", job("body-1"), {"k": s[21]}, None),  # same run, other body: 422
        (f"/v1/runs/{s[22]}", {}, None, None),
        (f"/{s[23]}", {}, None, None),  # no such path
        ("/v1/routes/ok:run", {**valid, "X-CloudScheduler-ScheduleTime": f"2026-10-16T12:00:00Z{s[24]}"}, None, None),
    ]
    responses = []
    with httpx.Client(base_url=url) as client:
        for target, headers, body, raw in cases:
            method = "GET" if target.startswith(("/v1/runs", f"/{s[23]}")) else "POST"
            try:
                responses.append(client.request(method, target, headers=headers, json=body, content=raw))
            except httpx.LocalProtocolError:  # httpx refused to send it: nothing reached the server
                continue
        for name, token in tokens.items():
            responses.append(
                client.post("/v1/routes/ok:run", headers={**job(f"auth-{name}"), "Authorization": f"Bearer {token}"})
            )
    return responses


def test_no_value_a_caller_sends_reaches_the_logs_unless_validated(downstream: Downstream, tmp_path: Path) -> None:
    """Only validated values (route, job, schedule time, namespace, run_id, a verified caller) are
    logged; query values, other headers, bodies, tokens and refused values never are, in JSON or text."""
    from tests.support import oidc

    key = oidc.make_key()
    audience = "https://runonce.example"
    caller = "scheduler@ops-project.iam.gserviceaccount.com"
    s = [SENTINEL.format(i) for i in range(40, 60)]
    tokens = {
        "kid": oidc.sign(key, oidc.claims(audience=audience, email=caller), kid=s[0]),
        "alg": oidc.unsigned(oidc.claims(audience=audience, email=caller), s[1]),
        "audience": oidc.sign(key, oidc.claims(audience=f"https://{s[2]}.example", email=caller)),
        "issuer": oidc.sign(key, oidc.claims(audience=audience, email=caller, issuer=f"https://{s[3]}.example")),
        "unverified": oidc.sign(key, oidc.claims(audience=audience, email=f"{s[4]}@x.example", email_verified=False)),
        "garbage": s[5],
    }
    with oidc.CertsServer([key]) as certs:
        for log_format, auth in (("json", "none"), ("text", "none"), ("json", "oidc")):
            extra = {"RUNONCE_LOG_FORMAT": log_format, "RUNONCE_AUTH": auth}
            if auth == "oidc":
                extra.update(
                    RUNONCE_AUDIENCE=f"{audience},https://configured-only.example",
                    RUNONCE_ALLOWED_CALLERS=caller,
                    RUNONCE_ADMIN_CALLERS=caller,
                    RUNONCE_OIDC_CERTS_URL=certs.url,
                )
            (tmp_path / f"{log_format}-{auth}").mkdir()
            server = start_server(env(downstream, tmp_path / f"{log_format}-{auth}", **extra), tmp_path)
            try:
                responses = sentinel_requests(server.url, tokens if auth == "oidc" else {})
            finally:
                server.stop()
            assert len(responses) > 15 and all(r.headers["content-type"] == "application/json" for r in responses)
            assert not any("configured-only" in r.text for r in responses)  # a 401 does not list the audiences
            leaked = sorted(set(re.findall(r"zqx\d+qxz", server.output())))
            lines = [line for line in server.output().splitlines() if "zqx" in line]
            assert leaked == [], f"{log_format}/{auth}: {leaked} reached the logs:\n" + "\n".join(lines)
