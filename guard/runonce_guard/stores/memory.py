"""In-process step store: for tests of the coordinating logic, and as the smallest backend example."""

from __future__ import annotations

import threading
from dataclasses import asdict
from typing import Any

from ..rules import StepKey, StepRecord
from .base import StepStore


class MemoryStepStore(StepStore):
    def __init__(self) -> None:
        self._records: dict[str, tuple[StepRecord, int]] = {}
        self._lock = threading.Lock()
        self._versions = 0

    def insert_if_absent(self, record: StepRecord) -> Any | None:
        with self._lock:
            if record.key.doc_id in self._records:
                return None
            return self._put(record)

    def load(self, key: StepKey) -> tuple[StepRecord, Any] | None:
        with self._lock:
            return self._records.get(key.doc_id)

    def replace_if_version(
        self, record: StepRecord, version: Any, changed: tuple[str, ...] | None = None
    ) -> Any | None:
        with self._lock:
            current = self._records.get(record.key.doc_id)
            if current is None or current[1] != version:
                return None
            if changed is not None:
                record = StepRecord(**{**asdict(current[0]), **{name: getattr(record, name) for name in changed}})
            return self._put(record)

    def _put(self, record: StepRecord) -> int:
        self._versions += 1
        self._records[record.key.doc_id] = (record, self._versions)
        return self._versions
