"""Firestore step store (`RUNONCE_STORE=firestore`): document `{collection}/{run_id}~{step}~{task}`.

No transactions: `_create` is a create (precondition exists=false) and `_write_if_unchanged` an update
with an update-time precondition, so a fresh step costs one create (claim) and one update (finish).
Timestamps are Firestore Timestamps, so a TTL policy on `expire_at` deletes old records. The
Workflows subworkflow and the Cloud Build snippet write the same documents over REST.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.auth.exceptions import GoogleAuthError
from google.cloud import firestore

from ..errors import GuardConfigError, StoreUnavailable
from ..rules import StepKey, StepRecord
from .base import Conflict, StepStore

_CONFLICTS = (gexc.AlreadyExists, gexc.FailedPrecondition, gexc.NotFound)
_TIMESTAMPS = ("lease_expires", "expire_at", "created_at", "updated_at")


class FirestoreStepStore(StepStore):
    def __init__(
        self,
        project: str | None = None,
        database: str = "(default)",
        collection: str = "runonce_steps",
        timeout_seconds: float = 5.0,
        client: firestore.Client | None = None,
    ):
        try:
            self._client = client or firestore.Client(project=project, database=database)
        except GoogleAuthError as exc:  # no ADC, or no project: a setup problem, say which
            raise GuardConfigError(
                f"Firestore client: {exc} (on Cloud Run the job's service account provides both; locally run "
                "`gcloud auth application-default login` and set RUNONCE_FIRESTORE_PROJECT)"
            ) from exc
        self._collection = self._client.collection(collection)
        self._timeout = timeout_seconds

    def _call(self, op: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """One RPC; the protocol's conflicts become `Conflict`, anything else `StoreUnavailable`."""
        try:
            return fn(*args, timeout=self._timeout, **kwargs)
        except _CONFLICTS as exc:
            raise Conflict(str(exc)) from exc
        except (gexc.GoogleAPIError, GoogleAuthError) as exc:  # incl. a failed token refresh
            raise StoreUnavailable(f"firestore {op}: {type(exc).__name__}: {exc}") from exc

    def _create(self, record: StepRecord) -> Any:
        ref = self._collection.document(record.key.doc_id)
        return self._call("create", ref.create, record.as_dict()).update_time

    def _read(self, key: StepKey) -> tuple[StepRecord | None, Any]:
        snap = self._call("get", self._collection.document(key.doc_id).get)
        if not snap.exists:
            return None, None
        return _from_doc(snap.to_dict()), snap.update_time

    def _write_if_unchanged(self, record: StepRecord, version: Any, fields: tuple[str, ...] | None = None) -> Any:
        doc = record.as_dict()
        if fields is not None:
            doc = {name: doc[name] for name in fields}
        ref = self._collection.document(record.key.doc_id)
        option = self._client.write_option(last_update_time=version)
        return self._call("update", ref.update, doc, option=option).update_time

    def ping(self) -> None:
        self._call("get", self._collection.document("_runonce_readyz").get)

    def close(self) -> None:
        self._client.close()


def _from_doc(doc: dict[str, Any] | None) -> StepRecord:
    assert doc is not None
    values = dict(doc)
    for name in _TIMESTAMPS:
        value = values[name]  # DatetimeWithNanoseconds -> plain datetime, so records compare equal
        values[name] = datetime(
            value.year, value.month, value.day, value.hour, value.minute, value.second, value.microsecond, tzinfo=UTC
        )
    values["attempts"] = int(values["attempts"])
    known = StepRecord.__dataclass_fields__
    return StepRecord(**{k: v for k, v in values.items() if k in known})
