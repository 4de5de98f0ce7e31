"""Missed runs: every fire time of a route as the run Scheduler would have delivered, and which did not run.

A route that names its Scheduler `job` (with its `schedule`, `time_zone` and `namespace`) has a
run_id for each fire time known in advance: `scheduled_delivery` builds the delivery with
`parse_delivery` from the two headers Scheduler sends, so it is exactly the one Scheduler's delivery
for that time gets. With that,

  - the audit lists the fire times of a range and asks the store for each run_id: no record, or a
    `failed` one (nothing was dispatched), = missed;
  - a catch-up or a backfill runs that delivery through the protocol (`Runner.run`), so it and a
    late Scheduler retry of the same run are one execution.

The store keeps a record for RUNONCE_RETENTION_SECONDS after its claim: before that, absence proves
nothing, so a range reaching further back is refused (`RangeRefused`) rather than reporting misses
that may have run. Fire times within the lease of now are not due yet (Scheduler may still be
delivering or retrying them) and are left out.

This module reads routes, a store and a clock handed to it; it knows nothing of HTTP or the CLI.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo

from runonce import errors, logs
from runonce.metrics import Metrics
from runonce.routes import Route
from runonce.run.delivery import (
    SCHEDULER_JOB,
    SCHEDULER_TIME,
    Delivery,
    format_schedule_time,
    parse_body,
    parse_delivery,
)
from runonce.run.runner import FAILED_ANSWER
from runonce.schedules import get_zone, parse_schedule
from runonce.stores import RunStore, StoreUnavailable
from runonce.stores.base import FAILED, IN_PROGRESS, RunRecord
from runonce.targets import DispatchRequest, Target, TargetFailed

MAX_FIRE_TIMES = 20_000
"""Most fire times one audit or backfill computes: a minutely route over two weeks. A wider range is
refused with a message that says to narrow it, rather than running for minutes."""
MAX_CATCH_UP_PER_ROUTE = 10
"""Most missed runs of one route that one audit dispatches with `catch_up: all`, oldest first; the
rest are still missed at the next audit, which dispatches the next ten."""
RETENTION_MARGIN = timedelta(seconds=1)
"""The earliest auditable fire time is this much after now − retention: a record claimed at its
fire time expires exactly at fire time + retention, when a store already counts it absent."""

_DURATION = re.compile(r"(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?")  # ASCII digits only
_SECONDS = re.compile(r"[0-9]+")
MAX_DURATION_CHARS = 64
"""A duration is read only up to this length: a longer one is refused before any digit is converted
(Python refuses `int()` of more than 4,300 digits, and no one means a number that long)."""


class RangeRefused(errors.InvalidDelivery):
    """A range the audit or backfill cannot answer truthfully (too old, empty, too wide, in the
    future): refused like any invalid request (400 `invalid`), nothing is claimed. `field` names
    the flag or body field at fault."""


def parse_duration(text: str, field: str) -> timedelta:
    """`90s`, `15m`, `2h`, `7d`, `1h30m`, or a number of seconds; at most ten years."""
    text = text.strip()
    shown = repr(text) if len(text) <= MAX_DURATION_CHARS else f"a value of {len(text)} characters"
    if len(text) > MAX_DURATION_CHARS:
        raise RangeRefused(field, f"{shown} is not a duration (e.g. 90s, 15m, 2h, 7d, 1h30m; at most ten years)")
    if _SECONDS.fullmatch(text):
        seconds = int(text)
    else:
        match = _DURATION.fullmatch(text)
        if not text or match is None:
            raise RangeRefused(field, f"{shown} is not a duration (e.g. 90s, 15m, 2h, 7d, 1h30m)")
        days, hours, minutes, secs = (int(part or 0) for part in match.groups())
        seconds = ((days * 24 + hours) * 60 + minutes) * 60 + secs
    if not 0 < seconds <= 10 * 365 * 86400:
        raise RangeRefused(field, f"{shown} must be more than 0 and at most ten years")
    return timedelta(seconds=seconds)


def body_sha256(payload: Mapping[str, Any]) -> str:
    """The sha256 a delivery with this JSON object body is claimed with (`parse_body`'s)."""
    return parse_body(json.dumps(payload, ensure_ascii=False).encode("utf-8"))[1]


NO_DELIVERY = "no delivery"
"""Why a fire time with no record is missed: no delivery of it reached runonce."""


@dataclass(frozen=True)
class ScheduledRun:
    """One fire time of a route, as the delivery Scheduler would send for it."""

    delivery: Delivery
    zone: ZoneInfo
    why: str | None = None
    """Why the run counts as missed (set by `missing`): no delivery left a record, or its record
    says it `failed`. None for a fire time nobody has judged missed (a backfill's)."""

    @property
    def route(self) -> str:
        return self.delivery.route

    @property
    def time(self) -> datetime:
        assert self.delivery.schedule_time is not None  # pragma: no mutate - built with one
        return self.delivery.schedule_time.astimezone(UTC)

    @property
    def run_id(self) -> str:
        return self.delivery.run_id

    def to_json(self) -> dict[str, Any]:
        body = {
            "route": self.route,
            "job": self.delivery.job,
            "schedule_time": format_schedule_time(self.time),
            "local_time": self.time.astimezone(self.zone).isoformat(),
            "time_zone": self.zone.key,
            "run_id": self.run_id,
        }
        if self.why is not None:
            body["why"] = self.why
        return body

    def line(self) -> str:
        local = self.time.astimezone(self.zone)
        return (
            f"{self.route}  job={self.delivery.job}  {format_schedule_time(self.time)}  "
            f"({local:%Y-%m-%d %H:%M:%S%z} {self.zone.key})  {self.run_id}"
        )


def auditable(routes: Mapping[str, Route]) -> dict[str, Route]:
    """The routes whose fire times have known run_ids: those that name their Scheduler `job`."""
    return {name: route for name, route in routes.items() if route.job is not None}


def scheduled_delivery(name: str, route: Route, time: datetime) -> Delivery:
    """The delivery Scheduler sends for fire time `time`: the route's job and namespace, the
    schedule time header, received on time, through the same parser (so the same run_id)."""
    assert route.job is not None and route.namespace is not None  # pragma: no mutate - Route validates
    headers = {SCHEDULER_JOB: route.job, SCHEDULER_TIME: format_schedule_time(time)}
    namespace = (route.namespace.project, route.namespace.location)
    delivery = parse_delivery(
        name, headers, namespace, received_at=time, forced_run_tolerance=timedelta(0), policy=route.policy
    )
    # Never a force run's retry: that rule rests on Scheduler having one execution of a job
    # outstanding, and a catch-up or backfill is no Scheduler execution. It runs `time`'s own run.
    return replace(delivery, may_be_forced_retry=False)


def scheduled_runs(routes: Mapping[str, Route], start: datetime, end: datetime) -> list[ScheduledRun]:
    """Every fire time in [start, end) of every auditable route, oldest first (the schedule engine's
    DST rules in each route's zone). Refuses more than MAX_FIRE_TIMES."""
    found: list[ScheduledRun] = []
    for name, route in sorted(auditable(routes).items()):
        assert route.schedule is not None  # pragma: no mutate - Route validates
        zone = get_zone(route.time_zone)
        for fire in parse_schedule(route.schedule).iter_after(start - timedelta(seconds=1), zone):
            if fire >= end:
                break
            if fire < start:
                continue
            if len(found) == MAX_FIRE_TIMES:
                raise RangeRefused(
                    "range",
                    f"more than {MAX_FIRE_TIMES} fire times from {format_schedule_time(start)} to "
                    f"{format_schedule_time(end)}; narrow the range (or pick one route)",
                )
            found.append(ScheduledRun(scheduled_delivery(name, route, fire), zone))
    return sorted(found, key=lambda run: (run.time, run.route))


def due_range(
    start: datetime,
    end: datetime,
    now: datetime,
    *,
    lease: timedelta,
    retention: timedelta,
    start_field: str = "from",  # pragma: no mutate - audit passes its own; check_audit drops the refusal
) -> tuple[datetime, datetime]:
    """[start, end) cut to what is due (before now − lease), or `RangeRefused` when it reaches back
    past what the store keeps, or nothing in it is due."""
    earliest = now - retention + RETENTION_MARGIN
    if start < earliest:
        raise RangeRefused(
            start_field,
            f"{format_schedule_time(start)} is older than the store keeps records (RUNONCE_RETENTION_SECONDS="
            f"{retention.total_seconds():g}): a run that did happen may have left no record, so it would be "
            f"reported missed. The earliest auditable time is {format_schedule_time(earliest)}",
        )
    due = now - lease
    end = min(end, due)
    if start >= end:
        raise RangeRefused(
            start_field,
            f"nothing in the range is due: fire times after {format_schedule_time(due)} (now − the lease, "
            f"{lease.total_seconds():g}s) are not due yet (Scheduler may still deliver them); start earlier",
        )
    return start, end


async def missing(store: RunStore, runs: Iterable[ScheduledRun], now: datetime) -> list[ScheduledRun]:
    """The runs that did not happen (in their order), each saying why: no record, or a `failed` one
    (nothing was dispatched: the target refused, or the run waited for the route's previous
    execution, or the route was busy, until Scheduler gave up). `in_progress`, `completed` and
    `skipped` runs are accounted for. Raises `StoreUnavailable`."""
    runs = list(runs)
    records = await store.get_many([run.run_id for run in runs], now)

    def why_missed(run: ScheduledRun) -> str | None:
        record = records.get(run.run_id)
        if record is None:
            return NO_DELIVERY
        if record.status == FAILED:
            return f"failed: {(record.last_error or '').removeprefix(FAILED_ANSWER)}"
        return None

    found = [why_missed(run) for run in runs]
    return [replace(run, why=why) for run, why in zip(runs, found, strict=True) if why is not None]


@dataclass(frozen=True)
class AuditReport:
    start: datetime
    end: datetime
    routes: list[str]
    checked: int
    missed: list[ScheduledRun]

    def to_json(self) -> dict[str, Any]:
        return {
            "from": format_schedule_time(self.start),
            "to": format_schedule_time(self.end),
            "routes": self.routes,
            "checked": self.checked,
            "missed": [run.to_json() for run in self.missed],
        }


async def audit(
    store: RunStore,
    routes: Mapping[str, Route],
    start: datetime,
    end: datetime,
    now: datetime,
    *,
    lease: timedelta,
    retention: timedelta,
    start_field: str = "from",
    progress: Callable[[int], None] | None = None,
) -> AuditReport:
    """The missed runs of `routes` with fire times in [start, end), cut to what is due. `progress`
    is told how many fire times there are, before the store is read."""
    if start >= end:
        raise RangeRefused(
            "to", f"{format_schedule_time(end)} is not after the start of the range {format_schedule_time(start)}"
        )
    start, end = due_range(start, end, now, lease=lease, retention=retention, start_field=start_field)
    runs = scheduled_runs(routes, start, end)
    if progress is not None:
        progress(len(runs))
    return AuditReport(start, end, sorted(auditable(routes)), len(runs), await missing(store, runs, now))


CatchUp = Literal["none", "latest", "all"]


async def catch_up_runs(
    store: RunStore,
    name: str,
    route: Route,
    at: datetime,
    now: datetime,
    *,
    lease: timedelta,
    retention: timedelta,
) -> list[ScheduledRun]:
    """The runs a route's `catch_up` policy dispatches at `at` (the audit's schedule time, or now if
    that is earlier), oldest first, among the fire times due then (before `at` − the lease) and
    inside the window (after `at` − catch_up_window_seconds, default the retention): `latest` the
    route's latest fire time due if it was missed (an older miss is superseded by the newer run
    and is only reported); `all`
    every missed run, at most MAX_CATCH_UP_PER_ROUTE. Never past what the store keeps: there,
    absence would re-run a run that did happen."""
    if route.catch_up == "none":
        return []
    at = min(at, now)  # a future schedule time (a force run of the audit job) catches up to now, never past
    window = catch_up_window(route, retention)
    due = at - lease
    start = max(at - window, now - retention + RETENTION_MARGIN)
    if start >= due:
        return []
    runs = scheduled_runs({name: route}, start, due)
    if route.catch_up == "latest":
        runs = runs[-1:]
    return (await missing(store, runs, now))[:MAX_CATCH_UP_PER_ROUTE]


def catch_up_window(route: Route, retention: timedelta) -> timedelta:
    """How far back a route's catch-up looks: catch_up_window_seconds, by default the retention."""
    return timedelta(seconds=route.catch_up_window_seconds) if route.catch_up_window_seconds else retention


CATCH_UP_WINDOW_MARGIN = timedelta(hours=2)
"""Counted on top of a catch-up window at start-up: a day with a DST change has an hour more."""


def check_catch_up_windows(
    routes: Mapping[str, Route], retention_seconds: float, now: datetime | None = None
) -> list[str]:
    """Start-up errors: a catch-up window the store's retention cannot see to the end of, or one
    holding more fire times than one audit computes (MAX_FIRE_TIMES): every audit would refuse it,
    so the route would never be caught up."""
    now = now or datetime.now(UTC)
    retention = timedelta(seconds=retention_seconds)
    problems = []
    for name, route in sorted(routes.items()):
        window = route.catch_up_window_seconds
        if window is not None and window >= retention_seconds:
            problems.append(
                f"route {name!r}: field 'catch_up_window_seconds': {window} must be below RUNONCE_RETENTION_SECONDS "
                f"({retention_seconds:g}): older runs have no record left, so a catch-up could run them again"
            )
            continue
        if route.catch_up == "none" or route.job is None:
            continue
        span = catch_up_window(route, retention) + CATCH_UP_WINDOW_MARGIN
        try:
            scheduled_runs({name: route}, now - span, now)
        except RangeRefused:
            assert route.schedule is not None  # pragma: no mutate - a route with job has one (Route validates)
            fires = parse_schedule(route.schedule).iter_after(now - span, get_zone(route.time_zone))
            first = next(fires)
            for _ in range(MAX_FIRE_TIMES - 1):
                last = next(fires)
            fits = int((last - first - CATCH_UP_WINDOW_MARGIN).total_seconds())
            given = "catch_up_window_seconds" if window is not None else "the default, RUNONCE_RETENTION_SECONDS"
            problems.append(
                f"route {name!r}: field 'catch_up_window_seconds': the catch-up window ({given}: "
                f"{catch_up_window(route, retention).total_seconds():g}s) holds more than {MAX_FIRE_TIMES} fire times "
                f"of {route.schedule!r}, more than one audit computes, so the route would never be caught up; "
                f"set catch_up_window_seconds to at most {fits}"
            )
    return problems


def audit_window(
    at: datetime, now: datetime, since: timedelta, *, lease: timedelta, retention: timedelta
) -> tuple[datetime, datetime]:
    """What the audit run scheduled at `at` reports: [A − lease − since, A − lease), A being `at`
    or now if that is earlier (a force run of the audit job carries a future schedule time: it
    audits up to now, never past), and never older than the store keeps (a late retry of an old
    audit reports what the store still knows, never a false miss)."""
    end = min(at, now) - lease
    return max(end - since, now - retention + RETENTION_MARGIN), end


def check_audit(
    routes: Mapping[str, Route],
    at: datetime,
    now: datetime,
    since: timedelta,
    *,
    lease: timedelta,
    retention: timedelta,
) -> None:
    """Refuse, before the audit's run is claimed, an audit that could not be computed (more fire
    times than MAX_FIRE_TIMES): `RangeRefused` naming `body.since`. A range with nothing due passes
    (the audit then reports nothing, truthfully)."""
    start, end = audit_window(at, now, since, lease=lease, retention=retention)
    if start >= end:  # pragma: no mutate - an empty range: due_range refuses it too, which returns below
        return
    try:
        start, end = due_range(start, end, now, lease=lease, retention=retention)
    except RangeRefused:
        return
    try:
        scheduled_runs(routes, start, end)
    except RangeRefused as exc:
        raise RangeRefused("body.since", exc.reason) from exc


AUDIT_ROUTE = "_audit"
"""The route name the audit's own runs are keyed and recorded under. No configured route can have
it (route names start with a letter or digit), so no delivery of a route shares an audit's run_id."""
DEFAULT_SINCE = timedelta(minutes=10)
"""What one audit run reports by default: the period of the audit job that deploy/ and terraform/
create, so that every fire time is reported by exactly one audit."""

UNRESOLVED_AFTER_LEASES = 3
"""The audit reports a run still `in_progress` when its latest attempt began this many leases ago:
its lease ran out long enough ago that a retry would have taken it over, had one come."""
UNRESOLVED_LIMIT = 200
"""Most unresolved runs one audit reports (the oldest are the newest list's last: it reads no more)."""

logger = logging.getLogger("runonce.audit")


async def unresolved_runs(store: RunStore, now: datetime, lease: timedelta) -> list[RunRecord]:
    """Runs still `in_progress` whose latest attempt began UNRESOLVED_AFTER_LEASES leases ago or
    more, oldest first: an attempt crashed, or its outcome is unknown, and no retry took it over."""
    found = await store.list(now, status=IN_PROGRESS, limit=UNRESOLVED_LIMIT)
    cutoff = now - UNRESOLVED_AFTER_LEASES * lease
    return sorted((r for r in found if r.updated_at <= cutoff and r.lease_expires <= now), key=lambda r: r.updated_at)


def audit_since(payload: Mapping[str, Any]) -> timedelta:
    """The body of an audit delivery: `{}` or `{"since": DURATION}` (its job's period). Raises
    `RangeRefused` naming the field."""
    unknown = sorted(set(payload) - {"since"})
    if unknown:
        raise RangeRefused(f"body.{unknown[0]}", "unknown field; an audit's body takes only 'since' (e.g. \"10m\")")
    since = payload.get("since")
    if since is None:
        return DEFAULT_SINCE
    if not isinstance(since, str):
        raise RangeRefused("body.since", 'must be a duration string such as "10m"')
    return parse_duration(since, "body.since")


class AuditTarget(Target):
    """The audit as the target of its own scheduled run (route `_audit`): the Runner claims the audit
    job's delivery like any other, so a duplicated or retried audit replays instead of reporting
    twice. Dispatching it reports the missed runs whose fire times are in [S − lease − since,
    S − lease), S being the audit's schedule time: consecutive audits every `since` report each fire
    time once. Each missed run gets one ERROR line (`outcome: "missed"`) and counts in
    `runonce_missed_runs_total{route}`. The report is kept in `reports` for the endpoint to show."""

    type = "audit"

    def __init__(
        self,
        store: RunStore,
        routes: Mapping[str, Route],
        *,
        lease: timedelta,
        retention: timedelta,
        clock: Callable[[], datetime],
        metrics: Metrics,
    ):
        self.store, self.routes, self.lease, self.retention = store, auditable(routes), lease, retention
        self.clock, self.metrics = clock, metrics
        self.reports: dict[str, AuditReport] = {}

    async def dispatch(self, request: DispatchRequest) -> str:
        assert request.schedule_time is not None  # pragma: no mutate - an audit delivery is keyed by one
        at = datetime.fromisoformat(request.schedule_time.replace("Z", "+00:00"))
        now = self.clock()
        since = audit_since(request.payload)
        start, end = audit_window(at, now, since, lease=self.lease, retention=self.retention)
        if start >= end:  # a late retry of an audit older than the store keeps
            return (
                f"audit: nothing to report (its range ends at {format_schedule_time(end)}, before the store's records)"
            )
        try:
            report = await audit(self.store, self.routes, start, end, now, lease=self.lease, retention=self.retention)
            stuck = await unresolved_runs(self.store, now, self.lease)  # read before anything is logged
        except RangeRefused as exc:  # nothing due in that range (a force run of the audit job, say)
            return f"audit: nothing to report ({exc.reason})"
        except StoreUnavailable as exc:
            raise TargetFailed(f"audit: the claim store did not answer ({exc}); nothing was reported") from exc
        for run in report.missed:
            logger.error(
                "missed run %s of route %s at %s: %s",
                run.run_id,
                run.route,
                run.to_json()["schedule_time"],
                run.why,
                extra={
                    "fields": {
                        "outcome": "missed",
                        **run.to_json(),
                        logs.LABELS: {"run_id": run.run_id, "route": run.route},
                    }
                },
            )
            self.metrics.missed_runs.labels(run.route).inc()
        self._report_unresolved(stuck, now)
        self.reports[request.run_id] = report
        return (
            f"audit/{format_schedule_time(report.start)}/{format_schedule_time(report.end)}: "
            f"{len(report.missed)} missed of {report.checked}"
        )

    def _report_unresolved(self, stuck: list[RunRecord], now: datetime) -> None:
        """One WARNING line (`outcome: "unresolved"`) per run left `in_progress` (`unresolved_runs`),
        every audit while it stays so: what the unresolved-runs alert counts."""
        for record in stuck:
            age = int((now - record.updated_at).total_seconds())
            logger.warning(
                "unresolved run %s of route %s: in_progress for %ds since its latest attempt",
                record.run_id,
                record.route,
                age,
                extra={
                    "fields": {
                        "outcome": "unresolved",
                        "run_id": record.run_id,
                        "route": record.route,
                        "status": record.status,
                        "age_seconds": age,
                        "attempts": record.attempts,
                        "schedule_time": record.schedule_time,
                        logs.LABELS: {"run_id": record.run_id, "route": record.route},
                    }
                },
            )
