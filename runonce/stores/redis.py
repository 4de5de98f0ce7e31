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
import functools
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rexc
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.maint_notifications import MaintNotificationsConfig

from runonce.stores.base import (
    GET_MANY_BATCH,
    Claim,
    Decision,
    Fenced,
    Finish,
    NewRun,
    Records,
    RunRecord,
    RunStatus,
    RunStore,
    StoreUnavailable,
    Version,
    chunks,
    fresh_record,
    live,
    new_attempt_id,
    rfc3339,
)
from runonce.stores.urls import RedisURL

logger = logging.getLogger("runonce.stores.redis")

KEY_PREFIX = "runonce:run:"
INIT_TIMEOUT_SECONDS = 600.0  # `store init` indexing every record: minutes for millions
MAX_CONNECTIONS = 32  # per process; Memorystore allows 65,000 clients
_TIME_FIELDS = ("lease_expires", "expire_at", "created_at", "updated_at")
_FIELDS = [f.name for f in fields(RunRecord)]

INDEX_PREFIX = "runonce:idx:"
"""Sorted sets of run_ids scored by `created_at` (microseconds since the epoch), which `list` reads
newest first, so a route's newest runs cost what `limit` asks, not the route's history:

    runonce:idx:all                       every run
    runonce:idx:status:{status}           the runs in that status
    runonce:idx:route:{route}             the route's runs
    runonce:idx:route-status:{status}:{route}

The scripts that write a record keep its entries in the same atomic step, and a claim trims the
sets it touches of entries older than its retention (their records are gone or expired). The keys
are built inside the scripts, so the store needs one Redis node (Memorystore for Redis), not a
Redis Cluster."""

INDEXED = INDEX_PREFIX + "built"
"""Set once every record is in the index sets (by `runonce store init`, or by a list that found no
records to index). Until then `list` scans every run key, as a store written before the sets did."""

# Lua helpers every write script shares: the index keys of a (route, status) and moving a run
# between them. ARGV[#ARGV] is INDEX_PREFIX.
_INDEX_LUA = """
local prefix = ARGV[#ARGV]
local function status_keys(route, status)
  return {prefix .. 'status:' .. status, prefix .. 'route-status:' .. status .. ':' .. route}
end
local function unindex(record, run_id)
  for _, key in ipairs(status_keys(record.route, record.status)) do redis.call('ZREM', key, run_id) end
end
-- A record time (RFC 3339 UTC, microseconds) as its score: microseconds since the epoch, as text
-- (exact: a double holds them until 2255; tostring would round to 14 digits).
local function score_of(t)
  local y, mo, d, h, mi, s, us = string.match(t, '^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)%.(%d+)Z$')
  y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
  if mo <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * ((mo + 9) % 12) + 2) / 5) + d - 1
  local days = era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
  local seconds = days * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(s)
  return string.format('%.0f', seconds * 1e6 + tonumber(us))
end
local function index(record, run_id, score)
  for _, key in ipairs(status_keys(record.route, record.status)) do redis.call('ZADD', key, score, run_id) end
end
"""

# base.decide and base.takeover_record, in Lua. ARGV: now, body_sha256, fresh record JSON,
# its TTL in ms, new attempt_id, lease_expires, task_retry_count, task_execution_count (JSON),
# run_id, route, the fresh record's score, trim score (now - retention), INDEX_PREFIX.
# Returns {decision, record written or found, record replaced (or false)}.
_CLAIM = (
    _INDEX_LUA
    + """
local raw = redis.call('GET', KEYS[1])
local now = ARGV[1]
local run_id, route = ARGV[9], ARGV[10]
local found = raw and cjson.decode(raw)
if not found or found.expire_at <= now then
  if found then unindex(found, run_id) end
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
  local keys = {prefix .. 'all', prefix .. 'route:' .. route}
  for _, status in ipairs({'in_progress', 'completed', 'failed', 'skipped'}) do
    for _, key in ipairs(status_keys(route, status)) do table.insert(keys, key) end
  end
  for _, key in ipairs(keys) do redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. ARGV[12]) end
  redis.call('ZADD', prefix .. 'all', ARGV[11], run_id)
  redis.call('ZADD', prefix .. 'route:' .. route, ARGV[11], run_id)
  index({route = route, status = 'in_progress'}, run_id, ARGV[11])
  return {'create', ARGV[3], raw}
end
if found.body_sha256 ~= ARGV[2] then return {'mismatch', raw, false} end
if found.status == 'completed' or found.status == 'skipped' then return {'replay', raw, false} end
if found.status == 'in_progress' and found.lease_expires > now then return {'busy', raw, false} end
unindex(found, run_id)
found.status = 'in_progress'
found.attempt_id = ARGV[5]
found.attempts = found.attempts + 1
found.lease_expires = ARGV[6]
found.updated_at = now
found.task_retry_count = cjson.decode(ARGV[7])
found.task_execution_count = cjson.decode(ARGV[8])
local written = cjson.encode(found)
redis.call('SET', KEYS[1], written, 'KEEPTTL')
index(found, run_id, score_of(found.created_at))
return {'takeover', written, raw}
"""
)

