"""RunStore's protocol over the primitives (runonce/stores/base.py), on every store that uses it: a write
whose answer was lost is still ours, a lost race is decided again, contention is bounded.

Redis overrides claim, finish and release with one Lua script each; a lost answer there is a
StoreUnavailable (redis-py never resends: tests/test_store_new_backends.py), so it is not here.
"""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import timedelta

import pytest

from runonce.stores import Decision, Fenced, Finish, RunStore, StoreUnavailable
from runonce.stores.base import COMPLETED, FAILED, IN_PROGRESS
from tests.support.runs import LEASE, RETENTION, T0, claim, new_run
from tests.support.stores import STORE_KINDS, with_server

TEMPLATE_KINDS = [kind for kind in STORE_KINDS if kind != "redis"]
LOG_TARGET = {"type": "log", "resource": "x"}


@pytest.fixture(params=TEMPLATE_KINDS, ids=TEMPLATE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return with_server(request)


def lose_next_answer(monkeypatch: pytest.MonkeyPatch, store: RunStore, primitive: str) -> list[object]:
    """The next call of `primitive` takes effect, but its caller sees None, as when a client resent a
    write that had landed and the resend was refused (AlreadyExists / a version that moved on).
    Returns what the real call answered."""
    real = getattr(store, primitive)
    landed: list[object] = []

    async def lost(*args, **kwargs):  # type: ignore[no-untyped-def]
        monkeypatch.setattr(store, primitive, real)
        landed.append(await real(*args, **kwargs))
        return None

    monkeypatch.setattr(store, primitive, lost)
    return landed


async def test_a_create_whose_answer_was_lost_is_still_ours(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    landed = lose_next_answer(monkeypatch, store, "insert_if_absent")
    won = await claim(store)

    assert landed[0] is not None  # it did land
    assert won.decision is Decision.CREATE and won.previous is None  # not BUSY for its own claim
    assert await store.get(won.record.run_id, T0) == won.record
    done = await store.finish(won, Finish(COMPLETED, target=LOG_TARGET), T0)
    assert done.status == COMPLETED


async def test_a_takeover_whose_answer_was_lost_is_still_ours(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    first = await claim(store)
    failed = await store.finish(first, Finish(FAILED, last_error="boom"), T0)
    landed = lose_next_answer(monkeypatch, store, "replace_if_version")
    again = await claim(store, T0 + timedelta(seconds=1))

    assert landed[0] is not None
    assert again.decision is Decision.TAKEOVER and again.previous == failed
    assert again.record.attempts == 2
    done = await store.finish(again, Finish(COMPLETED, target=LOG_TARGET), T0 + timedelta(seconds=2))
    assert done.status == COMPLETED and done.attempt_id == again.record.attempt_id


@pytest.mark.parametrize("status", [COMPLETED, FAILED, IN_PROGRESS])
async def test_a_finish_whose_answer_was_lost_is_not_fenced(
    store: RunStore, monkeypatch: pytest.MonkeyPatch, status: str
) -> None:
    first = await claim(store)
    landed = lose_next_answer(monkeypatch, store, "replace_if_version")
    done = await store.finish(first, Finish(status, last_error="x"), T0 + timedelta(seconds=1))

    assert landed[0] is not None
    assert done.status == status and done.last_error == "x"
    assert await store.get(first.record.run_id, T0) == done


async def test_a_release_whose_answer_was_lost_reports_the_release(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await claim(store)
    landed = lose_next_answer(monkeypatch, store, "replace_if_version")
    released = await store.release(first.record.run_id, T0 + timedelta(seconds=1))

    assert landed[0] is not None
    assert released is not None and released.lease_expires == T0 + timedelta(seconds=1)
    assert await store.get(first.record.run_id, T0) == released


async def test_a_finish_without_a_version_reads_first(store: RunStore) -> None:
    """A Claim from elsewhere (no version): the finish reads, finds the run still held, writes."""
    first = await claim(store)
    done = await store.finish(replace(first, version=None), Finish(COMPLETED, target=LOG_TARGET), T0)
    assert done.status == COMPLETED and done.target == LOG_TARGET
    with pytest.raises(Fenced) as refused:
        await store.finish(replace(first, version=None), Finish(FAILED), T0)
    assert refused.value.found == done
    assert str(refused.value) == f"run is now held by attempt {done.attempt_id} (completed)"


async def test_a_record_deleted_between_the_insert_and_the_read_is_created_again(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TTL deleted the record the first insert ran into: the claim inserts again and wins."""
    inserts: list[str] = []
    real = store.insert_if_absent

    async def insert(record):  # type: ignore[no-untyped-def]
        inserts.append(record.attempt_id)
        if len(inserts) == 1:
            return None  # as if a record were there, gone by the read
        return await real(record)

    monkeypatch.setattr(store, "insert_if_absent", insert)
    won = await claim(store)
    assert won.decision is Decision.CREATE and won.previous is None
    assert inserts == [won.record.attempt_id] * 2  # the same fresh record, sent again
    assert await store.get(won.record.run_id, T0) == won.record


async def test_a_record_deleted_then_created_by_another_claim_is_busy(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read after a refused insert found nothing (TTL), the insert again is refused (another
    claim got there): decided again from the next read, like any lost race."""
    first = await claim(store)
    real = store.load
    loads: list[str] = []

    async def load(run_id):  # type: ignore[no-untyped-def]
        loads.append(run_id)
        return None if len(loads) == 1 else await real(run_id)

    monkeypatch.setattr(store, "load", load)
    second = await claim(store, T0 + timedelta(seconds=1))
    assert second.decision is Decision.BUSY and second.record == first.record
    assert len(loads) == 2


async def test_finish_and_release_name_every_field_they_change(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`changed` is what a store may write alone (Firestore does): it must cover every difference."""
    real = store.replace_if_version
    seen: list[tuple[set[str], set[str] | None]] = []

    async def replace(record, version, changed=None):  # type: ignore[no-untyped-def]
        before = (await store.load(record.run_id))[0]
        differs = {f.name for f in fields(record) if getattr(before, f.name) != getattr(record, f.name)}
        seen.append((differs, set(changed) if changed is not None else None))
        return await real(record, version, changed)

    first, other = await claim(store), await claim(store, run=new_run(run_id="e" * 64))
    monkeypatch.setattr(store, "replace_if_version", replace)
    await store.release(other.record.run_id, T0 + timedelta(seconds=1))
    await store.finish(first, Finish(COMPLETED, target=LOG_TARGET, last_error="slow"), T0 + timedelta(seconds=2))
    released, finished = {"lease_expires", "updated_at"}, {"status", "target", "last_error", "updated_at"}
    assert seen == [(released, released), (finished, finished)]  # (what differs, what the write names)


async def test_a_race_lost_on_every_try_is_unavailable_after_a_bound(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await claim(store)
    tries: list[str] = []

    async def always_moved_on(record, version, changed=None):  # type: ignore[no-untyped-def]
        tries.append(record.attempt_id)
        return None

    monkeypatch.setattr(store, "replace_if_version", always_moved_on)
    for operation in (
        lambda: claim(store, T0 + LEASE),  # a takeover
        lambda: store.finish(first, Finish(COMPLETED, target=LOG_TARGET), T0),
        lambda: store.release(first.record.run_id, T0),
    ):
        tries.clear()
        with pytest.raises(StoreUnavailable, match="still contended after 20 tries"):
            await operation()
        assert len(tries) == 20  # the README's bound
    assert await store.get(first.record.run_id, T0) == first.record  # nothing changed


def count_loads(monkeypatch: pytest.MonkeyPatch, store: RunStore) -> list[str]:
    real = store.load
    loads: list[str] = []

    async def load(run_id):  # type: ignore[no-untyped-def]
        loads.append(run_id)
        return await real(run_id)

    monkeypatch.setattr(store, "load", load)
    return loads


@pytest.mark.parametrize("path", ["fresh", "takeover", "lost create", "lost takeover", "re-created after TTL"])
async def test_a_won_claim_lets_finish_write_without_a_read(
    store: RunStore, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """Every way a claim is won hands finish the version it wrote: the finish is one write."""
    now = T0
    if path in ("takeover", "lost takeover"):
        await store.finish(await claim(store), Finish(FAILED, last_error="boom"), T0)
        now = T0 + timedelta(seconds=1)
    if path == "lost create":
        lose_next_answer(monkeypatch, store, "insert_if_absent")
    if path == "lost takeover":
        lose_next_answer(monkeypatch, store, "replace_if_version")
    if path == "re-created after TTL":
        real = store.insert_if_absent
        refused: list[bool] = []

        async def insert(record):  # type: ignore[no-untyped-def]
            if not refused:
                refused.append(True)
                return None  # a record was there; gone by the read
            return await real(record)

        monkeypatch.setattr(store, "insert_if_absent", insert)
    loads = count_loads(monkeypatch, store)
    won = await claim(store, now)
    assert won.won
    if path == "fresh":
        assert loads == []  # the claim itself is one insert
    loads.clear()
    done = await store.finish(won, Finish(COMPLETED, target=LOG_TARGET), now)
    assert done.status == COMPLETED and loads == []


class OnlyReads(RunStore):
    """A backend that implements load but neither write primitive nor the operations."""

    async def load(self, run_id):  # type: ignore[no-untyped-def]
        return None

    async def list(self, now, route=None, status=None, limit=50):  # type: ignore[no-untyped-def]
        return []

    async def ping(self) -> None:
        return None


async def test_a_backend_missing_a_write_primitive_says_what_to_implement() -> None:
    from runonce.stores.base import Claim, fresh_record

    store = OnlyReads()
    with pytest.raises(NotImplementedError, match=r"^OnlyReads must implement insert_if_absent, or override claim$"):
        await claim(store)
    held = Claim(Decision.CREATE, fresh_record(new_run(), T0, LEASE, RETENTION), version="v")
    with pytest.raises(
        NotImplementedError,
        match=r"^OnlyReads must implement replace_if_version, or override claim, finish and release$",
    ):
        await store.finish(held, Finish(COMPLETED), T0)
