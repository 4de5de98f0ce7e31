"""Google-style ID tokens offline: RSA keys with self-signed certificates, a loopback certs endpoint
that counts its fetches, and token makers (real RS256 signatures via google-auth, plus forgeries).

The endpoint answers like https://www.googleapis.com/oauth2/v1/certs: a JSON object
`{kid: PEM certificate}` with `Cache-Control: public, max-age=N, must-revalidate, no-transform`.
Tokens carry the claims Cloud Scheduler's carry: iss, aud, azp, sub, email, email_verified, iat, exp.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from google.auth import crypt, jwt

GOOGLE_ISSUER = "https://accounts.google.com"


@dataclass(frozen=True)
class SigningKey:
    kid: str
    private_pem: str
    cert_pem: str
    public_pem: str

    @cached_property
    def signer(self) -> crypt.RSASigner:
        """Loaded once: loading an RSA private key costs tens of milliseconds, signing with it one."""
        return crypt.RSASigner.from_string(self.private_pem, key_id=self.kid)


def make_key(kid: str | None = None) -> SigningKey:
    """A 2048-bit RSA key and a self-signed certificate for it (Google's certs are the same shape)."""
    kid = kid or secrets.token_hex(20)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "securetoken.system.gserviceaccount.com")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=14))
        .sign(key, hashes.SHA256())
    )
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public_pem = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return SigningKey(kid, private_pem, cert.public_bytes(serialization.Encoding.PEM).decode(), public_pem)


def claims(
    *,
    audience: str,
    email: str,
    issuer: str = GOOGLE_ISSUER,
    email_verified: Any = True,
    issued_at: float | None = None,
    lifetime: float = 3600,
    **extra: Any,
) -> dict[str, Any]:
    """The payload of a service account's ID token, as Cloud Scheduler sends it."""
    iat = int(issued_at if issued_at is not None else time.time())
    payload = {
        "aud": audience,
        "azp": "1" + "0" * 20,
        "email": email,
        "email_verified": email_verified,
        "exp": int(iat + lifetime),
        "iat": iat,
        "iss": issuer,
        "sub": "1" + "0" * 20,
    }
    payload.update(extra)
    return {k: v for k, v in payload.items() if v is not None}


def sign(key: SigningKey, payload: dict[str, Any], *, kid: str | None = None) -> str:
    """An RS256 token signed by `key` with google-auth, its header naming `kid` (default: the key's)."""
    return jwt.encode(key.signer, payload, key_id=kid or key.kid).decode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _segment(obj: dict[str, Any]) -> str:
    return _b64(json.dumps(obj).encode())


def unsigned(payload: dict[str, Any], kid: str, alg: str = "none") -> str:
    """`alg: none` (or any other `alg`), empty signature."""
    return f"{_segment({'alg': alg, 'typ': 'JWT', 'kid': kid})}.{_segment(payload)}."


def hs256(payload: dict[str, Any], secret: str, kid: str) -> str:
    """HS256 with `secret` as the HMAC key (the classic confusion attack uses the public key)."""
    signing_input = f"{_segment({'alg': 'HS256', 'typ': 'JWT', 'kid': kid})}.{_segment(payload)}"
    mac = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(mac)}"


def tampered(token: str, **changes: Any) -> str:
    """`token` with its payload changed and its original signature kept."""
    header, payload, signature = token.split(".")
    data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    data.update(changes)
    return f"{header}.{_segment(data)}.{signature}"


def signature_removed(token: str) -> str:
    """What Cloud Run's invoker check forwards after verifying a token."""
    header, payload, _ = token.split(".")
    return f"{header}.{payload}.SIGNATURE_REMOVED_BY_GOOGLE"


@dataclass
class CertsServer:
    """A loopback stand-in for Google's certs endpoint. `fetches` counts GET requests; set `status`
    to make it fail, `raw_body` to make it answer something else than certificates, `max_age`/`age`
    to shape its caching headers."""

    keys: list[SigningKey]
    max_age: int | None = 21600
    age: int | None = None
    status: int = 200
    raw_body: bytes | None = None
    fetches: int = 0
    user_agent: str | None = None  # of the last fetch
    _server: ThreadingHTTPServer | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the certs server first"
        return f"http://127.0.0.1:{self._server.server_address[1]}/oauth2/v1/certs"

    def body(self) -> bytes:
        return json.dumps({key.kid: key.cert_pem for key in self.keys}).encode()

    def start(self) -> CertsServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with owner._lock:
                    owner.fetches += 1
                    owner.user_agent = self.headers.get("User-Agent")
                if self.path != "/oauth2/v1/certs" or owner.status != 200:
                    self.send_response(404 if owner.status == 200 else owner.status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = owner.raw_body if owner.raw_body is not None else owner.body()
                self.send_response(200)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                if owner.max_age is not None:
                    self.send_header("Cache-Control", f"public, max-age={owner.max_age}, must-revalidate, no-transform")
                if owner.age is not None:
                    self.send_header("Age", str(owner.age))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> CertsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
