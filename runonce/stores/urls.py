"""Store URLs parsed into their parts: what `check_store_url` validates and the drivers connect with.

The reading itself is `runonce_store_url`, the one module the server and `runonce-guard` both ship
(guard/runonce_store_url/), so a URL one accepts the other accepts, with the same words when it is
refused. This module gives it the server's defaults (the Spanner table `runonce_runs`).

Its own module, below the registry in `__init__.py`: a driver's module imports its URL type from
here, so no store module imports the registry that opens it.
"""

from __future__ import annotations

from runonce_store_url import RedisURL, SpannerURL, parse_redis_url
from runonce_store_url import parse_spanner_url as _parse_spanner_url

DEFAULT_SPANNER_TABLE = "runonce_runs"

__all__ = ["DEFAULT_SPANNER_TABLE", "RedisURL", "SpannerURL", "parse_redis_url", "parse_spanner_url"]


def parse_spanner_url(url: str) -> SpannerURL:
    """`spanner://projects/P/instances/I/databases/D[?table=T]`, the table `runonce_runs` by default."""
    return _parse_spanner_url(url, DEFAULT_SPANNER_TABLE)
