"""Every authentication answer in process: the end-to-end tables of tests/test_auth_e2e.py (accepted
and rejected requests) replayed against the ASGI app, plus the token-header cases only a forger
sends. Real RS256 signatures, real certificates from a loopback endpoint; only the server process
is left out, so a broken rule fails here in milliseconds."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest
from google.auth import crypt, jwt

from runonce import errors
from runonce.api.answers import render
from runonce.api.main import create_app
from runonce.auth.callers import OidcAuthenticator
from runonce.auth.certs import CertCache
from runonce.settings import Settings
from runonce.stores.memory import MemoryStore
from tests.support import oidc
from tests.support.auth_cases import (
    ACCEPTED,
    ADMIN,
    AUDIENCE,
    CUSTOM_AUDIENCE,
    REJECTED,
    ROUTES,
    SCHEDULER,
    Case,
    bearer,
    delivery_headers,
    token,
)


class App:
    def __init__(self, client: httpx.AsyncClient, store: MemoryStore):
        self.client, self.store = client, store

    async def deliver(
        self, case: Case, job: str, google_key: oidc.SigningKey, rogue_key: oidc.SigningKey
    ) -> httpx.Response:
        return await self.client.post(
            f"/v1/routes/{case.route}:run",
            headers={**delivery_headers(job), **case.auth(google_key, rogue_key)},
            params=case.params(google_key),
        )


@pytest.fixture
async def app(certs: oidc.CertsServer) -> AsyncIterator[App]:
    settings = Settings(
        routes=ROUTES,
        auth="oidc",
        audience=[AUDIENCE, CUSTOM_AUDIENCE],
        allowed_callers=[SCHEDULER],
        admin_callers=[ADMIN],
        oidc_certs_url=certs.url,
        store="sqlite:///unused.db",
    )
    store = MemoryStore()
    asgi = create_app(settings, store=store)
    async with (
        asgi.router.lifespan_context(asgi),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://runonce") as client,
    ):
        yield App(client, store)


@pytest.mark.parametrize("name", list(ACCEPTED))
async def test_a_valid_token_is_processed(
    app: App, google_key: oidc.SigningKey, rogue_key: oidc.SigningKey, name: str
) -> None:
    response = await app.deliver(ACCEPTED[name], f"ok-{name}", google_key, rogue_key)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "processed"


def with_kid(key: oidc.SigningKey, kid: object) -> str:
    """A correctly signed token whose header carries `kid` as given (None: no kid at all)."""
    signer = crypt.RSASigner.from_string(key.private_pem)
    return jwt.encode(signer, oidc.claims(audience=AUDIENCE, email=SCHEDULER), key_id=kid).decode()


def x_serverless(value: str) -> dict[str, str]:
    return {"X-Serverless-Authorization": value}


INPROCESS_REJECTED: dict[str, tuple[Case, int, str]] = {
    "no-kid": (Case(lambda g, r: bearer(with_kid(g, None))), 401, "names no key (kid)"),
    "empty-kid": (Case(lambda g, r: bearer(with_kid(g, ""))), 401, "names no key (kid)"),
    "numeric-kid": (Case(lambda g, r: bearer(with_kid(g, 12345))), 401, "names no key (kid)"),
    "bearer-blank-token": (Case(lambda g, r: {"Authorization": "Bearer    "}), 401, "must be 'Bearer <ID token>'"),
    "token-without-scheme": (Case(lambda g, r: {"Authorization": token(g)}), 401, "must be 'Bearer <ID token>'"),
    "x-serverless-wrong-audience": (
        Case(lambda g, r: x_serverless(f"Bearer {token(g, audience='https://other.example')}")),
        401,
        "wrong audience",
    ),
    "x-serverless-basic-scheme": (
        Case(lambda g, r: x_serverless("Basic dXNlcjpwYXNz")),
        401,
        "the X-Serverless-Authorization header must be",
    ),
    "x-serverless-garbage": (
        Case(lambda g, r: x_serverless("Bearer garbage")),
        401,
        "the token in X-Serverless-Authorization is not a JWT",
    ),
    "empty-email": (Case(lambda g, r: bearer(token(g, email=""))), 401, "no email claim"),
    "numeric-email": (Case(lambda g, r: bearer(token(g, email=12345))), 401, "no email claim"),
    # A signed token's claims are the caller's JSON: an issuer that is a list or an object was a 500.
    "issuer-list": (
        Case(lambda g, r: bearer(token(g, issuer=["https://accounts.google.com"]))),
        401,
        "issuer is not Google",
    ),
    "issuer-object": (
        Case(lambda g, r: bearer(token(g, issuer={"iss": "accounts.google.com"}))),
        401,
        "issuer is not Google",
    ),
    "x-serverless-no-email": (
        Case(lambda g, r: x_serverless(f"Bearer {token(g, email=None)}")),
        401,
        "no email claim",
    ),
}


@pytest.mark.parametrize("name", [*REJECTED, *INPROCESS_REJECTED])
async def test_a_rejected_request_gets_its_answer_and_never_reaches_the_store(
    app: App, google_key: oidc.SigningKey, rogue_key: oidc.SigningKey, name: str
) -> None:
    case, status, message = {**REJECTED, **INPROCESS_REJECTED}[name]
    response = await app.deliver(case, f"rejected-{name}", google_key, rogue_key)
    assert response.status_code == status, response.text
    body = response.json()
    assert body["status"] == {401: "unauthenticated", 403: "forbidden"}[status]
    assert body["route"] == case.route and "run_id" not in body
    assert message in body["error"]["message"]
    if status == 401:  # RFC 6750: no error code when no credentials were sent
        sent = "no bearer token" not in body["error"]["message"]
        assert response.headers["WWW-Authenticate"] == ('Bearer error="invalid_token"' if sent else "Bearer")
    else:
        assert "WWW-Authenticate" not in response.headers
    assert await app.store.list(datetime.now(UTC)) == []


async def test_the_wrong_audience_is_refused_even_when_everything_else_is_right(
    app: App, google_key: oidc.SigningKey
) -> None:
    """The audience is the one claim that ties a Google-signed token to this service."""
    for audience in ("https://other.example", AUDIENCE + "/", AUDIENCE.upper()):
        response = await app.client.post(
            "/v1/routes/nightly:run",
            headers={**delivery_headers("aud"), **bearer(token(google_key, audience=audience))},
        )
        assert response.status_code == 401, audience
    ok = await app.client.post(
        "/v1/routes/nightly:run", headers={**delivery_headers("aud"), **bearer(token(google_key))}
    )
    assert ok.status_code == 200


async def test_the_runs_api_needs_an_admin_token(app: App, google_key: oidc.SigningKey) -> None:
    delivered = await app.client.post(
        "/v1/routes/nightly:run", headers={**delivery_headers("admin"), **bearer(token(google_key))}
    )
    run_id = delivered.json()["run_id"]
    as_scheduler = await app.client.get(f"/v1/runs/{run_id}", headers=bearer(token(google_key)))
    as_admin = await app.client.get(f"/v1/runs/{run_id}", headers=bearer(token(google_key, email=ADMIN)))
    anonymous = await app.client.get(f"/v1/runs/{run_id}")
    assert (as_scheduler.status_code, as_admin.status_code, anonymous.status_code) == (403, 200, 401)
    assert as_admin.json()["run_id"] == run_id


async def test_a_plain_mapping_of_headers_is_read_like_starlettes(certs, google_key: oidc.SigningKey) -> None:
    """`authenticate` takes any mapping (the CLI and tests pass dicts); one value per header then."""
    async with httpx.AsyncClient() as http:
        auth = OidcAuthenticator(
            Settings(routes=ROUTES, audience=[AUDIENCE], allowed_callers=[SCHEDULER]), CertCache(certs.url, http)
        )
        assert await auth.authenticate({"authorization": f"Bearer {token(google_key)}"}) == SCHEDULER
        assert await auth.authenticate({"x-serverless-authorization": f"Bearer {token(google_key)}"}) == SCHEDULER
        with pytest.raises(errors.Unauthenticated, match="no bearer token") as missing:
            await auth.authenticate({})
        assert render(missing.value).headers == {"WWW-Authenticate": "Bearer"}
        with pytest.raises(errors.Unauthenticated, match="not a JWT") as bad:
            await auth.authenticate({"authorization": "Bearer x"})
        assert render(bad.value).headers == {"WWW-Authenticate": 'Bearer error="invalid_token"'}


async def test_two_spaces_after_the_scheme_still_carry_the_token(app: App, google_key: oidc.SigningKey) -> None:
    response = await app.client.post(
        "/v1/routes/nightly:run",
        headers={**delivery_headers("spaces"), "Authorization": f"Bearer  {token(google_key)}"},
    )
    assert response.status_code == 200


async def test_certificates_are_fetched_as_runonce_and_the_client_closed_with_the_app(certs, google_key) -> None:
    from runonce.auth.callers import build_authenticator

    auth = build_authenticator(
        Settings(routes=ROUTES, audience=[AUDIENCE], allowed_callers=[SCHEDULER], oidc_certs_url=certs.url), {}
    )
    assert await auth.authenticate({"authorization": f"Bearer {token(google_key)}"}) == SCHEDULER
    assert certs.user_agent == "runonce/0.1"
    await auth.aclose()
    assert auth.certs._http.is_closed
