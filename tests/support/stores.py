"""Stores on the session's real servers, a fresh namespace each: what conftest's `make_store` opens
and what tests that need a store of one kind import."""

from __future__ import annotations

import uuid

from tests.support.backends import Server

FIRESTORE_PROJECT = "runonce-test"

STORE_KINDS = ["memory", "sqlite", "firestore", "spanner", "redis"]
STORE_SERVERS = {"firestore": "firestore_emulator", "spanner": "spanner_database", "redis": "redis_server"}
"""The session fixture (tests/conftest.py) that starts each kind's server."""


def with_server(request) -> str:  # type: ignore[no-untyped-def]
    """A `store_kind` fixture's body: start the server `request.param` needs, return the kind."""
    if request.param in STORE_SERVERS:
        request.getfixturevalue(STORE_SERVERS[request.param])
    return request.param


def firestore_store(collection: str | None = None, timeout_seconds: float = 5.0):
    from runonce.stores.firestore import FirestoreStore

    # A collection per test isolates tests without resetting the emulator.
    return FirestoreStore(
        project=FIRESTORE_PROJECT,
        collection=collection or f"runs_{uuid.uuid4().hex[:12]}",
        timeout_seconds=timeout_seconds,
    )


def spanner_table_url(database_url: str) -> str:
    """A new table in the session's database (created as `store init` does), as a store URL."""
    from runonce.stores import open_store

    url = f"{database_url}?table=runs_{uuid.uuid4().hex[:12]}"
    store = open_store(url)
    store.init(lambda line: None)  # type: ignore[attr-defined]
    return url


def redis_url(server: Server) -> str:
    """The session's redis-server, emptied, as a store URL."""
    import redis

    with redis.Redis(host="127.0.0.1", port=server.port) as client:
        client.flushall()
    return f"redis://127.0.0.1:{server.port}/0"


def guard_spanner_url(database_url: str) -> str:
    """A new steps table for runonce-guard in the session's database (as `runonce-guard store init`
    creates it), as the guard's RUNONCE_STORE."""
    from runonce_guard.stores.spanner import SpannerStepStore
    from runonce_guard.stores.urls import parse_spanner_url

    url = f"{database_url}?table=steps_{uuid.uuid4().hex[:12]}"
    store = SpannerStepStore(parse_spanner_url(url), timeout_seconds=60)
    store.init(lambda line: None)
    store.close()
    return url


def server_store_env(kind: str, request, sqlite_dir=None) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """RUNONCE_STORE (and options) of `runonce serve` processes sharing a fresh namespace on the
    session's server of `kind` (`firestore`, `spanner`, `redis`), or one SQLite file in `sqlite_dir`."""
    if kind == "firestore":
        request.getfixturevalue("firestore_emulator")
        return {
            "RUNONCE_STORE": "firestore",
            "RUNONCE_FIRESTORE_PROJECT": FIRESTORE_PROJECT,
            "RUNONCE_FIRESTORE_COLLECTION": f"runs_{uuid.uuid4().hex[:12]}",
        }
    if kind == "spanner":
        return {"RUNONCE_STORE": spanner_table_url(request.getfixturevalue("spanner_database"))}
    if kind == "redis":
        return {"RUNONCE_STORE": redis_url(request.getfixturevalue("redis_server"))}
    if kind == "sqlite" and sqlite_dir is not None:
        return {"RUNONCE_STORE": f"sqlite:///{sqlite_dir / 'runs.db'}"}
    raise ValueError(f"no shared store of kind {kind!r}")
