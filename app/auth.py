"""Who is calling: the authenticator turns a request into a caller email, or refuses it.

`RUNONCE_AUTH=none` (local use) lets everyone in. `oidc` verifies Google-signed ID tokens.
The `X-CloudScheduler-*` / `X-CloudTasks-*` headers are never looked at here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from . import errors
from .settings import ConfigError, Settings

logger = logging.getLogger("runonce.auth")

ANONYMOUS = "anonymous"


class Authenticator:
    """`RUNONCE_AUTH=none`: every caller is `anonymous` and allowed everywhere."""

    enabled = False

    async def authenticate(self, headers: Mapping[str, str]) -> str:
        """The caller's verified email. Raise `errors.Unauthenticated`."""
        return ANONYMOUS

    def authorize(self, caller: str, allowed: list[str], what: str) -> None:
        """Raise `errors.Forbidden` unless `caller` is in `allowed`."""
        return None

    async def aclose(self) -> None:
        return None


def build_authenticator(settings: Settings, route_callers: Mapping[str, list[str]]) -> Authenticator:
    if settings.auth == "none":
        return Authenticator()
    raise ConfigError("RUNONCE_AUTH=oidc is not available yet in this build; use RUNONCE_AUTH=none locally")
