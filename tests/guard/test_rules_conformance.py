"""The guard copies the server's claim rules instead of importing them (job code must not import
the server's `app`). This holds the copy to the original: same decision for every situation, same
fencing, same shared settings. If the server's rules change, this fails until the guard follows."""

from __future__ import annotations

import itertools
from dataclasses import fields
from datetime import UTC, datetime, timedelta

import pytest

from runonce.settings import Settings
from runonce.stores import base as server
from runonce_guard import GuardSettings
from runonce_guard import rules as guard

NOW = datetime(2026, 10, 16, 12, 0, tzinfo=UTC)
OFFSETS = [timedelta(seconds=s) for s in (-3600, -1, 0, 1, 3600)]  # before, at and after `now`
STATUSES = ["in_progress", "completed", "failed"]


def server_record(
    status: str, lease_expires: datetime, expire_at: datetime, attempt_id: str = "a1"
) -> server.RunRecord:
    return server.RunRecord(
        run_id="r",
        status=status,
        attempt_id=attempt_id,
        attempts=1,
        lease_expires=lease_expires,  # type: ignore[arg-type]
        expire_at=expire_at,
        created_at=NOW - timedelta(hours=2),
        updated_at=NOW,
        route="x",
        source="scheduler",
        project="p",
        location="l",
        job="j",
        schedule_time=None,
        task=None,
        body_sha256="same",
    )


def guard_record(status: str, lease_expires: datetime, expire_at: datetime, attempt_id: str = "a1") -> guard.StepRecord:
    return guard.StepRecord(
        run_id="r",
        step="s",
        task="0",
        status=status,
        attempt_id=attempt_id,
        attempts=1,  # type: ignore[arg-type]
        lease_expires=lease_expires,
        expire_at=expire_at,
        created_at=NOW - timedelta(hours=2),
        updated_at=NOW,
    )


SITUATIONS = [None, *itertools.product(STATUSES, OFFSETS, OFFSETS)]


def _id(situation) -> str:
    if situation is None:
        return "absent"
    status, lease, expire = situation
    return f"{status}-lease{lease.total_seconds():+.0f}s-expire{expire.total_seconds():+.0f}s"


@pytest.mark.parametrize("situation", SITUATIONS, ids=_id)
def test_guard_decides_as_the_server_does(situation) -> None:
    new = server.NewRun(
        run_id="r",
        route="x",
        source="scheduler",
        project="p",
        location="l",
        job="j",
        schedule_time=None,
        task=None,
        body_sha256="same",
    )
    if situation is None:
        found_server, found_guard = None, None
    else:
        status, lease_offset, expire_offset = situation
        found_server = server_record(status, NOW + lease_offset, NOW + expire_offset)
        found_guard = guard_record(status, NOW + lease_offset, NOW + expire_offset)
    assert guard.decide(found_guard, NOW).name == server.decide(found_server, new, NOW).name


@pytest.mark.parametrize(("status", "attempt_id"), list(itertools.product(STATUSES, ["a1", "a2"])))
def test_guard_fences_as_the_server_does(status: str, attempt_id: str) -> None:
    later = NOW + timedelta(minutes=5)
    claim = server.Claim(server.Decision.CREATE, server_record("in_progress", later, later, attempt_id="a1"))
    found_server = server_record(status, later, later, attempt_id)
    found_guard = guard_record(status, later, later, attempt_id)
    assert guard.holds(found_guard, "a1") == server.holds(found_server, claim)
    assert guard.holds(None, "a1") == server.holds(None, claim) is False


def test_shared_settings_have_the_servers_names_and_defaults() -> None:
    shared = [f.name for f in fields(GuardSettings) if f.name != "firestore_steps_collection"]
    server_defaults = Settings(store="firestore")
    for name in shared:
        assert name in Settings.model_fields, f"RUNONCE_{name.upper()} is not a server setting"
        assert getattr(GuardSettings(), name) == getattr(server_defaults, name), name
    guard_settings = GuardSettings.from_env(
        {
            "RUNONCE_LEASE_SECONDS": "60",
            "RUNONCE_RETENTION_SECONDS": "7200",
            "RUNONCE_FIRESTORE_PROJECT": "my-project",
            "RUNONCE_STORE_TIMEOUT_SECONDS": "2",
        }
    )
    server_settings = Settings(
        store="firestore",
        lease_seconds=60,
        retention_seconds=7200,
        firestore_project="my-project",
        store_timeout_seconds=2,
    )
    for name in shared:
        assert getattr(guard_settings, name) == getattr(server_settings, name), name
    assert GuardSettings().firestore_steps_collection != server_defaults.firestore_collection  # apart from runs


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RUNONCE_LEASE_SECONDS": "0"}, "RUNONCE_LEASE_SECONDS: must be above 0"),
        ({"RUNONCE_RETENTION_SECONDS": "a day"}, "RUNONCE_RETENTION_SECONDS: 'a day' is not a number"),
        ({"RUNONCE_STORE": "sqlite:///x.db"}, "RUNONCE_STORE: sqlite://… is not a store the guard can use"),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    from runonce_guard import GuardConfigError

    with pytest.raises(GuardConfigError, match=message):
        GuardSettings.from_env(env)
