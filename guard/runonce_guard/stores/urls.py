"""`RUNONCE_STORE` URLs for Spanner and Redis, read by `runonce_store_url`: the one reading the
server ships too (guard/runonce_store_url/), so both accept the same URLs and refuse the rest with
the same words. The one difference is the default Spanner table: steps live apart from delivery
records (`runonce_steps`, not `runonce_runs`).
"""

from __future__ import annotations

from runonce_store_url import RedisURL, SpannerURL, StoreURLError
from runonce_store_url import parse_redis_url as _parse_redis_url
from runonce_store_url import parse_spanner_url as _parse_spanner_url

from ..errors import GuardConfigError

DEFAULT_SPANNER_TABLE = "runonce_steps"

__all__ = ["DEFAULT_SPANNER_TABLE", "RedisURL", "SpannerURL", "parse_redis_url", "parse_spanner_url"]


def parse_spanner_url(url: str) -> SpannerURL:
    try:
        return _parse_spanner_url(url, DEFAULT_SPANNER_TABLE)
    except StoreURLError as exc:
        raise GuardConfigError(str(exc)) from None


def parse_redis_url(url: str) -> RedisURL:
    try:
        return _parse_redis_url(url)
    except StoreURLError as exc:
        raise GuardConfigError(str(exc)) from None
