"""`runonce schedule next`: the schedule engine on the command line.

Registered in `runonce/cli.py` with `main.add_command(schedule)`; `runonce lint`, which also reads the
routes and settings, lives in `runonce/cli.py` and `runonce/lint.py`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import click

from runonce.schedules import Schedule, ScheduleError, get_zone, parse_schedule

FIRST_SCHEDULED = datetime(1970, 1, 1, tzinfo=UTC)
LAST_SCHEDULED = datetime(9999, 1, 1, tzinfo=UTC)
"""The schedule times runonce accepts, [1970, 9999): the delivery parser's EARLIEST_ and
LATEST_SCHEDULE_TIME (this leaf cannot import it; a test holds them equal)."""


GROC_NOTE = "note: groc schedule: Cloud Scheduler does not guarantee X-CloudScheduler-ScheduleTime for it"

MAX_NUMBER_CHARS = 20
"""A flag's number or timestamp is read only up to this many characters (64-bit integers fit)."""


class AsciiIntRange(click.IntRange):
    """click's IntRange, in ASCII digits only: `int()` also takes `1_000` and other scripts' digits."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and len(value.strip()) > MAX_NUMBER_CHARS:  # bounded before int()
            self.fail(
                f"a value of {len(value.strip())} characters is not in the range {self._describe_range()}", param, ctx
            )
        if isinstance(value, str) and not re.fullmatch(r"[-+]?[0-9]+", value.strip()):
            self.fail(f"{value!r} is not a whole number in ASCII digits", param, ctx)
        return super().convert(value, param, ctx)


class ScheduleType(click.ParamType):
    """A unix-cron or groc schedule; a bad one exits 2 naming the field at fault."""

    name = "schedule"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Schedule:
        if isinstance(value, Schedule):
            return value
        try:
            return parse_schedule(value)
        except ScheduleError as exc:
            self.fail(str(exc), param, ctx)


class TimeZoneType(click.ParamType):
    name = "zone"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> ZoneInfo:
        if isinstance(value, ZoneInfo):
            return value
        try:
            return get_zone(value)
        except ScheduleError as exc:
            self.fail(exc.reason, param, ctx)


class InstantType(click.ParamType):
    """An RFC 3339 timestamp with an offset: 2026-03-08T06:00:00Z, 2026-03-08T01:00:00-05:00."""

    name = "rfc3339"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        if len(value) > 40:  # the longest RFC 3339 form is 35 characters
            self.fail(f"a value of {len(value)} characters is not an RFC 3339 timestamp", param, ctx)
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            self.fail(f"{value!r} is not an RFC 3339 timestamp (e.g. 2026-03-08T06:00:00Z)", param, ctx)
        if parsed.tzinfo is None:
            self.fail(f"{value!r} has no offset; add Z or ±HH:MM", param, ctx)
        return parsed


def _until_the_last_scheduled(expr: Schedule, start: datetime, zone: ZoneInfo) -> Iterator[datetime | None]:
    """The fire times after `start`, then None if the schedule goes on past `LAST_SCHEDULED` (the
    calendar itself ends in 9999: computing a fire time after it raises)."""
    fires = expr.iter_after(start, zone)
    while True:
        try:
            fire = next(fires)
        except StopIteration:
            return
        except (ValueError, OverflowError):  # year 10000
            yield None
            return
        if fire >= LAST_SCHEDULED:
            yield None
            return
        yield fire


@click.group()
def schedule() -> None:
    """Evaluate Cloud Scheduler schedules (unix-cron or groc) in any time zone."""


@schedule.command("next")
@click.argument("expr", type=ScheduleType())
@click.option(
    "--tz",
    "zone",
    type=TimeZoneType(),
    default="UTC",
    show_default=True,
    help="tz database zone the job runs in (the Job's timeZone).",
)
@click.option("--after", type=InstantType(), default=None, help="Start after this instant  [default: now]")
@click.option("--count", type=AsciiIntRange(1, 10000), default=5, show_default=True)
def schedule_next(expr: Schedule, zone: ZoneInfo, after: datetime | None, count: int) -> None:
    """Print the next COUNT fire times of EXPR, one RFC 3339 line each in the zone's offset.

    A fire time at a skipped or ambiguous local time (DST) is flagged after `#`; fire times the
    clock skips and that do not run are listed on `#` lines of their own.
    """
    start = after or datetime.now(UTC)
    if start >= LAST_SCHEDULED:
        raise click.BadParameter(
            f"runonce schedules nothing at or after {LAST_SCHEDULED:%Y-%m-%dT%H:%M:%SZ}", param_hint="--after"
        )
    if start < FIRST_SCHEDULED:
        click.echo(f"note: runonce schedules from {FIRST_SCHEDULED:%Y-%m-%dT%H:%M:%SZ}; starting there", err=True)
        start = FIRST_SCHEDULED - timedelta(microseconds=1)
    if not expr.header_guaranteed:
        click.echo(GROC_NOTE, err=True)
        click.echo(f"note: DST: {expr.dst_rule_text}", err=True)
    shown, previous, past_the_end = 0, start, False
    for fire in _until_the_last_scheduled(expr, start, zone):
        if fire is None:
            past_the_end = True
            break
        note = expr.note(fire, zone)
        if not (note and note.startswith("skipped")):
            # Fire times the clock skipped since the previous line, and that do not run.
            for finding in expr.dst_findings(zone, previous + timedelta(seconds=1), fire + timedelta(seconds=1)):
                if finding.kind == "skipped":
                    click.echo(f"# {finding.message()}")
        click.echo(fire.isoformat() + (f"  # {note}" if note else ""))
        shown, previous = shown + 1, fire
        if shown == count:
            break
    if past_the_end:
        click.echo(
            f"note: {shown} fire time(s) before {LAST_SCHEDULED:%Y-%m-%dT%H:%M:%SZ}, the end of the times runonce "
            "schedules (a delivery for a later one is refused)",
            err=True,
        )
    elif shown < count:
        click.echo(f"note: {expr.text!r} fires only {shown} more time(s)", err=True)
