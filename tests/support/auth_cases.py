"""The authentication cases both auth suites play (tests/test_auth_e2e.py against a real server,
tests/test_auth_inprocess.py against the ASGI app): the routes, the callers, and each accepted or
rejected request, made from Google's key `g` and a rogue key `r` claiming its kid."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.support import oidc

AUDIENCE = "https://runonce-abc123-uc.a.run.app"
CUSTOM_AUDIENCE = "https://runonce.example.com"
SCHEDULER = "scheduler-invoker@proj.iam.gserviceaccount.com"
BILLING = "billing-invoker@proj.iam.gserviceaccount.com"
ADMIN = "runonce-admin@proj.iam.gserviceaccount.com"
STRANGER = "someone-else@proj.iam.gserviceaccount.com"
SCHEDULE_TIME = "2026-10-16T12:00:00Z"

ROUTES = """
routes:
  nightly:                      # no allowed_callers: RUNONCE_ALLOWED_CALLERS applies
    target: {type: log}
    namespace: {project: demo-project, location: us-central1}
  billing:                      # its own list replaces RUNONCE_ALLOWED_CALLERS
    target: {type: log}
    allowed_callers: [billing-invoker@proj.iam.gserviceaccount.com]
    namespace: {project: demo-project, location: us-central1}
"""


def token(key: oidc.SigningKey, *, email: str = SCHEDULER, audience: str = AUDIENCE, **changes) -> str:
    return oidc.sign(key, oidc.claims(audience=audience, email=email, **changes))


def delivery_headers(job: str) -> dict[str, str]:
    return {"X-CloudScheduler-JobName": job, "X-CloudScheduler-ScheduleTime": SCHEDULE_TIME}


@dataclass(frozen=True)
class Case:
    """One request: its auth headers and query string, made from the keys."""

    auth: Callable[[oidc.SigningKey, oidc.SigningKey], dict[str, str]]
    params: Callable[[oidc.SigningKey], dict[str, str]] = lambda key: {}
    route: str = "nightly"


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


ACCEPTED = {
    "authorization": Case(lambda g, r: bearer(token(g))),
    "x-serverless-authorization": Case(lambda g, r: {"X-Serverless-Authorization": f"Bearer {token(g)}"}),
    "authorization-wins-over-x-serverless": Case(
        lambda g, r: {**bearer(token(g)), "X-Serverless-Authorization": "Bearer garbage"}
    ),
    "second-configured-audience": Case(lambda g, r: bearer(token(g, audience=CUSTOM_AUDIENCE))),
    "expired-within-clock-skew": Case(lambda g, r: bearer(token(g, issued_at=time.time() - 3605))),
    "issuer-without-scheme": Case(lambda g, r: bearer(token(g, issuer="accounts.google.com"))),
    "route-allow-list": Case(lambda g, r: bearer(token(g, email=BILLING)), route="billing"),
    "lower-case-scheme": Case(lambda g, r: {"Authorization": f"bearer {token(g)}"}),
}


# name -> (request, HTTP status, what the error message says)
REJECTED: dict[str, tuple[Case, int, str]] = {
    "expired": (Case(lambda g, r: bearer(token(g, issued_at=time.time() - 7200))), 401, "Token expired"),
    "not-yet-valid": (Case(lambda g, r: bearer(token(g, issued_at=time.time() + 600))), 401, "Token used too early"),
    "wrong-audience": (Case(lambda g, r: bearer(token(g, audience="https://other.example"))), 401, "wrong audience"),
    "wrong-issuer": (Case(lambda g, r: bearer(token(g, issuer="https://evil.example"))), 401, "not Google"),
    "unknown-signing-key": (Case(lambda g, r: bearer(token(r))), 401, "Could not verify token signature"),
    "unknown-kid": (
        Case(lambda g, r: bearer(oidc.sign(g, oidc.claims(audience=AUDIENCE, email=SCHEDULER), kid="no-such-kid"))),
        401,
        "not one of Google's current signing keys",
    ),
    "tampered-payload": (
        Case(lambda g, r: bearer(oidc.tampered(token(g, email=STRANGER), email=SCHEDULER))),
        401,
        "Could not verify token signature",
    ),
    "alg-none": (
        Case(lambda g, r: bearer(oidc.unsigned(oidc.claims(audience=AUDIENCE, email=SCHEDULER), g.kid))),
        401,
        "alg 'none'",
    ),
    "alg-unknown": (  # named, not echoed: the header is the caller's text
        Case(
            lambda g, r: bearer(oidc.unsigned(oidc.claims(audience=AUDIENCE, email=SCHEDULER), g.kid, alg="X<script>"))
        ),
        401,
        "signed with an unknown alg; Google ID tokens are RS256",
    ),
    "hs256-with-public-key": (
        Case(lambda g, r: bearer(oidc.hs256(oidc.claims(audience=AUDIENCE, email=SCHEDULER), g.public_pem, g.kid))),
        401,
        "alg 'HS256'",
    ),
    "hs256-with-certificate": (
        Case(lambda g, r: bearer(oidc.hs256(oidc.claims(audience=AUDIENCE, email=SCHEDULER), g.cert_pem, g.kid))),
        401,
        "alg 'HS256'",
    ),
    "email-not-verified": (Case(lambda g, r: bearer(token(g, email_verified=False))), 401, "not verified"),
    "email-verified-missing": (Case(lambda g, r: bearer(token(g, email_verified=None))), 401, "not verified"),
    "email-verified-string": (Case(lambda g, r: bearer(token(g, email_verified="true"))), 401, "not verified"),
    "no-email": (Case(lambda g, r: bearer(token(g, email=None))), 401, "no email claim"),
    "no-header": (Case(lambda g, r: {}), 401, "no bearer token"),
    "bearer-garbage": (Case(lambda g, r: bearer("garbage")), 401, "not a JWT"),
    "bearer-empty": (Case(lambda g, r: {"Authorization": "Bearer"}), 401, "must be 'Bearer <ID token>'"),
    "basic-scheme": (Case(lambda g, r: {"Authorization": "Basic dXNlcjpwYXNz"}), 401, "must be 'Bearer <ID token>'"),
    "token-in-query-string": (
        Case(lambda g, r: {}, params=lambda g: {"access_token": token(g)}),
        401,
        "no bearer token",
    ),
    "x-serverless-loses-to-bad-authorization": (
        Case(lambda g, r: {**bearer("garbage"), "X-Serverless-Authorization": f"Bearer {token(g)}"}),
        401,
        "not a JWT",
    ),
    "signature-removed-by-cloud-run": (
        Case(lambda g, r: {"X-Serverless-Authorization": f"Bearer {oidc.signature_removed(token(g))}"}),
        401,
        "removed the signature",
    ),
    "scheduler-headers-only": (
        Case(lambda g, r: {"X-CloudScheduler": "true", "User-Agent": "Google-Cloud-Scheduler"}),
        401,
        "no bearer token",
    ),
    "caller-not-allowed": (
        Case(lambda g, r: bearer(token(g, email=STRANGER))),
        403,
        f"caller {STRANGER} is not allowed",
    ),
    "allowed-email-on-the-wrong-route": (
        Case(lambda g, r: bearer(token(g, email=BILLING))),
        403,
        "allows 1 other caller(s)",
    ),
    "global-caller-on-a-route-with-its-own-list": (
        Case(lambda g, r: bearer(token(g)), route="billing"),
        403,
        f"caller {SCHEDULER} is not allowed on route 'billing'",
    ),
}
