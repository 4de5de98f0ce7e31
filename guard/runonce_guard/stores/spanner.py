"""Cloud Spanner step store (`RUNONCE_STORE=spanner://projects/P/instances/I/databases/D[?table=T]`).

One row per step (key `doc_id`, `{run_id}~{step}~{task}`); a record's version is the record itself
(what `load` read):

    load:               a strong single-use read                                    1 round trip
    insert_if_absent:   a mutation-only commit (`insert`): AlreadyExists if the row exists   1
    replace_if_version: one read-write transaction: read, compare with the version, update   2

The table is `runonce-guard store init`'s (and Terraform's) `DDL`; its row deletion policy removes
rows after `expire_at`, and reads treat an expired row as absent until then. Every call is bounded
by the store timeout.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.auth.exceptions import GoogleAuthError
from google.cloud import spanner
from google.cloud.spanner_v1 import param_types

from ..errors import GuardConfigError, StoreUnavailable
from ..rules import StepKey, StepRecord
from .base import StepStore
from .urls import SpannerURL

T = TypeVar("T")

DDL = """CREATE TABLE {table} (
  doc_id STRING(MAX) NOT NULL,
  run_id STRING(256) NOT NULL,
  step STRING(100) NOT NULL,
  task STRING(16) NOT NULL,
  status STRING(16) NOT NULL,
  attempt_id STRING(64) NOT NULL,
  attempts INT64 NOT NULL,
  lease_expires TIMESTAMP NOT NULL,
  expire_at TIMESTAMP NOT NULL,
  created_at TIMESTAMP NOT NULL,
  updated_at TIMESTAMP NOT NULL,
  result STRING(MAX),
  last_error STRING(MAX),
  holder STRING(MAX),
) PRIMARY KEY (doc_id),
  ROW DELETION POLICY (OLDER_THAN(expire_at, INTERVAL 0 DAY))"""
"""The steps table: the text `runonce-guard store init` applies and Terraform's database carries."""

_COLUMNS = ["doc_id", *(f.name for f in fields(StepRecord))]
_TIME_COLUMNS = ("lease_expires", "expire_at", "created_at", "updated_at")
_DROPPED = re.compile(r"Transaction not found|Invalid transaction ID|after it has been committed or rolledback")


def _to_row(record: StepRecord) -> list[Any]:
    values = record.as_dict()
    return [record.key.doc_id, *(values[name] for name in _COLUMNS[1:])]


def _from_row(row: list[Any]) -> StepRecord:
    values = dict(zip(_COLUMNS, row, strict=True))
    values.pop("doc_id")
    for name in _TIME_COLUMNS:  # DatetimeWithNanoseconds -> datetime, so records compare equal
        value = values[name]
        values[name] = datetime(
            value.year, value.month, value.day, value.hour, value.minute, value.second, value.microsecond, tzinfo=UTC
        )
    return StepRecord(**values)


class SpannerStepStore(StepStore):
    def __init__(self, url: SpannerURL, timeout_seconds: float = 5.0):
        self.url = url
        self.table = url.table
        self._timeout = timeout_seconds
        try:
            self._client = spanner.Client(project=url.project)
        except GoogleAuthError as exc:  # no ADC: a setup problem, say which
            raise GuardConfigError(
                f"Spanner client: {exc} (on Cloud Run the job's service account provides credentials; locally "
                "run `gcloud auth application-default login`)"
            ) from exc
        self._database = self._client.instance(url.instance).database(url.database)

    def _call(self, op: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except (gexc.GoogleAPIError, GoogleAuthError, TimeoutError, OSError) as exc:
            raise StoreUnavailable(f"spanner {op}: {type(exc).__name__}: {exc}") from exc

    def _read_row(self, reader: Any, doc_id: str) -> StepRecord | None:
        rows = list(reader.read(self.table, _COLUMNS, spanner.KeySet(keys=[[doc_id]]), timeout=self._timeout))
        return _from_row(rows[0]) if rows else None

    def insert_if_absent(self, record: StepRecord) -> Any | None:
        def insert() -> bool:
            try:
                with self._database.batch(timeout_secs=self._timeout) as batch:
                    batch.insert(self.table, _COLUMNS, [_to_row(record)])
            except gexc.AlreadyExists:
                return False
            return True

        return record if self._call("create", insert) else None

    def load(self, key: StepKey) -> tuple[StepRecord, Any] | None:
        def read() -> StepRecord | None:
            with self._database.snapshot() as snapshot:
                return self._read_row(snapshot, key.doc_id)

        found = self._call("read", read)
        return (found, found) if found is not None else None

    def replace_if_version(
        self, record: StepRecord, version: Any, changed: tuple[str, ...] | None = None
    ) -> Any | None:
        def body(txn: Any) -> bool:
            if self._read_row(txn, record.key.doc_id) != version:
                return False
            txn.update(self.table, _COLUMNS, [_to_row(record)])
            return True

        def attempt() -> bool:
            deadline = time.monotonic() + self._timeout
            while True:
                try:
                    return bool(self._database.run_in_transaction(body, timeout_secs=self._timeout))
                except (gexc.NotFound, gexc.FailedPrecondition) as exc:
                    # A transaction the server dropped never committed: run it again from the read.
                    if not _DROPPED.search(str(exc)) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)

        return record if self._call("update", attempt) else None

    def ping(self) -> None:
        def select() -> None:
            with self._database.snapshot() as snapshot:
                list(snapshot.execute_sql(f"SELECT 1 FROM {self.table} LIMIT 1", timeout=self._timeout))

        self._call("ping", select)

    def close(self) -> None:
        self._client.close()

    def init(self, say: Callable[[str], None]) -> None:
        """Create the steps table with its row deletion policy, unless it exists (then change nothing)."""

        def exists() -> bool:
            with self._database.snapshot() as snapshot:
                rows = list(
                    snapshot.execute_sql(
                        "SELECT TABLE_NAME FROM INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = '' AND TABLE_NAME = @t",
                        params={"t": self.table},
                        param_types={"t": param_types.STRING},
                    )
                )
            return bool(rows)

        if self._call("init", exists):
            say(f"Spanner table {self.table} exists: nothing to do")
            return
        operation = self._call("init", lambda: self._database.update_ddl([DDL.format(table=self.table)]))
        self._call("init", lambda: operation.result(timeout=max(self._timeout, 120)))
        say(f"created Spanner table {self.table} (rows deleted after expire_at by its row deletion policy)")