# base.holds and base.finished_record. ARGV: attempt_id, status, target JSON (null keeps the
# stored one), last_error JSON, updated_at, run_id, created_at score, INDEX_PREFIX.
# Returns {'ok', written} or {'fenced', found or false}.
_FINISH = (
    _INDEX_LUA
    + """
local raw = redis.call('GET', KEYS[1])
local found = raw and cjson.decode(raw)
if not found or found.attempt_id ~= ARGV[1] or found.status ~= 'in_progress' then
  return {'fenced', raw}
end
unindex(found, ARGV[6])
found.status = ARGV[2]
local target = cjson.decode(ARGV[3])
if target ~= cjson.null then found.target = target end
found.last_error = cjson.decode(ARGV[4])
found.updated_at = ARGV[5]
local written = cjson.encode(found)
redis.call('SET', KEYS[1], written, 'KEEPTTL')
index(found, ARGV[6], ARGV[7])
return {'ok', written}
"""
)

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

# The newest live records of one index set. KEYS[1]: the set, KEYS[2]: INDEXED (false when the
# records are not indexed yet). ARGV: limit, now, route or '',
# status or '', KEY_PREFIX. Reads pages of `limit` until it has `limit` records or the set ends;
# entries whose record is gone, expired or no longer matches (a trim has not reached them) are
# passed over. Returns the records' JSON as stored (never re-encoded).
_LIST = """
if redis.call('EXISTS', KEYS[2]) == 0 then return false end
local limit, now, route, status, key_prefix = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local out, start = {}, 0
while #out < limit do
  local ids = redis.call('ZREVRANGE', KEYS[1], start, start + limit - 1)
  for _, run_id in ipairs(ids) do
    local raw = redis.call('GET', key_prefix .. run_id)
    if raw then
      local found = cjson.decode(raw)
      if found.expire_at > now and (route == '' or found.route == route)
          and (status == '' or found.status == status) and #out < limit then
        table.insert(out, raw)
      end
    end
  end
  if #ids < limit then break end
  start = start + limit
end
return out
"""

_COUNTERS = ("task_retry_count", "task_execution_count")
"""Integer fields a script copies but never computes with, stored as decimal text: Lua numbers are
doubles, and cjson would write 9007199254740993 back as 9.007199254741e+15."""


def _to_json(record: RunRecord) -> str:
    values = record.as_dict()
    for name in _TIME_FIELDS:
        values[name] = rfc3339(values[name])
    for name in _COUNTERS:
        values[name] = _counter(values[name])
    return json.dumps(values, separators=(",", ":"))  # pragma: no mutate - spacing only


def _counter(value: int | None) -> str | None:
    return None if value is None else str(value)


def _from_json(raw: bytes | str) -> RunRecord:
    values = json.loads(raw)
    for name in _TIME_FIELDS:
        values[name] = datetime.fromisoformat(values[name])
    for name in _COUNTERS:  # text since counters are kept exactly; a number in records written before
        if values.get(name) is not None:
            values[name] = int(values[name])
    # What a script rewrote reads back as written: cjson writes 2 (not 2.0) and {} (not []).
    return RunRecord(**{name: values.get(name) for name in _FIELDS})


def _score(when: datetime) -> int:
    """A time as an index score: microseconds since the epoch (exact in a double until 2255)."""
    return (when - _EPOCH) // timedelta(microseconds=1)  # pragma: no mutate - `/` too: Redis stores scores as doubles


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _index_keys(record: RunRecord) -> list[str]:
    """Every index set a record belongs to (what the scripts maintain)."""
    return [
        _index_key(None, None),
        _index_key(record.route, None),
        _index_key(None, record.status),
        _index_key(record.route, record.status),
    ]


