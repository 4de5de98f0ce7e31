"""A run, as the store and runner tests build it: one delivery, one body, the lease and retention
they use, a store that fails on command and a target handler that raises."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runonce.run.delivery import Delivery
from runonce.stores import Claim, NewRun, RunStore, StoreUnavailable
from runonce.stores.memory import MemoryStore
from runonce.targets import DispatchRequest

LEASE = timedelta(seconds=300)
RETENTION = timedelta(days=1)
T0 = datetime(2026, 10, 16, 12, 0, 0, tzinfo=UTC)
DELIVERY = Delivery(
    source="scheduler",
    project="proj-1",
    location="us-central1",
    route="etl",
    job="nightly",
    schedule_time=datetime(2026, 10, 16, 12, 0, tzinfo=UTC),
)
BODY = "0" * 64


def new_run(run_id: str = "a" * 64, body: str = "b" * 64, route: str = "etl") -> NewRun:
    return NewRun(
        run_id=run_id,
        route=route,
        source="scheduler",
        project="proj-1",
        location="us-central1",
        job="nightly",
        schedule_time="2026-10-16T12:00:00Z",
        task=None,
        body_sha256=body,
    )


async def claim(store: RunStore, now: datetime = T0, run: NewRun | None = None) -> Claim:
    return await store.claim(run or new_run(), now, LEASE, RETENTION)


def raising(exc: Exception):
    """A scripted target's handler that fails the dispatch with `exc`."""

    async def handler(request: DispatchRequest) -> str:
        raise exc

    return handler


class BrokenStore(MemoryStore):
    """A store that fails on command, to test what each failure leaves behind."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_claim = False
        self.fail_finish = False
        self.fail_list = False

    async def claim(self, *args, **kwargs):
        if self.fail_claim:
            raise StoreUnavailable("connection refused")
        return await super().claim(*args, **kwargs)

    async def finish(self, *args, **kwargs):
        if self.fail_finish:
            raise StoreUnavailable("deadline exceeded")
        return await super().finish(*args, **kwargs)

    async def list(self, *args, **kwargs):
        if self.fail_list:
            raise StoreUnavailable("list: deadline exceeded")
        return await super().list(*args, **kwargs)
