"""The process's one TLS client context (it shortens the cold start).

Each httpx client builds its own `ssl.SSLContext` and loads the whole CA bundle into it: about 250 M
instructions, 20-30 ms of CPU, every time. runonce's clients (the OIDC certificates, the Cloud Run
IAM check, the metadata server, the targets' transport) share this one instead, built on first use
with httpx's own defaults (certifi, or SSL_CERT_FILE / SSL_CERT_DIR), so each trusts exactly what
it trusted before.
"""

from __future__ import annotations

import ssl
from functools import cache

import httpx


@cache
def client_context() -> ssl.SSLContext:
    """What `httpx.Client(verify=True)` would build, built once (an SSLContext is safe to share)."""
    return httpx.create_ssl_context()
