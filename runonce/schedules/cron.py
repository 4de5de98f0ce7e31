"""Cloud Scheduler's unix-cron dialect, parsed strictly and evaluated in any time zone.

Accepted exactly as Cloud Scheduler documents it: five fields (minute hour day-of-month month
day-of-week); `*`, values, ranges `a-b`, lists `a,b`, steps `*/n` and `a-b/n`; month names JAN–DEC
and weekday names SUN–SAT (any case is accepted; `runonce lint` warns about lower case); 0 and 7
are both Sunday. Rejected with the field and the character named: `L`, `W`, `#`, `?`, `@daily`-style
macros, a seconds or year field, a step on a single value (`5/15`), a step of 0 or larger than the
field's largest value, reversed ranges, and a day-of-month that no selected month has.

Day of month and day of week: when both are restricted they combine with OR (either matches).
As in Vixie/Debian cron (and cronsim), a field *starting with* `*` counts as unrestricted, so
`*/2` in one of them makes the combination AND.

DST rule (Vixie/Debian cron's, stated in `CronSchedule.dst_rule_text`):
- a *fixed-time* job (neither the minute nor the hour field starts with `*`, e.g. `30 2 * * *`):
  a fire time the clock skips runs once, at the transition (02:30 on a 02:00→03:00 night runs at
  03:00); a fire time the clock shows twice runs once, in the first pass.
- a *wildcard* job (minute or hour field starts with `*`, e.g. `*/15 * * * *`): follows the wall
  clock — fire times in a skipped interval do not run, those in a repeated interval run in both
  passes.
The engine is our own (cronsim's fixed-time evaluation returns a time before the start instant
when the start is in the second pass of a repeated hour); cronsim is the reference in tests.
"""

from __future__ import annotations

import bisect
import calendar
from dataclasses import dataclass

from runonce.schedules.base import DstRule, WallSchedule
from runonce.schedules.errors import ScheduleError
from runonce.schedules.zones import wall_fields, wall_seconds

MONTH_NAMES = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAY_NAMES = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
_LEAP_MONTH_DAYS = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]

_UNSUPPORTED = {
    "L": "'L' (last day) is not supported by Cloud Scheduler",
    "W": "'W' (nearest weekday) is not supported by Cloud Scheduler",
    "#": "'#' (nth weekday of the month) is not supported by Cloud Scheduler; a groc schedule "
    "('2nd monday of month 09:00') can say it",
    "?": "'?' is not supported by Cloud Scheduler; use '*'",
    "H": "'H' (hashed value) is not supported by Cloud Scheduler",
}


@dataclass(frozen=True)
class FieldSpec:
    name: str
    low: int
    high: int  # the largest value written (7 for day-of-week)
    star_high: int  # what '*' covers (6 for day-of-week)
    names: list[str] | None = None


FIELDS = [
    FieldSpec("minute", 0, 59, 59),
    FieldSpec("hour", 0, 23, 23),
    FieldSpec("day-of-month", 1, 31, 31),
    FieldSpec("month", 1, 12, 12, MONTH_NAMES),
    FieldSpec("day-of-week", 0, 7, 6, DAY_NAMES),
]


@dataclass(frozen=True)
class ParsedField:
    values: frozenset[int]
    starts_with_star: bool
    lower_case_names: bool


def _fail(spec: FieldSpec, text: str, reason: str) -> ScheduleError:
    return ScheduleError(spec.name, reason, text)


