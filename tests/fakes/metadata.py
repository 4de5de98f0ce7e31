"""A fake GCE/Cloud Run metadata server: what google-auth's ADC asks for on Cloud Run.

Point google-auth at it with `GCE_METADATA_HOST` and `GCE_METADATA_IP` (both `127.0.0.1:PORT`).
It serves access tokens for the default service account and Google-signed-style ID tokens (RS256,
signed with a key made here; `certs_url` serves its certificate for verification), requires the
`Metadata-Flavor: Google` header like the real one, and remembers every token it issued so the fake
APIs can reject requests without one.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter

import httpx

from runonce.targets.google import GoogleAuth
from tests.support.oidc import make_key

from .http_server import LoopbackServer, Reply, Request

PROJECT_ID = "runonce-test"
SERVICE_ACCOUNT = f"runonce@{PROJECT_ID}.iam.gserviceaccount.com"
KEY_ID = "fake-metadata-key-1"


class FakeMetadataServer:
    def __init__(self) -> None:
        key = make_key(KEY_ID)
        self.cert_pem = key.cert_pem.encode()
        self._signer = key.signer
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self.access_tokens: set[str] = set()
        self.scopes_requested: list[str] = []
        self.calls: Counter[str] = Counter()
        self.id_token_lifetime = 3600
        self._server = LoopbackServer(self._handle)
        self.host = f"127.0.0.1:{self._server.port}"
        self.certs_url = f"{self._server.url}/oauth2/v1/certs"

    def env(self) -> dict[str, str]:
        """Environment that makes google-auth's ADC use this server (and nothing else)."""
        return {"GCE_METADATA_HOST": self.host, "GCE_METADATA_IP": self.host, "GOOGLE_APPLICATION_CREDENTIALS": ""}

    def valid_access_token(self, authorization: str | None) -> bool:
        token = (authorization or "").removeprefix("Bearer ")
        with self._lock:
            return token in self.access_tokens

    def close(self) -> None:
        self._server.close()

    def _handle(self, request: Request) -> Reply:
        if request.path == "/oauth2/v1/certs":
            return Reply(200, {KEY_ID: self.cert_pem.decode()})
        if request.headers.get("Metadata-Flavor") != "Google":
            return Reply(403, b"Missing Metadata-Flavor: Google header", {"Content-Type": "text/plain"})
        headers = {"Metadata-Flavor": "Google"}
        path = request.path
        with self._lock:
            self.calls[path] += 1
        if path in ("/", ""):
            return Reply(200, b"computeMetadata/", {**headers, "Content-Type": "text/plain"})
        if path == "/computeMetadata/v1/project/project-id":
            return Reply(200, PROJECT_ID.encode(), {**headers, "Content-Type": "text/plain"})
        if path == "/computeMetadata/v1/universe/universe-domain":
            return Reply(200, b"googleapis.com", {**headers, "Content-Type": "text/plain"})
        if path == "/computeMetadata/v1/instance/service-accounts/default/":
            info = {
                "aliases": ["default"],
                "email": SERVICE_ACCOUNT,
                "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
            }
            return Reply(200, info, headers)
        if path == "/computeMetadata/v1/instance/service-accounts/default/token":
            token = f"ya29.fake-{next(self._counter)}"
            with self._lock:
                self.access_tokens.add(token)
                self.scopes_requested += request.query.get("scopes", [])
            return Reply(200, {"access_token": token, "expires_in": 3599, "token_type": "Bearer"}, headers)
        if path == "/computeMetadata/v1/instance/service-accounts/default/identity":
            audience = request.query.get("audience", [""])[0]
            if not audience:
                return Reply(400, b"non-empty audience parameter required", {**headers, "Content-Type": "text/plain"})
            return Reply(200, self.id_token(audience), {**headers, "Content-Type": "text/plain"})
        return Reply(404, b"not found", {**headers, "Content-Type": "text/plain"})

    def id_token(self, audience: str) -> bytes:
        from google.auth import jwt

        now = int(time.time())
        claims = {
            "iss": "https://accounts.google.com",
            "aud": audience,
            "azp": "1234567890",
            "sub": "1234567890",
            "email": SERVICE_ACCOUNT,
            "email_verified": True,
            "iat": now,
            "exp": now + self.id_token_lifetime,
        }
        return jwt.encode(self._signer, claims)

    def verify_id_token(self, authorization: str | None, audience: str) -> dict:
        """The claims of a bearer ID token issued here for `audience`; raises ValueError otherwise."""
        import google.auth.transport.requests
        import google.oauth2.id_token

        token = (authorization or "").removeprefix("Bearer ")
        if not token:
            raise ValueError("no bearer token")
        return google.oauth2.id_token.verify_token(
            token, google.auth.transport.requests.Request(), audience=audience, certs_url=self.certs_url
        )


class MetadataTokenAuth(GoogleAuth):
    """Access tokens straight from the fake metadata server (google-auth reads GCE_METADATA_HOST
    at import, long before this test process could point it at the fake)."""

    def __init__(self, metadata_host: str):
        super().__init__()
        self._host = metadata_host

    async def access_token(self) -> str:
        async with httpx.AsyncClient() as client:
            response = await client.get(
                f"http://{self._host}/computeMetadata/v1/instance/service-accounts/default/token",
                headers={"Metadata-Flavor": "Google"},
            )
        return response.json()["access_token"]
