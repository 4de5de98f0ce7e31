"""Guard fixtures: each test gets its own steps collection and run_id on the session's emulator."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from runonce_guard import Guard, GuardSettings
from runonce_guard.stores.firestore import FirestoreStepStore
from tests.support.procs import FirestoreEmulator
from tests.support.stores import FIRESTORE_PROJECT


@pytest.fixture
def collection() -> str:
    return f"steps_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def run_id() -> str:
    return uuid.uuid4().hex + uuid.uuid4().hex  # 64 hex, like runonce's


@pytest.fixture
def job_env(firestore_emulator: FirestoreEmulator, collection: str, run_id: str) -> dict[str, str]:
    """The environment of a Cloud Run job task that runonce started, pointed at the emulator."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RUNONCE_", "CLOUD_RUN_", "IDEMPOTENCY"))}
    return {
        **base,
        "FIRESTORE_EMULATOR_HOST": firestore_emulator.host,
        "RUNONCE_STORE": "firestore",
        "RUNONCE_FIRESTORE_PROJECT": FIRESTORE_PROJECT,
        "RUNONCE_FIRESTORE_STEPS_COLLECTION": collection,
        "RUNONCE_STORE_TIMEOUT_SECONDS": "30",  # the store timeout is a deadline: room for a loaded machine
        "IDEMPOTENCY_KEY": run_id,
        "CLOUD_RUN_EXECUTION": "export-abc12",
        "CLOUD_RUN_TASK_INDEX": "0",
        "CLOUD_RUN_TASK_ATTEMPT": "0",
    }


@pytest.fixture
def make_guard(job_env: dict[str, str]) -> Iterator:
    """Guards on the same collection with their own Firestore client, as separate attempts would be."""
    opened: list[FirestoreStepStore] = []

    def make(**kwargs) -> Guard:
        settings = GuardSettings.from_env(job_env)
        store = FirestoreStepStore(
            project=FIRESTORE_PROJECT,
            collection=settings.firestore_steps_collection,
            timeout_seconds=settings.store_timeout_seconds,
        )
        opened.append(store)
        return Guard(store, settings, environ=kwargs.pop("environ", job_env), **kwargs)

    yield make
    for store in opened:
        store.close()