def _value(spec: FieldSpec, text: str, token: str) -> tuple[int, bool]:
    """(value, written in lower case)."""
    if token.isdigit():
        value = int(token)
        if not spec.low <= value <= spec.high:
            raise _fail(spec, text, f"{value} is out of range {spec.low}-{spec.high}")
        return value, False
    if token.isalpha():
        upper = token.upper()
        if spec.names and upper in spec.names:
            return spec.names.index(upper) + (1 if spec.name == "month" else 0), token != upper
        if len(token) <= 2 and upper[0] in _UNSUPPORTED:  # L, W, LW, H
            raise _fail(spec, text, _UNSUPPORTED[upper[0]])
        if spec.names:
            raise _fail(spec, text, f"unknown name {token!r} (use {spec.names[0]}-{spec.names[-1]} or numbers)")
        raise _fail(spec, text, f"names are not allowed in the {spec.name} field; use numbers {spec.low}-{spec.high}")
    # Mixed: the first character that does not belong (5L, 15W, MON#2, 1.5).
    if token[:1].isdigit():
        bad = next(c for c in token if not c.isdigit())
    else:
        bad = next((c for c in token if not c.isalpha()), token[:1])
    raise _fail(spec, text, _UNSUPPORTED.get(bad.upper(), f"unexpected character {bad!r}"))


def parse_field(spec: FieldSpec, text: str) -> ParsedField:
    values: set[int] = set()
    lower = False
    for item in text.split(","):
        if not item:
            raise _fail(spec, text, "empty list item")
        step = 1
        base = item
        if "/" in item:
            base, step_text = item.split("/", 1)
            if not step_text.isdigit():
                raise _fail(spec, text, f"step {step_text!r} is not a positive number")
            step = int(step_text)
            if step == 0:
                raise _fail(spec, text, "a step of 0 never advances")
            if step > spec.high:
                raise _fail(spec, text, f"step {step} is larger than the field's largest value {spec.high}")
            if base != "*" and "-" not in base:
                raise _fail(spec, text, f"a step needs a range or '*' ('{base}-{spec.star_high}/{step}')")
        if base == "*":
            start, end = spec.low, spec.star_high
        elif "-" in base:
            first, _, last = base.partition("-")
            if not first or not last:
                raise _fail(spec, text, f"range {base!r} needs a start and an end")
            start, low1 = _value(spec, text, first)
            end, low2 = _value(spec, text, last)
            lower = lower or low1 or low2
            if start > end:
                raise _fail(spec, text, f"range {base!r} runs backwards; the first value must come first")
        else:
            start, low1 = _value(spec, text, base)
            lower = lower or low1
            end = start
        values.update(range(start, end + 1, step))
    if spec.name == "day-of-week" and 7 in values:
        values.discard(7)
        values.add(0)
    return ParsedField(frozenset(values), text.startswith("*"), lower)


