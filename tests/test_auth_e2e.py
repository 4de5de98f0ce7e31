"""Authentication end to end: a real `runonce serve` with RUNONCE_AUTH=oidc, its certificates on a
loopback endpoint, tokens signed with google-auth (and forged ones), answers checked as Cloud
Scheduler would see them, and the claim store checked for what got through."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from runonce.run.delivery import parse_delivery
from runonce.stores import open_store
from tests.support import oidc
from tests.support.auth_cases import (
    ACCEPTED,
    ADMIN,
    AUDIENCE,
    CUSTOM_AUDIENCE,
    REJECTED,
    ROUTES,
    SCHEDULER,
    STRANGER,
    bearer,
    delivery_headers,
    token,
)
from tests.support.procs import ServerProcess, start_server

pytestmark = pytest.mark.e2e


def start_oidc_server(tmp: Path, certs_url: str) -> ServerProcess:
    (tmp / "routes.yaml").write_text(ROUTES)
    env = {
        "RUNONCE_AUTH": "oidc",
        "RUNONCE_AUDIENCE": f"{AUDIENCE},{CUSTOM_AUDIENCE}",
        "RUNONCE_ALLOWED_CALLERS": SCHEDULER,
        "RUNONCE_ADMIN_CALLERS": ADMIN,
        "RUNONCE_OIDC_CERTS_URL": certs_url,
        "RUNONCE_ROUTES_FILE": str(tmp / "routes.yaml"),
        "RUNONCE_STORE": f"sqlite:///{tmp / 'runs.db'}",
        "RUNONCE_LOG_FORMAT": "text",
    }
    return start_server(env, tmp)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, certs: oidc.CertsServer) -> Iterator[ServerProcess]:
    server = start_oidc_server(tmp_path_factory.mktemp("auth-e2e"), certs.url)
    yield server
    server.stop()


def run_id(route: str, job: str) -> str:
    delivery = parse_delivery(
        route,
        httpx.Headers(delivery_headers(job)),
        ("demo-project", "us-central1"),
        datetime.now(UTC),
        timedelta(seconds=5),
    )
    return delivery.run_id


def stored(server: ServerProcess, route: str, job: str, key: oidc.SigningKey) -> httpx.Response:
    """The run record, as an admin sees it through the runs API."""
    return httpx.get(
        f"{server.url}/v1/runs/{run_id(route, job)}",
        headers={"Authorization": f"Bearer {token(key, email=ADMIN)}"},
    )


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_a_valid_token_is_processed_and_recorded(
    server: ServerProcess, google_key: oidc.SigningKey, rogue_key: oidc.SigningKey, name: str
) -> None:
    case = ACCEPTED[name]
    job = f"ok-{name}"
    headers = {**delivery_headers(job), **case.auth(google_key, rogue_key)}
    response = httpx.post(f"{server.url}/v1/routes/{case.route}:run", headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "processed"
    record = stored(server, case.route, job, google_key)
    assert record.status_code == 200 and record.json()["status"] == "completed"


@pytest.mark.parametrize("name", list(REJECTED))
def test_a_rejected_request_never_reaches_the_store(
    server: ServerProcess, google_key: oidc.SigningKey, rogue_key: oidc.SigningKey, name: str
) -> None:
    case, status, message = REJECTED[name]
    job = f"rejected-{name}"
    response = httpx.post(
        f"{server.url}/v1/routes/{case.route}:run",
        headers={**delivery_headers(job), **case.auth(google_key, rogue_key)},
        params=case.params(google_key),
    )
    assert response.status_code == status, response.text
    body = response.json()
    assert body["status"] == {401: "unauthenticated", 403: "forbidden"}[status]
    assert message in body["error"]["message"]
    if status == 401:  # RFC 6750: no error code when no credentials were sent
        sent = "no bearer token" not in body["error"]["message"]
        assert response.headers["WWW-Authenticate"] == ('Bearer error="invalid_token"' if sent else "Bearer")
    assert stored(server, case.route, job, google_key).status_code == 404  # no record: the store never saw it


def test_the_runs_api_is_for_admin_callers_only(server: ServerProcess, google_key: oidc.SigningKey) -> None:
    delivered = httpx.post(
        f"{server.url}/v1/routes/nightly:run", headers={**delivery_headers("runs-api"), **bearer(token(google_key))}
    )
    assert delivered.status_code == 200
    url = f"{server.url}/v1/runs/{delivered.json()['run_id']}"
    assert httpx.get(url).status_code == 401
    refused = httpx.get(url, headers=bearer(token(google_key)))
    assert refused.status_code == 403
    assert refused.json()["status"] == "forbidden"
    assert f"caller {SCHEDULER} is not allowed on the runs API" in refused.json()["error"]["message"]
    record = httpx.get(url, headers=bearer(token(google_key, email=ADMIN)))
    assert record.status_code == 200 and record.json()["job"] == "runs-api"


def test_an_unknown_route_answers_401_before_404(server: ServerProcess, google_key: oidc.SigningKey) -> None:
    """Without a token nobody can tell which route names exist."""
    url = f"{server.url}/v1/routes/no-such-route:run"
    assert httpx.post(url, headers=delivery_headers("probe")).status_code == 401
    assert httpx.post(url, headers={**delivery_headers("probe"), **bearer(token(google_key))}).status_code == 404


def test_health_endpoints_need_no_token(server: ServerProcess) -> None:
    assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{server.url}/readyz").status_code == 200


def test_logs_name_caller_and_route_never_the_token(server: ServerProcess, google_key: oidc.SigningKey) -> None:
    unique = {"nonce": secrets.token_hex(8)}  # so that no other test's token can look like these
    good, forged = token(google_key, **unique), token(google_key, email=STRANGER, **unique)
    tampered = oidc.tampered(good, email=ADMIN)
    url = f"{server.url}/v1/routes/nightly:run"
    assert httpx.post(url, headers={**delivery_headers("logged"), **bearer(good)}).status_code == 200
    assert httpx.post(url, headers={**delivery_headers("logged-2"), **bearer(forged)}).status_code == 403
    assert httpx.post(url, headers={**delivery_headers("logged-3"), **bearer(tampered)}).status_code == 401
    output = server.output()
    assert f"caller {SCHEDULER} allowed on route 'nightly'" in output
    assert f"caller {STRANGER} refused on route 'nightly'" in output
    for sent in (good, forged, tampered):
        _header, payload, signature = sent.split(".")  # the header is the same for every token of a key
        assert payload not in output and signature not in output


def test_a_flood_of_forged_kids_costs_one_certs_fetch(tmp_path: Path, google_key: oidc.SigningKey) -> None:
    """1,000 tokens with random kids (as an attacker would send) against a fresh server."""
    with oidc.CertsServer([google_key]) as certs:
        server = start_oidc_server(tmp_path, certs.url)
        try:
            forged = [
                oidc.sign(google_key, oidc.claims(audience=AUDIENCE, email=SCHEDULER), kid=secrets.token_hex(20))
                for _ in range(1000)
            ]
            statuses = asyncio.run(_post_all(f"{server.url}/v1/routes/nightly:run", forged, concurrency=50))
            valid = httpx.post(
                f"{server.url}/v1/routes/nightly:run",
                headers={**delivery_headers("after-flood"), **bearer(token(google_key))},
            )
        finally:
            server.stop()
        print(f"\nforged-token flood: {len(forged)} requests -> {certs.fetches} certs fetch(es)")
        assert statuses == {401: 1000}
        assert valid.status_code == 200
        assert 1 <= certs.fetches <= 2, certs.fetches  # one, or two if the flood straddled a minute

    records = asyncio.run(_all_records(f"sqlite:///{tmp_path / 'runs.db'}"))
    assert [r.job for r in records] == ["after-flood"]


async def _post_all(url: str, tokens: list[str], concurrency: int) -> dict[int, int]:
    statuses: dict[int, int] = {}
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=concurrency), timeout=30) as client:

        async def post(i: int, value: str) -> None:
            async with gate:
                response = await client.post(url, headers={**delivery_headers(f"flood-{i}"), **bearer(value)})
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

        await asyncio.gather(*(post(i, value) for i, value in enumerate(tokens)))
    return statuses


async def _all_records(store_url: str) -> list:
    store = open_store(store_url)
    try:
        return await store.list(datetime.now(UTC), limit=1000)
    finally:
        await store.close()


def test_a_wrong_audience_is_named_without_listing_the_accepted_audiences(
    server: ServerProcess, google_key: oidc.SigningKey
) -> None:
    response = httpx.post(
        f"{server.url}/v1/routes/nightly:run",
        headers={
            **delivery_headers("wrong-audience-echo"),
            **bearer(token(google_key, audience="https://other.example")),
        },
    )
    assert response.status_code == 401 and "wrong audience" in response.json()["error"]["message"]
    assert (
        AUDIENCE not in response.text and CUSTOM_AUDIENCE not in response.text and "other.example" not in response.text
    )
    assert CUSTOM_AUDIENCE not in server.output().split("authentication: Google ID tokens", 1)[-1].split("\n", 1)[-1]
