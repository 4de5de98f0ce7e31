"""RUNONCE_AUTH=cloud_run_iam: trust Cloud Run's invoker check when it removed the token's signature,
but only after reading, at start-up, that the check is on and nobody public may invoke the service.

The start-up check runs against a fake Cloud Run Admin API v2 (requests held to `run.v2.json`)
and the fake metadata server; the tokens are RS256, signed by a test key and verified for real when
they still carry their signature."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from runonce.api.main import create_app
from runonce.auth.callers import CloudRunIamAuthenticator, build_authenticator
from runonce.settings import ConfigError, Settings
from tests.fakes.http_server import Reply, Request
from tests.fakes.metadata import PROJECT_ID, FakeMetadataServer
from tests.fakes.rest import ApiError, FakeRestApi
from tests.support import oidc

REGION = "europe-west1"
SERVICE = f"projects/{PROJECT_ID}/locations/{REGION}/services/runonce"
AUDIENCE = "https://runonce-123456789012.europe-west1.run.app"
CALLER = "scheduler-invoker@runonce-test.iam.gserviceaccount.com"
OTHER = "someone@runonce-test.iam.gserviceaccount.com"
ROUTES = f"routes: {{demo: {{target: {{type: log}}}}, etl: {{target: {{type: log}}, allowed_callers: [{OTHER}]}}}}"
GET = "run.projects.locations.services.get"
GET_POLICY = "run.projects.locations.services.getIamPolicy"


class CloudRunMetadata(FakeMetadataServer):
    """The metadata server as Cloud Run's: it also names the instance's region."""

    def _handle(self, request: Request) -> Reply:
        if request.path == "/computeMetadata/v1/instance/region" and request.headers.get("Metadata-Flavor") == "Google":
            return Reply(
                200,
                f"projects/123456789012/regions/{REGION}".encode(),
                {"Metadata-Flavor": "Google", "Content-Type": "text/plain"},
            )
        return super()._handle(request)


class FakeCloudRunAdmin(FakeRestApi):
    """Cloud Run Admin API v2: services.get and services.getIamPolicy on one service."""

    discovery_name = "run.v2"
    domain = "run.googleapis.com"

    def __init__(self, metadata: FakeMetadataServer):
        super().__init__(metadata)
        self.invoker_iam_disabled = False
        self.bindings: list[dict[str, Any]] = [{"role": "roles/run.invoker", "members": [f"serviceAccount:{CALLER}"]}]
        self.refuse: int | None = None  # answer this HTTP status instead
        self.seen: list[tuple[str, str]] = []

    def handle(self, method_id: str, params: dict[str, str], request: Request) -> dict[str, Any]:
        name = params.get("name") or params.get("resource")
        self.seen.append((method_id, name))
        if self.refuse == 403:
            raise ApiError("PERMISSION_DENIED", f"Permission denied on resource {name}")
        if name != SERVICE:
            raise ApiError("NOT_FOUND", f"Resource {name} does not exist")
        if method_id == GET:
            return {"name": SERVICE, "uri": AUDIENCE, "invokerIamDisabled": self.invoker_iam_disabled}
        if method_id == GET_POLICY:
            return {"version": 1, "etag": "BwYz", "bindings": self.bindings}
        self.violation(f"{method_id}: not expected from runonce's start-up check")
        raise ApiError("UNIMPLEMENTED", method_id)


@pytest.fixture
def cloud_run() -> Iterator[tuple[FakeCloudRunAdmin, dict[str, str]]]:
    metadata = CloudRunMetadata()
    admin = FakeCloudRunAdmin(metadata)
    try:
        yield admin, {"K_SERVICE": "runonce", "GCE_METADATA_HOST": metadata.host}
        assert admin.violations == []
    finally:
        admin.close()
        metadata.close()


def settings(admin: FakeCloudRunAdmin, **values: object) -> Settings:
    base: dict[str, object] = {
        "routes": ROUTES,
        "audience": [AUDIENCE],
        "allowed_callers": [CALLER],
        "auth": "cloud_run_iam",
        "run_endpoint": admin.url,
    }
    return Settings.model_validate({**base, **values})


# ---- start-up: the invoker check must guard the service ---------------------------------------


def test_starts_after_reading_its_own_service_and_policy(cloud_run) -> None:
    admin, environ = cloud_run
    auth = build_authenticator(settings(admin), {"demo": []}, environ=environ)
    assert isinstance(auth, CloudRunIamAuthenticator)
    assert admin.seen == [(GET, SERVICE), (GET_POLICY, SERVICE)]


async def test_closing_it_closes_the_client_it_fetches_certificates_with(cloud_run) -> None:
    admin, environ = cloud_run
    auth = build_authenticator(settings(admin), {"demo": []}, environ=environ)
    await auth.aclose()
    assert auth.certs._http.is_closed


async def test_a_stripped_token_expired_within_the_clock_skew_is_accepted(cloud_run) -> None:
    admin, environ = cloud_run
    auth = build_authenticator(settings(admin, oidc_clock_skew_seconds=300), {"demo": []}, environ=environ)
    expired = oidc.claims(audience=AUDIENCE, email=CALLER, issued_at=time.time() - 3600 - 150)  # 150 s ago
    token = oidc.signature_removed(oidc.sign(oidc.make_key(), expired))
    try:
        assert await auth.authenticate(httpx.Headers({"Authorization": f"Bearer {token}"})) == CALLER
    finally:
        await auth.aclose()


def test_refuses_to_start_when_the_invoker_check_is_off(cloud_run) -> None:
    admin, environ = cloud_run
    admin.invoker_iam_disabled = True
    with pytest.raises(ConfigError) as refused:
        build_authenticator(settings(admin), {"demo": []}, environ=environ)
    message = str(refused.value)
    assert "\n" not in message
    assert f"service {SERVICE} has the invoker IAM check off (invokerIamDisabled)" in message
    assert "gcloud run services update runonce --invoker-iam-check" in message


@pytest.mark.parametrize("member", ["allUsers", "allAuthenticatedUsers"])
def test_refuses_to_start_when_the_public_may_invoke(cloud_run, member: str) -> None:
    admin, environ = cloud_run
    admin.bindings.append({"role": "roles/run.invoker", "members": [f"serviceAccount:{CALLER}", member]})
    with pytest.raises(ConfigError) as refused:
        build_authenticator(settings(admin), {"demo": []}, environ=environ)
    assert str(refused.value).startswith(
        f"RUNONCE_AUTH=cloud_run_iam refused: {member} holds roles/run.invoker on service {SERVICE}"
    )


def test_refuses_to_start_without_the_grant_to_read_the_service(cloud_run) -> None:
    admin, environ = cloud_run
    admin.refuse = 403
    with pytest.raises(
        ConfigError, match=r"cannot read service .* \(HTTP 403\); grant the runtime account run.services.get"
    ):
        build_authenticator(settings(admin), {"demo": []}, environ=environ)


def test_refuses_to_start_off_cloud_run(cloud_run) -> None:
    admin, _ = cloud_run
    with pytest.raises(ConfigError, match="runs only on Cloud Run \\(K_SERVICE is not set\\)"):
        build_authenticator(settings(admin), {"demo": []}, environ={})
    assert admin.seen == []


# ---- deliveries: signature removed by Cloud Run, or still there ------------------------------


@dataclass
class Client:
    http: httpx.AsyncClient
    key: oidc.SigningKey

    def token(self, **change: object) -> str:
        payload = {**oidc.claims(audience=AUDIENCE, email=CALLER), **change}
        return oidc.sign(self.key, {k: v for k, v in payload.items() if v is not None})

    async def deliver(self, route: str, token: str) -> httpx.Response:
        return await self.http.post(
            f"/v1/routes/{route}:run",
            headers={
                "Authorization": f"Bearer {token}",
                "X-CloudScheduler-JobName": "nightly",
                "X-CloudScheduler-ScheduleTime": "2026-10-16T12:00:00Z",
            },
        )


@pytest.fixture
async def client(cloud_run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Client]:
    admin, environ = cloud_run
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    key = oidc.make_key()
    with oidc.CertsServer([key]) as certs:
        app = create_app(settings(admin, store=f"sqlite:///{tmp_path / 'runs.db'}", oidc_certs_url=certs.url))
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://runonce") as http,
        ):
            yield Client(http, key)


async def test_a_token_whose_signature_cloud_run_removed_is_accepted_with_the_allow_lists(client: Client) -> None:
    token = client.token()
    stripped = oidc.signature_removed(token)
    first = await client.deliver("demo", stripped)
    assert (first.status_code, first.json()["status"]) == (200, "processed")
    assert (await client.deliver("demo", token)).json()["status"] == "duplicate"  # signed: verified as with oidc
    refused = await client.deliver("etl", stripped)  # etl allows only OTHER
    assert refused.status_code == 403 and CALLER in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"aud": "https://elsewhere.example.com"}, "audience is not this service's"),
        ({"exp": 1_000_000_000}, "has expired"),
        ({"email": None}, "carries no email claim"),
        ({"iss": "https://evil.example.com"}, "not Google"),
    ],
)
async def test_a_stripped_token_is_still_held_to_its_claims(client: Client, change: dict, reason: str) -> None:
    answer = await client.deliver("demo", oidc.signature_removed(client.token(**change)))
    assert answer.status_code == 401 and reason in answer.json()["error"]["message"]


async def test_a_signed_token_is_still_verified(client: Client) -> None:
    forged = oidc.tampered(client.token(email=OTHER), email=CALLER)
    answer = await client.deliver("demo", forged)
    assert answer.status_code == 401 and "does not verify" in answer.json()["error"]["message"]
