"""Event routes authenticate like Scheduler routes: a Pub/Sub push token (audience: the push endpoint
URL by default; email: the push subscription's service account) and an Eventarc token, checked
with real RS256 signatures against a loopback certificates endpoint, and held to the route's callers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from runonce.api.main import create_app
from runonce.settings import Settings
from runonce.stores.memory import MemoryStore
from tests.support import oidc
from tests.support.events import binary, cloudevent, envelope

SERVICE_URL = "https://runonce-abc123-ew.a.run.app"
PUSH_ENDPOINT = f"{SERVICE_URL}/v1/routes/orders:run"
PUSH_SA = "pubsub-push@my-project.iam.gserviceaccount.com"
EVENTARC_SA = "eventarc-trigger@my-project.iam.gserviceaccount.com"
SCHEDULER_SA = "scheduler@my-project.iam.gserviceaccount.com"
ROUTES = f"""
routes:
  orders: {{target: {{type: log}}, source: pubsub, allowed_callers: [{PUSH_SA}]}}
  uploads: {{target: {{type: log}}, source: cloudevents, allowed_callers: [{EVENTARC_SA}]}}
"""


@pytest.fixture
async def client(certs: oidc.CertsServer) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        routes=ROUTES,
        auth="oidc",
        audience=[PUSH_ENDPOINT, SERVICE_URL],  # the push endpoint (Pub/Sub's default), the service URL (Eventarc's)
        allowed_callers=[SCHEDULER_SA],
        oidc_certs_url=certs.url,
        store="sqlite:///unused.db",
    )
    app = create_app(settings, store=MemoryStore())
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runonce") as http,
    ):
        yield http


def bearer(key: oidc.SigningKey, audience: str, email: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {oidc.sign(key, oidc.claims(audience=audience, email=email))}"}


async def test_a_push_token_for_the_endpoint_url_from_the_subscription_account_is_accepted(client, google_key) -> None:
    ok = await client.post(
        "/v1/routes/orders:run", json=envelope("1"), headers=bearer(google_key, PUSH_ENDPOINT, PUSH_SA)
    )
    assert (ok.status_code, ok.json()["status"]) == (200, "processed")
    other_caller = await client.post(
        "/v1/routes/orders:run", json=envelope("2"), headers=bearer(google_key, PUSH_ENDPOINT, SCHEDULER_SA)
    )
    assert other_caller.status_code == 403  # the route's callers replace RUNONCE_ALLOWED_CALLERS
    wrong_audience = await client.post(
        "/v1/routes/orders:run", json=envelope("3"), headers=bearer(google_key, "https://elsewhere", PUSH_SA)
    )
    assert wrong_audience.status_code == 401
    unsigned = await client.post("/v1/routes/orders:run", json=envelope("4"))
    assert unsigned.status_code == 401


async def test_an_eventarc_token_is_held_to_its_route(client, google_key, rogue_key) -> None:
    headers, body = binary(cloudevent("e-1"))
    ok = await client.post(
        "/v1/routes/uploads:run", headers={**headers, **bearer(google_key, SERVICE_URL, EVENTARC_SA)}, content=body
    )
    assert (ok.status_code, ok.json()["status"]) == (200, "processed")
    forged = await client.post(
        "/v1/routes/uploads:run", headers={**headers, **bearer(rogue_key, SERVICE_URL, EVENTARC_SA)}, content=body
    )
    assert forged.status_code == 401
    elsewhere = await client.post(
        "/v1/routes/orders:run", json=envelope("9"), headers=bearer(google_key, SERVICE_URL, EVENTARC_SA)
    )
    assert elsewhere.status_code == 403
