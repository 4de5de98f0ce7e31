"""Firestore step store (`RUNONCE_STORE=firestore`): document `{collection}/{run_id}~{step}~{task}`.

No transactions: `insert_if_absent` is a create (precondition exists=false) and
`replace_if_version` an update with an update-time precondition, so a fresh step costs one create
(claim) and one update (finish).
Timestamps are Firestore Timestamps, so a TTL policy on `expire_at` deletes old records. The
Workflows subworkflow and the Cloud Build snippet write the same documents over REST.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.auth.exceptions import GoogleAuthError
from google.cloud import firestore

from ..errors import GuardConfigError, StoreUnavailable
from ..rules import StepKey, StepRecord
from .base import StepStore

_LOST = (gexc.AlreadyExists, gexc.FailedPrecondition, gexc.NotFound)
"""What a conditional write that lost raises: the document exists (create), or changed or vanished."""


class _Lost(Exception):
    pass


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
        # The client's default retry keeps trying a transient error for 60 s whatever `timeout` says:
        # retry within the store timeout instead, so an unreachable store fails in that time.
        self._retry = gretry.Retry(
            predicate=gretry.if_transient_error, initial=0.1, maximum=1.0, multiplier=2.0, timeout=timeout_seconds
        )

    def _call(self, op: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """One RPC, retried on transient errors within the store timeout; a conditional write that
        lost raises `_Lost`, anything else `StoreUnavailable`."""
        try:
            return fn(*args, timeout=self._timeout, retry=self._retry, **kwargs)
        except _LOST as exc:
            raise _Lost(str(exc)) from exc
        except (gexc.GoogleAPIError, GoogleAuthError) as exc:  # incl. a failed token refresh
            raise StoreUnavailable(f"firestore {op}: {type(exc).__name__}: {exc}") from exc

    def insert_if_absent(self, record: StepRecord) -> Any | None:
        ref = self._collection.document(record.key.doc_id)
        try:
            return self._call("create", ref.create, record.as_dict()).update_time
        except _Lost:
            return None

    def load(self, key: StepKey) -> tuple[StepRecord, Any] | None:
        snap = self._call("get", self._collection.document(key.doc_id).get)
        if not snap.exists:
            return None
        return _from_doc(snap.to_dict()), snap.update_time

    def replace_if_version(
        self, record: StepRecord, version: Any, changed: tuple[str, ...] | None = None
    ) -> Any | None:
        doc = record.as_dict()
        if changed is not None:
            doc = {name: doc[name] for name in changed}
        ref = self._collection.document(record.key.doc_id)
        option = self._client.write_option(last_update_time=version)
        try:
            return self._call("update", ref.update, doc, option=option).update_time
        except _Lost:
            return None

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
