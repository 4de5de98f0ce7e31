"""Step stores. `build_store(settings)` picks one from `RUNONCE_STORE` (firestore, spanner://…,
redis://…); a backend imports its SDK in its own module only, so an unused backend's client need not
be installed (`pip install 'runonce-guard[spanner]'` or `[redis]` adds one)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Claim, StepStore

if TYPE_CHECKING:
    from ..settings import GuardSettings

__all__ = ["Claim", "StepStore", "build_store"]

EXTRAS = {"spanner": ("google.cloud.spanner", "spanner"), "redis": ("redis", "redis"), "rediss": ("redis", "redis")}


def _require(scheme: str) -> None:
    """The store's client library, or one line saying which extra installs it."""
    import importlib.util

    module, extra = EXTRAS[scheme]
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        from ..errors import GuardConfigError

        raise GuardConfigError(
            f"RUNONCE_STORE: a {scheme}:// store needs its client library: pip install 'runonce-guard[{extra}]'"
        )


def build_store(settings: GuardSettings) -> StepStore:
    store, timeout = settings.store, settings.store_timeout_seconds
    if store == "firestore":
        from .firestore import FirestoreStepStore

        return FirestoreStepStore(
            project=settings.firestore_project,
            database=settings.firestore_database,
            collection=settings.firestore_steps_collection,
            timeout_seconds=timeout,
        )
    scheme = store.split("://")[0]
    _require(scheme)
    if scheme == "spanner":
        from .spanner import SpannerStepStore
        from .urls import parse_spanner_url

        return SpannerStepStore(parse_spanner_url(store), timeout_seconds=timeout)
    if scheme in ("redis", "rediss"):
        from .redis import RedisStepStore
        from .urls import parse_redis_url

        return RedisStepStore(parse_redis_url(store), timeout_seconds=timeout)
    raise AssertionError(f"unvalidated store {scheme}://")  # settings.py validates
