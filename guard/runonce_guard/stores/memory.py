"""In-process step store: for tests of the coordinating logic, and as the smallest backend example."""

from __future__ import annotations

import threading
from dataclasses import asdict
from typing import Any

from ..rules import StepKey, StepRecord
from .base import Conflict, StepStore


class MemoryStepStore(StepStore):
    def __init__(self) -> None:
        self._records: dict[str, tuple[StepRecord, int]] = {}
        self._lock = threading.Lock()
        self._versions = 0

    def _create(self, record: StepRecord) -> Any:
        with self._lock:
            if record.key.doc_id in self._records:
                raise Conflict(record.key.doc_id)
            return self._put(record)

    def _read(self, key: StepKey) -> tuple[StepRecord | None, Any]:
        with self._lock:
            return self._records.get(key.doc_id, (None, None))

    def _write_if_unchanged(self, record: StepRecord, version: Any, fields: tuple[str, ...] | None = None) -> Any:
        with self._lock:
            current = self._records.get(record.key.doc_id)
            if current is None or current[1] != version:
                raise Conflict(record.key.doc_id)
            if fields is not None:
                record = StepRecord(**{**asdict(current[0]), **{name: getattr(record, name) for name in fields}})
            return self._put(record)

    def _put(self, record: StepRecord) -> int:
        self._versions += 1
        self._records[record.key.doc_id] = (record, self._versions)
        return self._versions
