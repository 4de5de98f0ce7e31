"""Who is calling: the authenticator turns a request into a caller email, or refuses it.

`RUNONCE_AUTH=oidc` (the default) verifies the Google-signed ID token that Cloud Scheduler and
Cloud Tasks send (`Authorization: Bearer <token>`), then checks the email against allow-lists:
a route's `allowed_callers`, else `RUNONCE_ALLOWED_CALLERS`; `RUNONCE_ADMIN_CALLERS` for the runs
API. `RUNONCE_AUTH=none` (local use) lets everyone in as `anonymous`. `RUNONCE_AUTH=cloud_run_iam`
trusts Cloud Run's invoker check for tokens whose signature Cloud Run removed (see
`CloudRunIamAuthenticator`; `cloud_run_iam.py` checks at start-up that the check guards the service).

The `X-CloudScheduler-*` / `X-CloudTasks-*` headers are never looked at here: anyone can send them.

Which header carries the token: `Authorization` when present, else `X-Serverless-Authorization`;
never both, and never the query string. Why `Authorization` wins: Scheduler and Tasks only ever
send `Authorization`; and when a caller sends both to a service behind Cloud Run's invoker check,
Cloud Run verifies `X-Serverless-Authorization`, replaces its signature with
`SIGNATURE_REMOVED_BY_GOOGLE` and passes `Authorization` through untouched, so `Authorization` is
the one runonce can still verify.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping

import httpx
from google.auth import exceptions as google_exceptions
from google.auth import jwt

from runonce import errors
from runonce.auth.certs import CertCache, CertsUnavailable
from runonce.auth.cloud_run_iam import check_invoker_iam
from runonce.settings import EMAIL_PATTERN, ConfigError, Settings
from runonce.tls import client_context

logger = logging.getLogger("runonce.auth")

ANONYMOUS = "anonymous"

GOOGLE_ISSUERS = frozenset({"accounts.google.com", "https://accounts.google.com"})
"""The `iss` values of Google-signed ID tokens (as in google.oauth2.id_token)."""

TOKEN_HEADERS = ("authorization", "x-serverless-authorization")
"""Where the token may be, first match wins (see the module docstring)."""

SIGNATURE_REMOVED = "SIGNATURE_REMOVED_BY_GOOGLE"

_REASONS = {  # google-auth's message -> ours: what is wrong and what to do, quoting neither the token's
    # values nor the configuration (google-auth's "wrong audience" lists every accepted audience)
    "Token expired": "Token expired; send a fresh token (Cloud Scheduler mints one per attempt)",
    "Token used too early": "Token used too early: its iat is ahead of this server's clock by more than "
    "RUNONCE_OIDC_CLOCK_SKEW_SECONDS",
    "wrong audience": "the token has the wrong audience: the job's --oidc-token-audience must be one of "
    "RUNONCE_AUDIENCE",
    "Could not verify token signature": "Could not verify token signature. It was not signed by Google, or "
    "was altered after signing.",
}
_KNOWN_ALGS = {
    "none",
    "HS256",
    "HS384",
    "HS512",
    "RS384",
    "RS512",
    "ES256",
    "ES384",
    "ES512",
    "PS256",
    "PS384",
    "PS512",
    "EdDSA",
}
"""JWS algorithms a refusal may name (anything else in a token's header is the caller's text)."""

_EMAIL = re.compile(EMAIL_PATTERN)

_HOW_TO_SEND = (
    "send a Google-signed ID token as 'Authorization: Bearer <token>' (a Cloud Scheduler job does "
    "this with --oidc-service-account-email and --oidc-token-audience)"
)


class Authenticator:
    """`RUNONCE_AUTH=none`: every caller is `anonymous` and allowed everywhere."""

    enabled = False

    async def authenticate(self, headers: Mapping[str, str]) -> str:
        """The caller's verified email. Raise `errors.Unauthenticated` (401), or
        `errors.Unavailable` (503) when the token cannot be checked right now."""
        return ANONYMOUS

    def authorize(self, caller: str, allowed: list[str], what: str) -> None:
        """Raise `errors.Forbidden` (403) unless `caller` is in `allowed`."""
        return None

    async def aclose(self) -> None:
        return None


class OidcAuthenticator(Authenticator):
    """`RUNONCE_AUTH=oidc`: Google-signed ID tokens, verified with google-auth against certificates
    from `RUNONCE_OIDC_CERTS_URL` (cached, see `certs.CertCache`).

    google-auth checks the RS256 signature, `iat`/`exp` (with `RUNONCE_OIDC_CLOCK_SKEW_SECONDS`) and
    `aud` (`RUNONCE_AUDIENCE`); runonce adds the header checks before it (alg, kid) and the claim
    checks after it (`iss`, `email`, `email_verified`).

    The RS256 verification runs inline on the event loop, not in a thread: with the public exponent
    65537 it is one small modular exponentiation, about 55 µs with `cryptography` (measured for a
    2048-bit key), about what handing it to a thread would cost by itself. The one slow step,
    fetching certificates, is async (httpx) and rare.
    """

    enabled = True

    def __init__(self, settings: Settings, certs: CertCache, http: httpx.AsyncClient | None = None):
        self.audience = list(settings.audience)
        self.clock_skew = settings.oidc_clock_skew_seconds
        self.certs = certs
        self._http = http

    async def authenticate(self, headers: Mapping[str, str]) -> str:
        header_name, token = _bearer_token(headers)
        try:
            header = jwt.decode_header(token)
        except (google_exceptions.GoogleAuthError, ValueError, TypeError):
            raise _rejected(
                f"the token in {header_name} is not a JWT (three base64url segments); {_HOW_TO_SEND}"
            ) from None
        alg, kid = header.get("alg"), header.get("kid")
        if alg != "RS256":
            named = f"alg {alg!r}" if alg in _KNOWN_ALGS else "an unknown alg"
            raise _rejected(f"the token is signed with {named}; Google ID tokens are RS256")
        if not isinstance(kid, str) or not kid:
            raise _rejected("the token header names no key (kid); Google ID tokens always do")
        if token.endswith("." + SIGNATURE_REMOVED):
            raise _rejected(
                f"the token in {header_name} has no signature ({SIGNATURE_REMOVED}): Cloud Run's invoker check "
                "verified it and removed the signature, so runonce cannot verify it; send runonce's token in "
                "Authorization (Cloud Run checks X-Serverless-Authorization when both are sent), or set "
                "RUNONCE_AUTH=cloud_run_iam to trust Cloud Run's invoker check"
            )
        try:
            cert = await self.certs.get(kid)
        except CertsUnavailable as exc:
            logger.error("cannot verify tokens: %s", exc)
            raise errors.Unavailable(f"cannot verify the token right now: {exc}; retry later") from exc
        if cert is None:
            raise _rejected("the token is signed with a key (kid) that is not one of Google's current signing keys")
        try:
            claims = jwt.decode(token, certs={kid: cert}, audience=self.audience, clock_skew_in_seconds=self.clock_skew)
        except (google_exceptions.GoogleAuthError, ValueError, TypeError, KeyError) as exc:
            reason = next((ours for text, ours in _REASONS.items() if text in str(exc)), type(exc).__name__)
            raise _rejected(f"the token does not verify: {reason}") from None
        return _caller_email(claims)

    def authorize(self, caller: str, allowed: list[str], what: str) -> None:
        fields = {"caller": caller, "resource": what}
        if caller.casefold() in {email.casefold() for email in allowed}:
            logger.info("caller %s allowed on %s", caller, what, extra={"fields": fields})
            return
        logger.warning(
            "caller %s refused on %s (%d caller(s) allowed)", caller, what, len(allowed), extra={"fields": fields}
        )
        if not allowed:
            raise errors.Forbidden(f"caller {caller} is not allowed on {what}: it allows no callers at all")
        raise errors.Forbidden(
            f"caller {caller} is not allowed on {what}, which allows {len(allowed)} other caller(s); "
            "call with one of them, or add this service account to the allow-list"
        )

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()


def _caller_email(claims: Mapping[str, object]) -> str:
    """The caller's email from a Google ID token's claims, after the issuer and email checks."""
    issuer = claims.get("iss")
    if not isinstance(issuer, str) or issuer not in GOOGLE_ISSUERS:  # a list or object is no issuer (and unhashable)
        raise _rejected("the token's issuer is not Google (https://accounts.google.com)")
    email = claims.get("email")
    if not isinstance(email, str) or not email:
        raise _rejected(
            "the token carries no email claim; a service account's ID token has one "
            "(Cloud Scheduler: --oidc-service-account-email)"
        )
    if claims.get("email_verified") is not True:
        raise _rejected("the token's email is not verified (email_verified is not true)")
    return email


class CloudRunIamAuthenticator(OidcAuthenticator):
    """`RUNONCE_AUTH=cloud_run_iam`: for when Cloud Run's invoker check removes the signature
    (`SIGNATURE_REMOVED_BY_GOOGLE`) before the token reaches runonce.

    Such a token is trusted as Cloud Run verified it: runonce reads the caller's email from its
    payload and still checks audience, issuer, email and expiry, and every allow-list as usual. A
    token that still carries a signature is verified as with `oidc`. Safe only while the invoker
    check is on and nobody public may invoke: `cloud_run_iam.check_invoker_iam` refuses to start
    otherwise.
    """

    async def authenticate(self, headers: Mapping[str, str]) -> str:
        header_name, token = _bearer_token(headers)
        if not token.endswith("." + SIGNATURE_REMOVED):
            return await super().authenticate(headers)
        try:
            claims = jwt.decode(token, verify=False)
        except (google_exceptions.GoogleAuthError, ValueError, TypeError):
            raise _rejected(
                f"the token in {header_name} is not a JWT (three base64url segments); {_HOW_TO_SEND}"
            ) from None
        audience = claims.get("aud")
        if audience not in self.audience:
            raise _rejected(
                "the token's audience is not this service's (RUNONCE_AUDIENCE); "
                "the job's --oidc-token-audience must be the service URL"
            )
        expiry = claims.get("exp")
        if not isinstance(expiry, (int, float)) or expiry + self.clock_skew < time.time():
            raise _rejected("the token has expired; send a fresh token (Cloud Scheduler mints one per attempt)")
        return _caller_email(claims)


def _bearer_token(headers: Mapping[str, str]) -> tuple[str, str]:
    """(header name, token) from `Authorization`, else `X-Serverless-Authorization`."""
    for name in TOKEN_HEADERS:
        values = headers.getlist(name) if hasattr(headers, "getlist") else [headers[name]] if name in headers else []
        if not values:
            continue
        display = "Authorization" if name == "authorization" else "X-Serverless-Authorization"
        if len(values) > 1:
            raise _rejected(f"{display} is given {len(values)} times; send one token")
        scheme, _, token = values[0].strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise _rejected(f"the {display} header must be 'Bearer <ID token>'")
        return display, token
    missing = _rejected(f"no bearer token: {_HOW_TO_SEND}")
    missing.token_sent = False  # pragma: no mutate - None is as falsy as False for headers()
    raise missing


def _rejected(reason: str) -> errors.Unauthenticated:
    logger.warning("unauthenticated request refused: %s", reason)
    return errors.Unauthenticated(reason)


def check_auth_config(
    settings: Settings, route_callers: Mapping[str, list[str]], environ: Mapping[str, str] = os.environ
) -> None:
    """Refuse configurations that would let anyone in, or no one. Raises `ConfigError`.

    - `RUNONCE_AUTH=none` on Cloud Run (`K_SERVICE` set) unless `RUNONCE_ALLOW_UNAUTHENTICATED=true`;
    - `oidc` without `RUNONCE_AUDIENCE` (no token could be checked against anything);
    - `oidc` with a route that no caller could ever call (neither its `allowed_callers` nor
      `RUNONCE_ALLOWED_CALLERS` names anyone): a mistake that would otherwise only show as 403s.
    """
    if settings.auth == "none":
        if environ.get("K_SERVICE") and not settings.allow_unauthenticated:
            raise ConfigError(
                "RUNONCE_AUTH=none on Cloud Run (K_SERVICE is set) would let anyone trigger every route; "
                "use RUNONCE_AUTH=oidc, or set RUNONCE_ALLOW_UNAUTHENTICATED=true if you really mean it"
            )
        return
    if not settings.audience:
        raise ConfigError(
            f"RUNONCE_AUTH={settings.auth} needs RUNONCE_AUDIENCE: the audience of the callers' ID tokens "
            "(the service URL, e.g. https://runonce-abc123-uc.a.run.app, or the job's --oidc-token-audience)"
        )
    for variable in ("allowed_callers", "admin_callers"):
        for email in getattr(settings, variable):
            if not _EMAIL.fullmatch(email):
                raise ConfigError(f"RUNONCE_{variable.upper()}: {email!r} is not an email address")
    uncallable = sorted(name for name, callers in route_callers.items() if not callers)
    if uncallable and not settings.allowed_callers:
        raise ConfigError(
            f"RUNONCE_AUTH={settings.auth} and no caller is allowed on route(s) {', '.join(map(repr, uncallable))}: "
            "set RUNONCE_ALLOWED_CALLERS (comma-separated service-account emails) or the route's allowed_callers"
        )


def build_authenticator(
    settings: Settings, route_callers: Mapping[str, list[str]], environ: Mapping[str, str] = os.environ
) -> Authenticator:
    """The authenticator the settings ask for, after `check_auth_config`. Raises `ConfigError`."""
    check_auth_config(settings, route_callers, environ)
    if settings.auth == "none":
        if environ.get("K_SERVICE"):
            logger.warning("RUNONCE_AUTH=none on Cloud Run with RUNONCE_ALLOW_UNAUTHENTICATED=true: anyone can call")
        return Authenticator()
    if settings.auth == "cloud_run_iam":
        check_invoker_iam(settings, environ)
    http = httpx.AsyncClient(headers={"User-Agent": "runonce/0.1"}, verify=client_context())
    certs = CertCache(settings.oidc_certs_url, http)
    logger.info(
        "authentication: Google ID tokens for audience %s; %d admin caller(s)",
        ", ".join(settings.audience),
        len(settings.admin_callers),
    )
    if settings.auth == "cloud_run_iam":
        return CloudRunIamAuthenticator(settings, certs, http)
    return OidcAuthenticator(settings, certs, http)