class CronSchedule(WallSchedule):
    kind = "unix-cron"
    header_guaranteed = True

    def __init__(self, text: str):
        super().__init__(text)
        parts = text.split()
        if len(parts) == 1 and parts[0].startswith("@"):
            raise ScheduleError(
                "schedule",
                f"{parts[0]!r}: macros are not supported by Cloud Scheduler; write 5 fields (e.g. '0 0 * * *')",
            )
        if len(parts) != 5:
            extra = " (no seconds or year field)" if len(parts) in (6, 7) else ""
            raise ScheduleError(
                "schedule",
                f"{text!r} has {len(parts)} field(s); unix-cron takes 5: minute hour day-of-month month "
                f"day-of-week{extra}",
            )
        parsed = [parse_field(spec, part) for spec, part in zip(FIELDS, parts, strict=True)]
        minute, hour, dom, month, dow = parsed
        self.fields = parts
        self.lower_case_names = month.lower_case_names or dow.lower_case_names
        self.minutes = sorted(minute.values)
        self.hours = sorted(hour.values)
        self.days = dom.values
        self.months = sorted(month.values)
        self._month_set = month.values
        self.weekdays = dow.values
        self.dom_star, self.dow_star = dom.starts_with_star, dow.starts_with_star
        # Vixie cron: either day field starting with '*' makes the pair AND, else OR.
        self.day_and = self.dom_star or self.dow_star
        self.fixed_time = not minute.starts_with_star and not hour.starts_with_star
        self.rule = DstRule(shift_skipped=self.fixed_time, repeat_folded=not self.fixed_time)
        self.star_step_day_field = (parts[2].startswith("*/") and not dow.starts_with_star) or (
            parts[4].startswith("*/") and not dom.starts_with_star
        )
        if self.day_and:
            longest = max(_LEAP_MONTH_DAYS[m - 1] for m in self.months)
            if min(self.days) > longest:
                names = ",".join(MONTH_NAMES[m - 1] for m in self.months)
                raise ScheduleError("day-of-month", f"day {min(self.days)} never occurs in {names}", parts[2])
        self._day_cache: dict[tuple[int, int], list[int]] = {}

    @property
    def dst_rule_text(self) -> str:
        if self.fixed_time:
            return (
                "fixed-time unix-cron job: a fire time the clock skips runs once at the transition; "
                "one the clock shows twice runs once, in the first pass"
            )
        return (
            "wildcard unix-cron job (minute or hour starts with '*'): follows the wall clock; fire "
            "times in a skipped interval do not run, those in a repeated interval run in both passes"
        )

    def _days(self, year: int, month: int) -> list[int]:
        key = (year, month)
        found = self._day_cache.get(key)
        if found is None:
            first_weekday, length = calendar.monthrange(year, month)  # Monday = 0
            found = []
            for day in range(1, length + 1):
                dom_ok = day in self.days
                dow_ok = (first_weekday + day) % 7 in self.weekdays  # Sunday = 0
                if (dom_ok and dow_ok) if self.day_and else (dom_ok or dow_ok):
                    found.append(day)
            if len(self._day_cache) > 4096:
                self._day_cache.clear()
            self._day_cache[key] = found
        return found

    def next_wall(self, wall: int) -> int | None:
        y, m, d, h, mi = wall_fields(wall)
        months, hours, minutes = self.months, self.hours, self.minutes
        last_year = y + 60
        while y <= last_year:
            if m not in self._month_set:
                i = bisect.bisect_left(months, m)
                if i == len(months):
                    y, m = y + 1, months[0]
                else:
                    m = months[i]
                d, h, mi = 1, 0, 0
            days = self._days(y, m)
            i = bisect.bisect_left(days, d)
            if i == len(days):
                y, m = (y + 1, 1) if m == 12 else (y, m + 1)
                d, h, mi = 1, 0, 0
                continue
            if days[i] != d:
                d, h, mi = days[i], 0, 0
            i = bisect.bisect_left(hours, h)
            if i == len(hours):
                d, h, mi = d + 1, 0, 0
                continue
            if hours[i] != h:
                h, mi = hours[i], 0
            i = bisect.bisect_left(minutes, mi)
            if i == len(minutes):
                h, mi = h + 1, 0
                continue
            return wall_seconds(y, m, d, h, minutes[i])
        return None

    def prev_wall(self, wall: int) -> int | None:
        y, m, d, h, mi = wall_fields(wall)
        months, hours, minutes = self.months, self.hours, self.minutes
        first_year = y - 60
        while y >= first_year:
            if m not in self._month_set:
                i = bisect.bisect_right(months, m) - 1
                if i < 0:
                    y, m = y - 1, months[-1]
                else:
                    m = months[i]
                d, h, mi = calendar.monthrange(y, m)[1], 23, 59
            days = self._days(y, m)
            i = bisect.bisect_right(days, d) - 1
            if i < 0:
                y, m = (y - 1, 12) if m == 1 else (y, m - 1)
                d, h, mi = calendar.monthrange(y, m)[1], 23, 59
                continue
            if days[i] != d:
                d, h, mi = days[i], 23, 59
            i = bisect.bisect_right(hours, h) - 1
            if i < 0:
                d, h, mi = d - 1, 23, 59
                continue
            if hours[i] != h:
                h, mi = hours[i], 59
            i = bisect.bisect_right(minutes, mi) - 1
            if i < 0:
                h, mi = h - 1, 59
                continue
            return wall_seconds(y, m, d, h, minutes[i])
        return None