def _index_key(route: str | None, status: RunStatus | None) -> str:
    """The set `list` reads for these filters (see INDEX_PREFIX)."""
    if route is not None and status is not None:
        return f"{INDEX_PREFIX}route-status:{status}:{route}"
    if route is not None:
        return f"{INDEX_PREFIX}route:{route}"
    if status is not None:
        return f"{INDEX_PREFIX}status:{status}"
    return f"{INDEX_PREFIX}all"


class RedisStore(RunStore):
    def __init__(self, url: RedisURL, timeout_seconds: float):
        self.url = url
        self._timeout = timeout_seconds
        tls: dict[str, Any] = (
            {"connection_class": aioredis.SSLConnection, "ssl_ca_certs": url.ca_file} if url.tls else {}
        )
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
            timeout=timeout_seconds,  # pragma: no mutate - the wait is inside a call, bounded the same (`_call`)
            # The pool checks a pooled connection before handing it out and reconnects one the server
            # closed (a restart): nothing was sent on it, so that is always safe. With maintenance
            # notifications on ("auto", redis-py's default on RESP3) it skips that check, and every
            # stale connection then fails its next command after a restart.
            maint_notifications_config=MaintNotificationsConfig(enabled=False),
            # No silent resend: a claim resent after a lost reply would find its own write and answer
            # busy. A failed call is a 503, and Scheduler's retry is the resend. On the pool: its
            # connections send, and redis-py ignores a client's own `retry` when given a pool.
            retry=Retry(NoBackoff(), 0),  # pragma: no mutate - redis-py's default now; kept should it change
            **tls,
        )
        self._client = aioredis.Redis(connection_pool=pool)
        self._claim = self._client.register_script(_CLAIM)
        self._finish = self._client.register_script(_FINISH)
        self._release = self._client.register_script(_RELEASE)
        self._list = self._client.register_script(_LIST)
        self._unindexed_warned = False
        self.round_trips = 0
        self._eviction_checked = False  # pragma: no mutate - None is as false
        """Requests sent (a script plus its WAIT go in one pipeline: one round trip)."""

    def _key(self, run_id: str) -> str:
        return KEY_PREFIX + run_id

    async def _call(self, op: str, coro: Any, timeout: float | None = None) -> Any:
        """`coro`'s result, bounded by `timeout` (default the store timeout); any failure as
        StoreUnavailable."""
        self.round_trips += 1
        try:
            async with asyncio.timeout(
                timeout or self._timeout
            ):  # pragma: no mutate - the sockets' own timeouts are the same: two bounds, one value
                return await coro
        except (TimeoutError, rexc.RedisError, OSError) as exc:
            raise StoreUnavailable(f"redis {op}: {type(exc).__name__}: {exc}") from exc

    async def _read(self, op: str, make: Callable[[], Any]) -> Any:
        """A read (nothing it sends changes anything): `make()`'s result, made again once on a new
        connection when the first went down under it (a server restarted since the pool checked it)."""
        try:
            return await self._call(op, make())
        except StoreUnavailable as exc:
            if not isinstance(exc.__cause__, rexc.ConnectionError):
                raise
        return await self._call(op, make())

    async def _write(self, op: str, script: Any, run_id: str, args: list[Any]) -> Any:
        """Run a write script; with wait_replicas, WAIT on the same connection (one pipeline)."""
        if not self.url.wait_replicas:
            return await self._call(op, script(keys=[self._key(run_id)], args=args))
        # Inside MULTI, WAIT does not block: with a replica that lags, the write is refused (503), never relied on.
        async with self._client.pipeline(transaction=False) as pipe:  # pragma: no mutate
            pipe.eval(script.script, 1, self._key(run_id), *args)
            pipe.wait(
                self.url.wait_replicas,
                max(1, int(self._timeout * 1000 / 2)),  # pragma: no mutate - how long, within the store timeout
            )
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
        ttl_ms = max(1, int(retention.total_seconds() * 1000))  # pragma: no mutate - max(): SET PX refuses 0
        args = [
            rfc3339(now),
            new.body_sha256,
            _to_json(fresh),
            ttl_ms,
            new_attempt_id(),
            rfc3339(now + lease),
            json.dumps(_counter(new.task_retry_count)),
            json.dumps(_counter(new.task_execution_count)),
            new.run_id,
            new.route,
            _score(fresh.created_at),
            _score(now - retention),
            INDEX_PREFIX,
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
            claim.record.run_id,
            _score(claim.record.created_at),
            INDEX_PREFIX,
        ]
        outcome, record = await self._write("finish", self._finish, claim.record.run_id, args)
        if outcome == b"fenced":
            raise Fenced(_from_json(record) if record else None)
        return _from_json(record)

    async def load(self, run_id: str) -> tuple[RunRecord, Version] | None:
        raw = await self._read("get", lambda: self._client.get(self._key(run_id)))
        return (_from_json(raw), raw) if raw else None

    async def list(
        self, now: datetime, route: str | None = None, status: RunStatus | None = None, limit: int = 50
    ) -> list[RunRecord]:
        """One script over the index set of these filters (INDEX_PREFIX), newest first."""
        if limit <= 0:
            return []
        args: list[str | int] = [limit, rfc3339(now), route or "", status or "", KEY_PREFIX]
        raws = await self._read("list", lambda: self._list(keys=[_index_key(route, status), INDEXED], args=args))
        if raws is None:  # records from before the index sets: scan them, as then
            records = await self._read("list", self._scan_records)
            if await self._call("list", self._all_indexed(records)):
                await self._call("list", self._client.set(INDEXED, "1"))  # from now on the sets suffice
            elif not self._unindexed_warned:
                self._unindexed_warned = True
                logger.warning(
                    "redis run records are not indexed yet: listing runs scans every key; run `runonce store init`"
                )
            live_records = [
                r for r in records if r.expire_at > now and route in (None, r.route) and status in (None, r.status)
            ]
            return sorted(live_records, key=lambda r: r.created_at, reverse=True)[:limit]
        return [_from_json(raw) for raw in raws]

    async def _all_indexed(self, records: Records) -> bool:
        """Whether every record is in the index sets already (all written since they exist)."""
        for batch in chunks([r.run_id for r in records], GET_MANY_BATCH):
            if None in await self._client.zmscore(_index_key(None, None), list(batch)):
                return False
        return True

    async def _scan_records(self) -> Records:
        records = []
        async for key in self._client.scan_iter(match=KEY_PREFIX + "*", count=500):  # pragma: no mutate - a hint
            raw = await self._client.get(key)
            if raw:
                records.append(_from_json(raw))
        return records

    async def reindex(self, say: Callable[[str], None]) -> None:
        """`runonce store init`: put every run record in the index sets (idempotent), then mark the
        store indexed so `list` reads the sets. Run it after every instance runs this version."""
        records = await self._call("init", self._scan_records(), INIT_TIMEOUT_SECONDS)
        missing = 0 if await self._call("init", self._all_indexed(records), INIT_TIMEOUT_SECONDS) else len(records)
        async with self._client.pipeline(transaction=False) as pipe:
            for record in records:
                score = _score(record.created_at)
                for key in _index_keys(record):
                    pipe.zadd(key, {record.run_id: score})
            pipe.set(INDEXED, "1")
            await self._call("init", pipe.execute(), INIT_TIMEOUT_SECONDS)
        if missing:
            say(f"redis: indexed {len(records)} run record(s) by route and status; lists read the index from now on")
        else:
            say(f"redis: all {len(records)} run record(s) were indexed already; nothing changed")

    async def get_many(self, run_ids: Iterable[str], now: datetime) -> dict[str, RunRecord]:
        """One MGET per GET_MANY_BATCH run_ids."""
        found: dict[str, RunRecord] = {}
        for batch in chunks(list(dict.fromkeys(run_ids)), GET_MANY_BATCH):
            keys = [self._key(run_id) for run_id in batch]
            raws = await self._read("get_many", functools.partial(self._client.mget, keys))
            found.update(live((_from_json(raw) for raw in raws if raw), now))
        return found

    async def release(self, run_id: str, now: datetime) -> RunRecord | None:
        written = await self._write("release", self._release, run_id, [rfc3339(now)])
        return _from_json(written) if written else None

    async def ping(self) -> None:
        await self._read("ping", self._client.ping)
        if not self._eviction_checked:
            self._eviction_checked = True
            await self._warn_if_evicting()

    async def _warn_if_evicting(self) -> None:
        """Once per process: a Redis with a memory limit and any policy but `noeviction` drops keys
        when full, and every run key has a TTL (Memorystore's default, volatile-lru, evicts exactly those)."""
        try:
            memory = await self._call(
                "info",  # pragma: no mutate - a failure here is silent
                self._client.info("memory"),  # pragma: no mutate - INFO's sections are case-insensitive; all has it
            )
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
