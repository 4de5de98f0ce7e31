"""Redis / Memorystore claim store (`RUNONCE_STORE=redis://HOST:PORT/DB`, `rediss://…`).

One key per run, `runonce:run:{run_id}`, holding the record as JSON. `claim`, `finish` and
`release` override `RunStore`'s protocol with ONE Lua script each: Redis runs a script atomically,
so read → decide → write cannot interleave with another client's, and a fresh run costs two round
trips (claim, finish), where the protocol over primitives would cost three or more (GET, then a
compare-and-set script, as a script must see the value to compare it). `get` is the protocol's, over `load`.

The rules are written twice, in `base.py` (Python) and in the scripts below (Lua); the conformance
suite in tests/test_stores.py holds the scripts to the same rules as every other store.

Time: record times are RFC 3339 UTC text of fixed width, so the scripts compare them as strings.
TTL: a created key gets `PEXPIRE expire_at - now` (the same instant as `PEXPIREAT expire_at` when the
caller's clock agrees with Redis', and measured on the clock that decides, as every other rule);
later writes keep it (`KEEPTTL`).

Durability: a reply means the primary applied the write. With `?wait_replicas=N` every write is
followed by `WAIT N` on the same connection; when fewer replicas acknowledge in the store timeout
the operation raises `StoreUnavailable` (503, nothing dispatched) rather than dispatching on a claim
a failover could lose. The write itself stays on the primary: its lease holds retries off, and the
delivery after the lease takes over and reconciles.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rexc
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from runonce.stores.base import (
    Claim,
    Decision,
    Fenced,
    Finish,
    NewRun,
    RunRecord,
    RunStatus,
    RunStore,
    StoreUnavailable,
    Version,
    fresh_record,
    new_attempt_id,
    rfc3339,
)
from runonce.stores.urls import RedisURL

logger = logging.getLogger("runonce.stores.redis")

KEY_PREFIX = "runonce:run:"
MAX_CONNECTIONS = 32  # per process; Memorystore allows 65,000 clients
_TIME_FIELDS = ("lease_expires", "expire_at", "created_at", "updated_at")
_FIELDS = [f.name for f in fields(RunRecord)]

# base.decide and base.takeover_record, in Lua. ARGV: now, body_sha256, fresh record JSON,
# its TTL in ms, new attempt_id, lease_expires, task_retry_count, task_execution_count (JSON).
# Returns {decision, record written or found, record replaced (or false)}.
_CLAIM = """
local raw = redis.call('GET', KEYS[1])
local now = ARGV[1]
local found = raw and cjson.decode(raw)
if not found or found.expire_at <= now then
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
  return {'create', ARGV[3], raw}
end
if found.body_sha256 ~= ARGV[2] then return {'mismatch', raw, false} end
if found.status == 'completed' or found.status == 'skipped' then return {'replay', raw, false} end
if found.status == 'in_progress' and found.lease_expires > now then return {'busy', raw, false} end
found.status = 'in_progress'
found.attempt_id = ARGV[5]
found.attempts = found.attempts + 1
found.lease_expires = ARGV[6]
found.updated_at = now
found.task_retry_count = cjson.decode(ARGV[7])
found.task_execution_count = cjson.decode(ARGV[8])
local written = cjson.encode(found)
redis.call('SET', KEYS[1], written, 'KEEPTTL')
return {'takeover', written, raw}
"""

# base.holds and base.finished_record. ARGV: attempt_id, status, target JSON (null keeps the
# stored one), last_error JSON, updated_at. Returns {'ok', written} or {'fenced', found or false}.
_FINISH = """
local raw = redis.call('GET', KEYS[1])
local found = raw and cjson.decode(raw)
if not found or found.attempt_id ~= ARGV[1] or found.status ~= 'in_progress' then
  return {'fenced', raw}
