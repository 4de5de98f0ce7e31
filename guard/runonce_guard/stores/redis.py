"""Redis / Memorystore step store (`RUNONCE_STORE=redis://HOST:PORT/DB`, `rediss://…`).

One key per step, `runonce:step:{run_id}~{step}~{task}`, holding the record as JSON text. A
record's version is that text: `insert_if_absent` is `SET NX`, `replace_if_version` a compare-and-set
script (GET, compare with the text read, SET), which Redis runs atomically. The script never
decodes the JSON, so what is written reads back byte for byte. A fresh step costs two round trips
(create, finish). Keys expire at the record's `expire_at`.

With `?wait_replicas=N` every write is followed by `WAIT N`: fewer acknowledgements within the
store timeout raise `StoreUnavailable`, as on the server, rather than relying on a write a
failover could lose. No silent resend: a call that fails is `StoreUnavailable`, and the protocol's
next read recognises a write of ours whose reply was lost.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import redis
from redis import exceptions as rexc
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..errors import StoreUnavailable
from ..rules import StepKey, StepRecord, rfc3339
from .base import StepStore
from .urls import RedisURL

KEY_PREFIX = "runonce:step:"
_TIME_FIELDS = ("lease_expires", "expire_at", "created_at", "updated_at")

# KEYS[1]; ARGV: the text read, the new text, its time to live in ms. 1 = written, 0 = it had changed.
_COMPARE_AND_SET = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""


def _to_json(record: StepRecord) -> str:
    values = record.as_dict()
    for name in _TIME_FIELDS:
        values[name] = rfc3339(values[name])
    return json.dumps(values, separators=(",", ":"), sort_keys=True)


def _from_json(raw: bytes | str) -> StepRecord:
    values = json.loads(raw)
    for name in _TIME_FIELDS:
        values[name] = datetime.fromisoformat(values[name]).astimezone(UTC)
    known = StepRecord.__dataclass_fields__
    return StepRecord(**{k: v for k, v in values.items() if k in known})


def _ttl_ms(record: StepRecord) -> int:
    """Until `expire_at`, measured from the write's own `updated_at` (its `now`): the clock that
    decides, as every other rule, rather than Redis' (the same instant when the clocks agree)."""
    return max(1, int((record.expire_at - record.updated_at).total_seconds() * 1000))


class RedisStepStore(StepStore):
    def __init__(self, url: RedisURL, timeout_seconds: float = 5.0):
        self.url = url
        self._timeout = timeout_seconds
        tls: dict[str, Any] = {"ssl": True, "ssl_ca_certs": url.ca_file} if url.tls else {}
        self._client = redis.Redis(
            host=url.host,
            port=url.port,
            db=url.db,
            username=url.username,
            password=url.password,
            socket_timeout=timeout_seconds,
            socket_connect_timeout=timeout_seconds,
            retry=Retry(NoBackoff(), 0),
            **tls,
        )
        self._cas = self._client.register_script(_COMPARE_AND_SET)

    def _key(self, key: StepKey) -> str:
        return KEY_PREFIX + key.doc_id

    def _call(self, op: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (rexc.RedisError, OSError) as exc:
            raise StoreUnavailable(f"redis {op}: {type(exc).__name__}: {exc}") from exc

    def _replicated(self, op: str) -> None:
        """With wait_replicas, the write just made must reach that many replicas."""
        if not self.url.wait_replicas:
            return
        acked = self._call(op, self._client.wait, self.url.wait_replicas, max(1, int(self._timeout * 1000 / 2)))
        if acked < self.url.wait_replicas:
            raise StoreUnavailable(
                f"redis {op}: only {acked} of {self.url.wait_replicas} replica(s) acknowledged the write "
                "(wait_replicas): a failover could lose it, so it is not relied on"
            )

    def insert_if_absent(self, record: StepRecord) -> Any | None:
        text = _to_json(record)
        if not self._call("create", self._client.set, self._key(record.key), text, nx=True, px=_ttl_ms(record)):
            return None
        self._replicated("create")
        return text

    def load(self, key: StepKey) -> tuple[StepRecord, Any] | None:
        raw = self._call("get", self._client.get, self._key(key))
        if raw is None:
            return None
        text = raw.decode() if isinstance(raw, bytes) else raw
        return _from_json(text), text

    def replace_if_version(
        self, record: StepRecord, version: Any, changed: tuple[str, ...] | None = None
    ) -> Any | None:
        text = _to_json(record)
        written = self._call("update", self._cas, keys=[self._key(record.key)], args=[version, text, _ttl_ms(record)])
        if not written:
            return None
        self._replicated("update")
        return text

    def ping(self) -> None:
        self._call("ping", self._client.ping)

    def close(self) -> None:
        self._client.close()
