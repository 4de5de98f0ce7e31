"""How are my scheduled runs doing? One row per route, read from the store and the routes file:
what `runonce status` prints and `GET /v1/status` answers.

It never scans a route's history. For a route that names its Scheduler `job` (the audit's routes)
the window's fire times are computed and their records read by key (`get_many`); for every route
the newest runs (`list` with a limit) give the last run, the last success, the runs that are not
Scheduler's fire times (force runs, Cloud Tasks) and the runs still `in_progress`.

A row needs attention when a fire time of the window was missed (the audit's rule: no record, or a
`failed` one), when a run is unresolved (still `in_progress` after its lease ran out: its attempt
crashed or its outcome is unknown, and no retry has taken it over), or when its last run `failed`.

This module reads routes, a store and a clock handed to it; it knows nothing of HTTP or the CLI.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from runonce.missed.audit import RETENTION_MARGIN, RangeRefused, auditable, scheduled_runs
from runonce.routes import Route
from runonce.run.delivery import format_schedule_time
from runonce.schedules import parse_schedule
from runonce.schedules.zones import get_zone
from runonce.stores import RunStore
from runonce.stores.base import COMPLETED, FAILED, IN_PROGRESS, RunRecord

MAX_WINDOW = timedelta(days=7)
"""The default window is the store's retention, capped at this."""
RECENT_LIMIT = 200
"""Newest runs read per route (and per route, runs still in_progress): the window's runs that are
not fire times are counted among these."""


def default_window(retention: timedelta) -> timedelta:
    """The retention (all the store can prove about absence), at most MAX_WINDOW."""
    return min(retention - RETENTION_MARGIN, MAX_WINDOW)


@dataclass(frozen=True)
class Unresolved:
    run_id: str
    status: str
    age_seconds: int
    """Seconds since its latest attempt began (the record's `updated_at`)."""

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "status": self.status, "age_seconds": self.age_seconds}


@dataclass(frozen=True)
class RouteStatus:
    route: str
    schedule: str | None
    time_zone: str | None
    next_fire_time: datetime | None
    last_fire_time: datetime | None
    last_status: str | None
    last_success: datetime | None
    counts: dict[str, int]
    missed: list[datetime]
    unresolved: list[Unresolved]

    @property
    def attention(self) -> bool:
        return bool(self.missed or self.unresolved or self.last_status == FAILED)

    def to_json(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "schedule": self.schedule,
            "time_zone": self.time_zone,
            "next_fire_time": _time(self.next_fire_time),
            "last_fire_time": _time(self.last_fire_time),
            "last_status": self.last_status,
            "last_success": _time(self.last_success),
            "counts": dict(sorted(self.counts.items())),
            "missed": [format_schedule_time(t) for t in self.missed],
            "unresolved": [u.to_json() for u in self.unresolved],
        }


@dataclass(frozen=True)
class StatusReport:
    start: datetime
    now: datetime
    routes: list[RouteStatus] = field(default_factory=list)

    @property
    def attention(self) -> bool:
        return any(row.attention for row in self.routes)

    def to_json(self) -> dict[str, Any]:
        return {"attention": self.attention, "routes": [row.to_json() for row in self.routes]}


def _time(value: datetime | None) -> str | None:
    return format_schedule_time(value) if value is not None else None


def _when(record: RunRecord) -> datetime:
    """A run's time: its fire time when Scheduler keyed it by one, else when it was first claimed."""
    if record.schedule_time is not None:
        return datetime.fromisoformat(record.schedule_time.replace("Z", "+00:00")).astimezone(UTC)
    return record.created_at


def window_start(now: datetime, since: timedelta, retention: timedelta, field_name: str = "since") -> datetime:
    """now - since, refused (`RangeRefused`) when it reaches back past what the store keeps: a run
    that did happen may have left no record there, and would be reported missed."""
    start = now - since
    earliest = now - retention + RETENTION_MARGIN
    if start < earliest:
        raise RangeRefused(
            field_name,
            f"{since.total_seconds():g}s reaches back past what the store keeps (RUNONCE_RETENTION_SECONDS="
            f"{retention.total_seconds():g}); give at most {(retention - RETENTION_MARGIN).total_seconds():g}s",
        )
    return start


async def route_status(
    store: RunStore,
    name: str,
    route: Route,
    start: datetime,
    now: datetime,
    *,
    lease: timedelta,
) -> RouteStatus:
    """One route's row over the window [start, now)."""
    zone = get_zone(route.time_zone)
    schedule = parse_schedule(route.schedule) if route.schedule is not None else None
    next_fire = schedule.next_after(now, zone) if schedule is not None else None
    recent = await store.list(now, route=name, limit=RECENT_LIMIT)
    in_progress = await store.list(now, route=name, status=IN_PROGRESS, limit=RECENT_LIMIT)
    succeeded = await store.list(now, route=name, status=COMPLETED, limit=1)

    runs: dict[str, RunRecord] = {r.run_id: r for r in recent if _when(r) >= start}
    missed: list[datetime] = []
    last_fire: datetime | None = None
    last_status: str | None = recent[0].status if recent else None
    if name in auditable({name: route}):
        fires = scheduled_runs({name: route}, start, now)
        records = await store.get_many([run.run_id for run in fires], now)
        runs.update(records)
        due = now - lease  # the audit's rule: later fire times may still be on their way
        for run in fires:
            record = records.get(run.run_id)
            if run.time < due and (record is None or record.status == FAILED):
                missed.append(run.time)
            if record is not None or run.time < due:
                last_fire = run.time
                last_status = record.status if record is not None else None
    counts: dict[str, int] = {}
    for record in runs.values():
        counts[record.status] = counts.get(record.status, 0) + 1
    unresolved = [
        Unresolved(r.run_id, r.status, int((now - r.updated_at).total_seconds()))
        for r in sorted(in_progress, key=lambda r: r.updated_at)
        if r.lease_expires <= now
    ]
    return RouteStatus(
        route=name,
        schedule=route.schedule,
        time_zone=zone.key if route.schedule is not None else route.time_zone,
        next_fire_time=next_fire.astimezone(UTC) if next_fire is not None else None,
        last_fire_time=last_fire,
        last_status=last_status,
        last_success=_when(succeeded[0]) if succeeded else None,
        counts=counts,
        missed=missed,
        unresolved=unresolved,
    )


async def status(
    store: RunStore,
    routes: Mapping[str, Route],
    now: datetime,
    *,
    since: timedelta,
    lease: timedelta,
    retention: timedelta,
    field_name: str = "since",
) -> StatusReport:
    """Every route's row, by name. Raises `RangeRefused` (window) and `StoreUnavailable`."""
    start = window_start(now, since, retention, field_name)
    rows = [await route_status(store, name, route, start, now, lease=lease) for name, route in sorted(routes.items())]
    return StatusReport(start, now, rows)
