"""Start-up refusals (every entry point) and the authenticator's answers that need no server:
the certs endpoint being down, header precedence, allow-list messages."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from starlette.datastructures import Headers

from runonce import errors
from runonce.api.main import create_app
from runonce.auth.callers import Authenticator, OidcAuthenticator, build_authenticator, check_auth_config
from runonce.auth.certs import CertCache
from runonce.settings import ConfigError, Settings
from tests.support import oidc
from tests.support.procs import REPO, free_port

AUDIENCE = "https://runonce-abc123-uc.a.run.app"
CALLER = "scheduler-invoker@proj.iam.gserviceaccount.com"
ROUTES = (
    "routes: {demo: {target: {type: log}}, "
    "etl: {target: {type: log}, allowed_callers: [etl@proj.iam.gserviceaccount.com]}}"
)


def settings(**values: object) -> Settings:
    base: dict[str, object] = {"routes": ROUTES, "audience": [AUDIENCE], "allowed_callers": [CALLER]}
    return Settings.model_validate({**base, **values})


# ---- start-up refusals -------------------------------------------------------------------


def test_oidc_without_an_audience_refuses_to_start() -> None:
    with pytest.raises(ConfigError, match="RUNONCE_AUTH=oidc needs RUNONCE_AUDIENCE"):
        check_auth_config(settings(audience=[]), {"demo": []}, environ={})


def test_oidc_with_no_allowed_caller_anywhere_refuses_to_start() -> None:
    with pytest.raises(ConfigError, match=r"no caller is allowed on route.*'demo'.*set RUNONCE_ALLOWED_CALLERS"):
        check_auth_config(settings(allowed_callers=[]), {"demo": []}, environ={})


def test_oidc_with_a_route_nobody_could_call_refuses_to_start() -> None:
    with pytest.raises(ConfigError, match=r"route\(s\) 'demo'"):
        check_auth_config(
            settings(allowed_callers=[]), {"demo": [], "etl": ["etl@p.iam.gserviceaccount.com"]}, environ={}
        )


def test_routes_with_their_own_callers_need_no_global_list() -> None:
    check_auth_config(settings(allowed_callers=[]), {"etl": ["etl@p.iam.gserviceaccount.com"]}, environ={})


@pytest.mark.parametrize("variable", ["allowed_callers", "admin_callers"])
def test_a_malformed_caller_email_refuses_to_start(variable: str) -> None:
    with pytest.raises(ConfigError, match=f"RUNONCE_{variable.upper()}: 'not-an-email'"):
        check_auth_config(settings(**{variable: [CALLER, "not-an-email"]}), {"demo": []}, environ={})


def test_auth_none_on_cloud_run_refuses_to_start() -> None:
    with pytest.raises(ConfigError, match=r"K_SERVICE is set.*RUNONCE_ALLOW_UNAUTHENTICATED=true"):
        build_authenticator(settings(auth="none"), {"demo": []}, environ={"K_SERVICE": "runonce"})


def test_auth_none_on_cloud_run_starts_when_explicitly_allowed() -> None:
    auth = build_authenticator(
        settings(auth="none", allow_unauthenticated=True), {"demo": []}, environ={"K_SERVICE": "runonce"}
    )
    assert type(auth) is Authenticator and not auth.enabled


def test_auth_none_locally_needs_nothing_else() -> None:
    auth = build_authenticator(settings(auth="none", audience=[], allowed_callers=[]), {"demo": []}, environ={})
    assert not auth.enabled


def test_create_app_enforces_the_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K_SERVICE", "runonce")
    with pytest.raises(ConfigError, match="K_SERVICE"):
        create_app(settings(auth="none"))
    with pytest.raises(ConfigError, match="RUNONCE_AUDIENCE"):
        create_app(settings(audience=[]))


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {"PATH": "/usr/bin:/bin", "HOME": str(REPO)}
    return subprocess.run(args, cwd=REPO, env={**base, **env}, capture_output=True, text=True, timeout=60)


SERVE = ["-m", "runonce.cli", "serve", "--port", "0"]
SERVE_WORKERS = [*SERVE, "--workers", "2"]
UVICORN_FACTORY = ["-m", "uvicorn", "--factory", "runonce.api.main:app_from_environment", "--port", "0"]
NONE_ON_CLOUD_RUN = {"RUNONCE_AUTH": "none", "K_SERVICE": "runonce"}


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "entry_point, env, message",
    [
        (SERVE, NONE_ON_CLOUD_RUN, "K_SERVICE is set"),
        (SERVE_WORKERS, NONE_ON_CLOUD_RUN, "K_SERVICE is set"),
        (UVICORN_FACTORY, NONE_ON_CLOUD_RUN, "K_SERVICE is set"),
        (SERVE_WORKERS, {"RUNONCE_ALLOWED_CALLERS": CALLER}, "RUNONCE_AUTH=oidc needs RUNONCE_AUDIENCE"),
        (UVICORN_FACTORY, {"RUNONCE_AUDIENCE": AUDIENCE}, "no caller is allowed on route(s) 'demo'"),
    ],
    ids=["serve", "serve-workers", "uvicorn-factory", "serve-workers-no-audience", "uvicorn-factory-no-callers"],
)
def test_every_entry_point_refuses_to_start(entry_point: list[str], env: dict[str, str], message: str) -> None:
    result = _run([sys.executable, *entry_point], {"RUNONCE_ROUTES": ROUTES, **env})
    assert result.returncode != 0
    assert message in result.stdout + result.stderr


# ---- the authenticator without a server --------------------------------------------------


@pytest.fixture(scope="module")
def key() -> oidc.SigningKey:
    return oidc.make_key()


@pytest.fixture
def certs(key: oidc.SigningKey) -> Iterator[oidc.CertsServer]:
    with oidc.CertsServer([key]) as server:
        yield server


def authenticator(certs_url: str, http: httpx.AsyncClient) -> OidcAuthenticator:
    return OidcAuthenticator(settings(), CertCache(certs_url, http))


def bearer(token: str, header: str = "Authorization") -> Headers:
    return Headers({header: f"Bearer {token}"})


async def test_a_certs_endpoint_that_cannot_be_reached_answers_503(key: oidc.SigningKey) -> None:
    token = oidc.sign(key, oidc.claims(audience=AUDIENCE, email=CALLER))
    async with httpx.AsyncClient() as http:
        auth = authenticator(f"http://127.0.0.1:{free_port()}/certs", http)
        with pytest.raises(errors.Unavailable, match=r"cannot verify the token right now.*retry later"):
            await auth.authenticate(bearer(token))


async def test_a_valid_token_yields_its_email_from_either_header(key: oidc.SigningKey, certs: oidc.CertsServer) -> None:
    token = oidc.sign(key, oidc.claims(audience=AUDIENCE, email=CALLER))
    async with httpx.AsyncClient() as http:
        auth = authenticator(certs.url, http)
        assert await auth.authenticate(bearer(token)) == CALLER
        assert await auth.authenticate(bearer(token, "X-Serverless-Authorization")) == CALLER
    assert certs.fetches == 1


async def test_two_authorization_headers_are_refused(key: oidc.SigningKey, certs: oidc.CertsServer) -> None:
    token = oidc.sign(key, oidc.claims(audience=AUDIENCE, email=CALLER))
    headers = Headers(raw=[(b"authorization", f"Bearer {token}".encode())] * 2)
    async with httpx.AsyncClient() as http:
        with pytest.raises(errors.Unauthenticated, match="given 2 times"):
            await authenticator(certs.url, http).authenticate(headers)


def test_a_refusal_names_the_caller_and_counts_the_allowed() -> None:
    auth = OidcAuthenticator(settings(), CertCache("http://unused", httpx.AsyncClient()))
    with pytest.raises(errors.Forbidden) as refused:
        auth.authorize("x@p.iam.gserviceaccount.com", ["a@p", "b@p"], "route 'etl'")
    assert str(refused.value) == (
        "caller x@p.iam.gserviceaccount.com is not allowed on route 'etl', which allows 2 other caller(s); "
        "call with one of them, or add this service account to the allow-list"
    )
    assert "a@p" not in str(refused.value)
    with pytest.raises(errors.Forbidden, match="allows no callers at all"):
        auth.authorize("x@p", [], "the runs API")
    auth.authorize("Scheduler-Invoker@proj.iam.gserviceaccount.com", [CALLER], "route 'demo'")  # emails ignore case