end
found.status = ARGV[2]
local target = cjson.decode(ARGV[3])
if target ~= cjson.null then found.target = target end
found.last_error = cjson.decode(ARGV[4])
found.updated_at = ARGV[5]
local written = cjson.encode(found)
redis.call('SET', KEYS[1], written, 'KEEPTTL')
return {'ok', written}
"""

# base.releasable. ARGV: now. Returns the written record, or false when there is nothing to release.
_RELEASE = """
local raw = redis.call('GET', KEYS[1])
local now = ARGV[1]
local found = raw and cjson.decode(raw)
if not found or found.expire_at <= now or found.status ~= 'in_progress' or found.lease_expires <= now then
  return false
end
found.lease_expires = now
found.updated_at = now
local written = cjson.encode(found)
redis.call('SET', KEYS[1], written, 'KEEPTTL')
return written
"""


def _to_json(record: RunRecord) -> str:
    values = record.as_dict()
    for name in _TIME_FIELDS:
        values[name] = rfc3339(values[name])
    return json.dumps(values, separators=(",", ":"))  # pragma: no mutate - spacing only


def _from_json(raw: bytes | str) -> RunRecord:
    values = json.loads(raw)
    for name in _TIME_FIELDS:
        values[name] = datetime.fromisoformat(values[name])
    # What a script rewrote reads back as written: cjson writes 2 (not 2.0) and {} (not []).
    return RunRecord(**{name: values.get(name) for name in _FIELDS})


class RedisStore(RunStore):
    def __init__(self, url: RedisURL, timeout_seconds: float):
        self.url = url
        self._timeout = timeout_seconds
        # The tests have no TLS redis-server (rediss:// URLs are checked in test_store_new_backends).
        tls: dict[str, Any] = (
            {"connection_class": aioredis.SSLConnection, "ssl_ca_certs": url.ca_file} if url.tls else {}
        )  # pragma: no mutate
        # A bounded pool that waits (up to the store timeout) for a free connection: a storm of
        # deliveries queues for the pool instead of failing with "too many connections".
        pool = aioredis.BlockingConnectionPool(
            host=url.host,
            port=url.port,  # pragma: no mutate - redis-py's default host is the tests' own address
            db=url.db,
            username=url.username,
            password=url.password,
            # Belt and braces: every call is also bounded by the store timeout (`_call`).
            socket_timeout=timeout_seconds,
            socket_connect_timeout=timeout_seconds,  # pragma: no mutate - see above
            max_connections=MAX_CONNECTIONS,
            timeout=timeout_seconds,
            **tls,  # pragma: no mutate - see above
        )
        # No silent resend: a claim resent after a lost reply would find its own write and answer
        # busy. A failed call is a 503, and Scheduler's retry is the resend.
        self._client = aioredis.Redis(
            connection_pool=pool, retry=Retry(NoBackoff(), 0)
        )  # pragma: no mutate - a resend shows only when a reply is lost, which a local server does not do
        self._claim = self._client.register_script(_CLAIM)
        self._finish = self._client.register_script(_FINISH)
        self._release = self._client.register_script(_RELEASE)
        self.round_trips = 0
        self._eviction_checked = False  # pragma: no mutate - None is as false
        """Requests sent (a script plus its WAIT go in one pipeline: one round trip)."""

    def _key(self, run_id: str) -> str:
        return KEY_PREFIX + run_id

    async def _call(self, op: str, coro: Any) -> Any:
        self.round_trips += 1
        try:
            async with asyncio.timeout(
                self._timeout
            ):  # pragma: no mutate - the sockets' own timeouts are the same: two bounds, one value
                return await coro
        except (TimeoutError, rexc.RedisError, OSError) as exc:
            raise StoreUnavailable(f"redis {op}: {type(exc).__name__}: {exc}") from exc

    async def _write(self, op: str, script: Any, run_id: str, args: list[Any]) -> Any:
        """Run a write script; with wait_replicas, WAIT on the same connection (one pipeline)."""
        if not self.url.wait_replicas:
            return await self._call(op, script(keys=[self._key(run_id)], args=args))
        # Inside MULTI, WAIT does not block: with a replica that lags, the write is refused (503), never relied on.
        async with self._client.pipeline(transaction=False) as pipe:  # pragma: no mutate
            pipe.eval(script.script, 1, self._key(run_id), *args)
            pipe.wait(
                self.url.wait_replicas, max(1, int(self._timeout * 1000 / 2))
            )  # pragma: no mutate - how long to wait, within the store timeout
            result, acked = await self._call(op, pipe.execute())
        if acked < self.url.wait_replicas:
            raise StoreUnavailable(
                f"redis {op}: only {acked} of {self.url.wait_replicas} replica(s) acknowledged the write "
                "(wait_replicas): a failover could lose it, so it is not relied on"
            )
        return result

    # -- RunStore: claim, finish and release overridden, one script each ----------------------

    async def claim(self, new: NewRun, now: datetime, lease: timedelta, retention: timedelta) -> Claim:
        fresh = fresh_record(new, now, lease, retention)
        ttl_ms = max(
            1, int(retention.total_seconds() * 1000)
        )  # pragma: no mutate - max(): SET PX refuses 0; retention is hours
        args = [
            rfc3339(now),
            new.body_sha256,
            _to_json(fresh),
            ttl_ms,
            new_attempt_id(),
            rfc3339(now + lease),
            json.dumps(new.task_retry_count),
            json.dumps(new.task_execution_count),
        ]
        decision, record, previous = await self._write("claim", self._claim, new.run_id, args)
        return Claim(
            Decision(decision.decode()),
            _from_json(record),
            previous=_from_json(previous) if previous else None,
        )

    async def finish(self, claim: Claim, finish: Finish, now: datetime) -> RunRecord:
        args = [
            claim.record.attempt_id,
            finish.status,
            json.dumps(finish.target),
            json.dumps(finish.last_error),
            rfc3339(now),
        ]
        outcome, record = await self._write("finish", self._finish, claim.record.run_id, args)
        if outcome == b"fenced":
            raise Fenced(_from_json(record) if record else None)
        return _from_json(record)

    async def load(self, run_id: str) -> tuple[RunRecord, Version] | None:
        raw = await self._call("get", self._client.get(self._key(run_id)))
        return (_from_json(raw), raw) if raw else None

    async def list(
        self, now: datetime, route: str | None = None, status: RunStatus | None = None, limit: int = 50
    ) -> list[RunRecord]:
        """Scans the prefix (an admin command, not a delivery path): fine for thousands of runs."""

        async def scan() -> list[RunRecord]:
            records = []
            ours = KEY_PREFIX + "*"  # a shared instance has other keys too
            async for key in self._client.scan_iter(
                match=ours, count=500
            ):  # pragma: no mutate - count is a batch-size hint
                raw = await self._client.get(key)
                if raw:
                    records.append(_from_json(raw))
            return records

        records = await self._call("list", scan())
        live = [
            r
            for r in records
            if r.expire_at > now and (route is None or r.route == route) and (status is None or r.status == status)
        ]
        return sorted(live, key=lambda r: r.created_at, reverse=True)[:limit]

    async def release(self, run_id: str, now: datetime) -> RunRecord | None:
        written = await self._write("release", self._release, run_id, [rfc3339(now)])
        return _from_json(written) if written else None

    async def ping(self) -> None:
        await self._call("ping", self._client.ping())
        if not self._eviction_checked:
            self._eviction_checked = True
            await self._warn_if_evicting()

    async def _warn_if_evicting(self) -> None:
        """Once per process: a Redis with a memory limit and any policy but `noeviction` drops keys
        when full, and every run key has a TTL (Memorystore's default, volatile-lru, evicts exactly those)."""
        try:
            memory = await self._call(
                "info", self._client.info("memory")
            )  # pragma: no mutate - a failure here is silent; INFO's sections are case-insensitive
        except StoreUnavailable:
            return  # INFO refused or failed: the ping itself answered, nothing more to tell
        policy = memory.get("maxmemory_policy")
        if memory.get("maxmemory") and policy != "noeviction":
            logger.warning(
                "redis maxmemory-policy is %s: when the instance is full it evicts run records and a retry "
                "then dispatches the run again; set maxmemory-policy noeviction (a full instance then refuses "
                "claims with 503)",
                policy,
            )

    async def close(self) -> None:
        await self._client.aclose(close_connection_pool=True)  # ours: passed in, so not closed by default
