"""groc, App Engine's English-like schedules ("every 5 minutes", "first sunday of month 12:00").

Cloud Scheduler accepts groc as well as unix-cron; it does not guarantee the
`X-CloudScheduler-ScheduleTime` header for groc jobs. The grammar and the evaluation follow Google's
own implementation (`google.appengine.cron.groctimespecification`, the oracle of our differential
test), with one addition: Cloud Scheduler's documented `every minute` (= `every 1 minutes`).

    specific  := ( (ordinals weekdays | monthdays) "of" (months | quarter) | ordinals weekdays ) HH:MM
    interval  := "every" N ("hours" | "mins" | "minutes") ["from" HH:MM "to" HH:MM | "synchronized"]
                 ["on" weekdays]
    ordinals  := "every" | ordinal ("," ordinal)*      ordinal := 1st|first|2nd|second|…|5th|fifth
    weekdays  := "day" | weekday ("," weekday)*       weekday := mon|monday|…|sun|sunday
    monthdays := N ("," N)*                           months  := "month" | month ("," month)*
    quarter   := "quarter" | (first|second|third) ("," …)* "month of quarter"

Three evaluations, three DST rules (stated in each class's `dst_rule_text`):
- specific times ("every day 02:30"): a skipped local time does not run that day; a repeated one
  runs twice (both passes).
- intervals with a window ("every 2 hours from 08:00 to 18:00", "every 5 minutes synchronized" =
  00:00–23:59): runs are spaced by *elapsed* time from the window start, so after a transition
  inside the window they land on shifted clock readings (New York, spring: 00:00, 03:00, 05:00 …);
  a window boundary in a skipped interval moves to the first minute after it, one in a repeated
  interval means its first pass.
- plain intervals ("every 5 minutes"): elapsed time, unaffected by DST. Google counts them from the
  previous run, so `next_after(t)` counts from `t`. `latest_at_or_before` (runonce's *snap*) uses a
  fixed grid instead: multiples of the interval since 1970-01-01T00:00Z (every 5 minutes → :00, :05,
  … UTC); the job's real phase is unknown, which is why lint recommends `synchronized` or unix-cron.
"""

from __future__ import annotations

import bisect
import calendar
import re
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from runonce.schedules.base import DstFinding, DstRule, Schedule, WallSchedule, floor_minute
from runonce.schedules.errors import ScheduleError
from runonce.schedules.zones import (
    Timeline,
    Transition,
    describe_wall,
    from_instant,
    timeline,
    to_instant,
    wall_datetime,
    wall_fields,
    wall_seconds,
)

ALL_ORDINALS = frozenset({1, 2, 3, 4, 5})
ALL_WEEKDAYS = frozenset(range(7))  # groc: Sunday = 0
ALL_MONTHS = frozenset(range(1, 13))

_WEEKDAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
_MONTHS = {
    name: i + 1
    for i, name in enumerate(["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"])
}
_ORDINALS = {
    "1st": 1,
    "first": 1,
    "2nd": 2,
    "second": 2,
    "3rd": 3,
    "third": 3,
    "4th": 4,
    "fourth": 4,
    "5th": 5,
    "fifth": 5,
}

# The lexer's tokens (App Engine's Groc.g); at each position the longest match wins.
_TOKENS: list[tuple[str, str]] = [
    ("TIME", r"(?:[01][0-9]|2[0-3]|[0-9]):[0-5][0-9]"),
    ("SYNCHRONIZED", r"synchronized"),
    ("ORDINAL", r"1st|first|2nd|second|3rd|third|4th|fourth|5th|fifth"),
    ("DAY", r"day"),
    ("WEEKDAY", r"mon(?:day)?|tue(?:sday)?|wed(?:nesday)?|thu(?:rsday)?|fri(?:day)?|sat(?:urday)?|sun(?:day)?"),
    (
        "MONTHNAME",
        r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|jun(?:e)?|jul(?:y)?|aug(?:ust)?"
        r"|sep(?:tember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?",
    ),
    ("MONTH", r"month"),
    ("QUARTER", r"quarter"),
    ("EVERY", r"every"),
    ("HOURS", r"hours"),
    ("MINUTES", r"mins|minutes"),
    ("COMMA", r","),
    ("OF", r"of"),
    ("FROM", r"from"),
    ("TO", r"to"),
    ("ON", r"on"),
    ("NUMBER", r"[0-9]{1,5}"),
]
_COMPILED = [(kind, re.compile(pattern)) for kind, pattern in _TOKENS]
_SPACE = re.compile(r"[ \t\r\n]+")
_EVERY_MINUTE = re.compile(r"^\s*every\s+minute\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    pos: int


def tokenize(text: str) -> list[Token]:
    source = text.lower()
    tokens, pos = [], 0
    while pos < len(source):
        space = _SPACE.match(source, pos)
        if space:
            pos = space.end()
            continue
        best: tuple[str, str] | None = None
        for kind, pattern in _COMPILED:
            match = pattern.match(source, pos)
            if match and (best is None or len(match.group()) > len(best[1])):
                best = (kind, match.group())
        if best is None:
            raise ScheduleError("groc", f"unexpected {text[pos : pos + 12]!r} at character {pos + 1}")
        tokens.append(Token(best[0], best[1], pos))
        pos += len(best[1])
    tokens.append(Token("EOF", "", len(source)))
    return tokens


@dataclass
class _Parsed:
    """The parser's result, with the same sets Google's parser fills in."""

    ordinals: set[int]
    weekdays: set[int]
    months: set[int]
    monthdays: set[int]
    time: str = ""
    interval: int = 0
    period: str = ""
    synchronized: bool = False
    start: str = ""
    end: str = ""


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.p = _Parsed(set(), set(), set(), set())

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def fail(self, expected: str) -> ScheduleError:
        tok = self.tok
        found = "the end" if tok.kind == "EOF" else repr(self.text[tok.pos : tok.pos + len(tok.text)])
        return ScheduleError("groc", f"expected {expected} at character {tok.pos + 1}, found {found}")

    def take(self, kind: str, expected: str) -> Token:
        tok = self.tok
        if tok.kind != kind:
            raise self.fail(expected)
        self.i += 1
        return tok

    def parse(self) -> _Parsed:
        first, second = self.tok, self.tokens[min(self.i + 1, len(self.tokens) - 1)]
        if first.kind == "EVERY" and second.kind == "NUMBER":
            self.interval()
        elif (first.kind == "EVERY" and second.kind in ("DAY", "WEEKDAY")) or first.kind in ("NUMBER", "ORDINAL"):
            self.specific()
        elif first.kind == "EVERY":
            self.i += 1
            raise self.fail("a number ('every 5 minutes'), 'day' or a weekday")
        else:
            raise self.fail("'every', an ordinal (1st, first …) or a day of the month")
        self.take("EOF", "the end of the schedule")
        return self.p

    def specific(self) -> None:
        if self.tok.kind == "NUMBER":
            self.monthdays()
            self.take("OF", "'of'")
            self.month_or_quarter()
        else:
            self.ordinals()
            self.weekdays()
            if self.tok.kind == "OF":
                self.i += 1
                self.month_or_quarter()
            else:
                self.p.months = set(ALL_MONTHS)
        self.p.time = self.take("TIME", "a time of day HH:MM (00:00-23:59)").text

    def interval(self) -> None:
        self.take("EVERY", "'every'")
        self.p.interval = int(self.take("NUMBER", "a number").text)
        tok = self.tok
        if tok.kind not in ("HOURS", "MINUTES"):
            raise self.fail("'hours', 'mins' or 'minutes'")
        self.i += 1
        self.p.period = "hours" if tok.kind == "HOURS" else "minutes"
        if self.tok.kind == "FROM":
            self.i += 1
            self.p.start = self.take("TIME", "a start time HH:MM").text
            self.take("TO", "'to'")
            self.p.end = self.take("TIME", "an end time HH:MM").text
        elif self.tok.kind == "SYNCHRONIZED":
            self.i += 1
            self.p.synchronized = True
        if self.tok.kind == "ON":
            self.i += 1
            self.weekdays()

    def ordinals(self) -> None:
        if self.tok.kind == "EVERY":
            self.i += 1
            return
        while True:
            self.p.ordinals.add(_ORDINALS[self.take("ORDINAL", "an ordinal (1st, first … 5th, fifth) or 'every'").text])
            if self.tok.kind != "COMMA":
                return
            self.i += 1

    def weekdays(self) -> None:
        if self.tok.kind == "DAY":
            self.i += 1
            if self.p.ordinals:  # "1st,3rd day of month" names days of the month
                self.p.monthdays, self.p.ordinals = self.p.ordinals, set()
            else:
                self.p.ordinals, self.p.weekdays = set(ALL_ORDINALS), set(ALL_WEEKDAYS)
            return
        while True:
            self.p.weekdays.add(_WEEKDAYS[self.take("WEEKDAY", "'day' or a weekday (mon … sun)").text[:3]])
            if self.tok.kind != "COMMA":
                break
            self.i += 1
        if not self.p.ordinals:
            self.p.ordinals = set(ALL_ORDINALS)

    def monthdays(self) -> None:
        while True:
            self.p.monthdays.add(int(self.take("NUMBER", "a day of the month").text))
            if self.tok.kind != "COMMA":
                return
            self.i += 1

    def month_or_quarter(self) -> None:
        tok = self.tok
        if tok.kind == "MONTH":
            self.i += 1
            self.p.months |= ALL_MONTHS
        elif tok.kind == "MONTHNAME":
            while True:
                self.p.months.add(_MONTHS[self.take("MONTHNAME", "a month name").text[:3]])
                if self.tok.kind != "COMMA":
                    break
                self.i += 1
        elif tok.kind == "QUARTER":
            self.i += 1
            self.p.months |= {1, 4, 7, 10}
        elif tok.kind == "ORDINAL" and _ORDINALS[tok.text] <= 3:
            while True:
                offset = _ORDINALS[self.take("ORDINAL", "first, second or third").text] - 1
                if offset > 2:
                    self.i -= 1
                    raise self.fail("first, second or third (month of the quarter)")
                self.p.months |= {1 + offset, 4 + offset, 7 + offset, 10 + offset}
                if self.tok.kind != "COMMA":
                    break
                self.i += 1
            self.take("MONTH", "'month'")
            self.take("OF", "'of'")
            self.take("QUARTER", "'quarter'")
        else:
            raise self.fail("'month', month names, 'quarter' or 'first/second/third month of quarter'")


def parse_groc(text: str) -> Schedule:
    """A groc schedule, validated as Google's implementation validates it."""
    if _EVERY_MINUTE.match(text):
        return IntervalSchedule(text, 60, frozenset(), None, None, synchronized=False)
    p = _Parser(text).parse()
    if p.period:
        if p.interval < 1:
            raise ScheduleError("groc", "the interval must be at least 1")
        seconds = p.interval * (3600 if p.period == "hours" else 60)
        weekdays = frozenset(p.weekdays) if p.weekdays and len(p.weekdays) < 7 else frozenset()
        if weekdays and seconds > 86400:
            raise ScheduleError("groc", "'on <weekdays>' only works with intervals of 24 hours or less")
        if p.synchronized and (seconds > 86400 or 86400 % seconds):
            raise ScheduleError(
                "groc",
                f"'synchronized' needs an interval that divides 24 hours evenly; {p.interval} {p.period} does not",
            )
        start = end = None
        if p.synchronized:
            start, end = (0, 0), (23, 59)
        elif p.start:
            start, end = _hhmm(p.start), _hhmm(p.end)
        return IntervalSchedule(text, seconds, weekdays, start, end, synchronized=p.synchronized)
    if p.monthdays:
        if min(p.monthdays) < 1:
            raise ScheduleError("groc", "day of month must be 1 or more")
        if max(p.monthdays) > 31:
            raise ScheduleError("groc", f"day of month {max(p.monthdays)} is more than 31")
        if not any(min(p.monthdays) <= calendar.monthrange(2024, m)[1] for m in p.months):
            raise ScheduleError("groc", f"day {min(p.monthdays)} never occurs in the months named")
    return SpecificTimeSchedule(
        text,
        frozenset(p.ordinals),
        frozenset(p.weekdays),
        frozenset(p.months),
        frozenset(p.monthdays),
        _hhmm(p.time),
    )


def _hhmm(text: str) -> tuple[int, int]:
    hours, minutes = text.split(":")
    return int(hours), int(minutes)


class SpecificTimeSchedule(WallSchedule):
    """ "first sunday of month 12:00", "every mon,wed 09:00", "1,15 of month 08:30"."""

    kind = "groc"
    header_guaranteed = False
    rule = DstRule(shift_skipped=False, repeat_folded=True)
    dst_rule_text = "a local time the clock skips does not run that day; one it shows twice runs twice (both passes)"

    def __init__(
        self,
        text: str,
        ordinals: frozenset[int],
        weekdays: frozenset[int],
        months: frozenset[int],
        monthdays: frozenset[int],
        time: tuple[int, int],
    ):
        super().__init__(text)
        self.ordinals, self.weekdays, self.monthdays = ordinals, weekdays, monthdays
        self.months = sorted(months)
        self._month_set = months
        self.hour, self.minute = time
        self._time_of_day = self.hour * 3600 + self.minute * 60
        self._cache: dict[tuple[int, int], list[int]] = {}

    def _days(self, year: int, month: int) -> list[int]:
        """Google's `_MatchingDays`: listed days of the month, or ordinal × weekday."""
        key = (year, month)
        found = self._cache.get(key)
        if found is None:
            first, last = calendar.monthrange(year, month)
            if self.monthdays:
                found = sorted(d for d in self.monthdays if d <= last)
            else:
                first = (first + 1) % 7  # calendar: Monday = 0; groc: Sunday = 0
                found = sorted(
                    {
                        day
                        for ordinal in self.ordinals
                        for weekday in self.weekdays
                        if (day := (weekday - first) % 7 + 1 + 7 * (ordinal - 1)) <= last
                    }
                )
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = found
        return found

    def next_wall(self, wall: int) -> int | None:
        y, m, d, h, mi = wall_fields(wall)
        if h * 3600 + mi * 60 > self._time_of_day:
            d += 1
        last_year = y + 60
        while y <= last_year:
            if m not in self._month_set:
                i = bisect.bisect_left(self.months, m)
                y, m = (y + 1, self.months[0]) if i == len(self.months) else (y, self.months[i])
                d = 1
            days = self._days(y, m)
            i = bisect.bisect_left(days, d)
            if i < len(days):
                return wall_seconds(y, m, days[i], self.hour, self.minute)
            y, m, d = (y + 1, 1, 1) if m == 12 else (y, m + 1, 1)
        return None

    def prev_wall(self, wall: int) -> int | None:
        y, m, d, h, mi = wall_fields(wall)
        if h * 3600 + mi * 60 < self._time_of_day:
            d -= 1
        first_year = y - 60
        while y >= first_year:
            if m not in self._month_set:
                i = bisect.bisect_right(self.months, m) - 1
                y, m = (y - 1, self.months[-1]) if i < 0 else (y, self.months[i])
                d = 31
            days = self._days(y, m)
            i = bisect.bisect_right(days, d) - 1
            if i >= 0:
                return wall_seconds(y, m, days[i], self.hour, self.minute)
            y, m, d = (y - 1, 12, 31) if m == 1 else (y, m - 1, 31)
        return None


class IntervalSchedule(Schedule):
    """ "every 5 minutes", "every 2 hours from 08:00 to 18:00", "every 10 minutes synchronized",
    optionally "on mon,wed". A port of Google's `IntervalTimeSpecification` to instants."""

    kind = "groc"
    header_guaranteed = False

    def __init__(
        self,
        text: str,
        seconds: int,
        weekdays: frozenset[int],
        start: tuple[int, int] | None,
        end: tuple[int, int] | None,
        *,
        synchronized: bool,
    ):
        super().__init__(text)
        self.seconds = seconds
        self.weekdays = weekdays  # empty: every day
        self.start, self.end = start, end  # local (hour, minute) of the daily window, or None
        self.synchronized = synchronized

    @property
    def plain(self) -> bool:
        """No window: the interval counts from the previous run, not from a clock reading."""
        return self.start is None

    @property
    def dst_rule_text(self) -> str:
        """What the schedule says, in one short clause: no window where the text names none."""
        if self.plain:
            return "runs are spaced by elapsed time; DST has no effect"
        every = f"every {_duration(self.seconds)} of elapsed time"
        if self.synchronized:
            return f"{every} from 00:00 local time; a DST change that day moves the later runs on the clock"
        assert self.start is not None and self.end is not None  # not plain: a window
        window = f"{self.start[0]:02d}:{self.start[1]:02d} to {self.end[0]:02d}:{self.end[1]:02d}"
        return f"{every} from {window} local time; a DST change inside it moves the later runs on the clock"

    # -- Google's helpers, on instants ----------------------------------------------------------

    @staticmethod
    def _combine(tl: Timeline, day_wall: int, hhmm: tuple[int, int]) -> int:
        """`_CombineDateAndTime`: the earlier of two readings, or the first minute after a gap."""
        wall = day_wall + hhmm[0] * 3600 + hhmm[1] * 60
        while True:
            found = tl.wall_instants(wall)
            if found:
                return found[0]
            wall += 60

    def _previous(self, tl: Timeline, t: int, hhmm: tuple[int, int]) -> int:
        """The latest instant <= t whose (adjusted) local reading is `hhmm`."""
        day = tl.wall(t) // 86400 * 86400
        while True:
            result = self._combine(tl, day, hhmm)
            if result <= t:
                return result
            day -= 86400

    def _following(self, tl: Timeline, t: int, hhmm: tuple[int, int]) -> int:
        """The earliest instant > t whose (adjusted) local reading is `hhmm`."""
        day = tl.wall(t) // 86400 * 86400
        while True:
            result = self._combine(tl, day, hhmm)
            if result > t:
                return result
            day += 86400

    def _in_range(self, tl: Timeline, t: int) -> bool:
        assert self.start is not None and self.end is not None
        last_start = self._previous(tl, t, self.start)
        last_end = self._previous(tl, t, self.end)
        return last_start > last_end or t == last_end

    def _weekday_ok(self, tl: Timeline, t: int) -> bool:
        if not self.weekdays:
            return True
        days = tl.wall(t) // 86400  # 1970-01-01 was a Thursday (groc 4)
        return (days + 4) % 7 in self.weekdays

    def _candidate(self, tl: Timeline, t: int) -> int:
        if self.start is None:
            return floor_minute(t + self.seconds)
        window_start = self._previous(tl, t, self.start)
        steps = (t - window_start + self.seconds) // self.seconds
        on_grid = window_start + steps * self.seconds
        next_start = self._following(tl, t, self.start)
        if self._in_range(tl, t) and self._in_range(tl, on_grid) and on_grid < next_start:
            return on_grid
        return next_start

    # -- Schedule --------------------------------------------------------------------------------

    def _next(self, t: int, tl: Timeline) -> int | None:
        """Google's `GetMatch`: step the start by the interval until the candidate's weekday
        matches. A candidate on an excluded day skips at once every start whose candidate is
        on that day too (the same starts, in the same phase, as stepping one by one)."""
        for _ in range(64):
            found = self._candidate(tl, t)
            if self._weekday_ok(tl, found):
                return found
            next_day = self._combine(tl, tl.wall(found) // 86400 * 86400 + 86400, (0, 0))
            # without a start, candidates are start + interval
            last_on_day = next_day - self.seconds if self.start is None else self._grid_prev(tl, next_day - 1)
            t += max(1, -(-(last_on_day - t) // self.seconds)) * self.seconds
        return None

    def _grid_prev(self, tl: Timeline, t: int) -> int:
        """The last fire time at or before t, weekdays aside (plain intervals: the snap grid)."""
        if self.start is None:
            return t // self.seconds * self.seconds
        window_start = self._previous(tl, t, self.start)
        window_end = self._following(tl, window_start - 1, self.end)  # type: ignore[arg-type]  # end is set with start
        steps = (t - window_start) // self.seconds
        if steps >= 1:
            steps = min(steps, (window_end - window_start) // self.seconds)
        return window_start + max(steps, 0) * self.seconds

    def _prev(self, t: int, tl: Timeline) -> int | None:
        for _ in range(20):  # each pass leaves a whole local day behind
            found = self._grid_prev(tl, t)
            if self._weekday_ok(tl, found):
                return found
            midnight = self._combine(tl, tl.wall(found) // 86400 * 86400, (0, 0))
            t = min(found, midnight) - 1
        return None

    def _findings(self, tl: Timeline, transitions: list[Transition]) -> list[DstFinding]:
        if self.start is None:
            return []  # elapsed time: clock changes do not move plain intervals
        findings = []
        for tr in transitions:
            window_start = self._previous(tl, tr.at, self.start)
            window_end = self._following(tl, window_start - 1, self.end)  # type: ignore[arg-type]  # set with start
            if not window_start <= tr.at <= window_end:
                continue
            lo, hi = sorted((tr.at + tr.before, tr.at + tr.after))
            start_wall = tl.wall(window_start)
            first = -(-(lo - start_wall) // self.seconds)
            walls = [
                start_wall + k * self.seconds for k in range(max(first, 0), (hi - start_wall - 1) // self.seconds + 1)
            ]
            # The first grid point after the jump (weekdays aside: this describes the shift).
            after = window_start + -(-(tr.at - window_start) // self.seconds) * self.seconds
            if tr.gap > 0:
                kind = "skipped"
                effect = (
                    f"runs count elapsed time from the window start, so the first run after the jump "
                    f"is at {from_instant(after, tl.zone):%H:%M}"
                )
            else:
                kind = "repeated"
                effect = "runs continue by elapsed time through both passes of the repeated hour"
            findings.append(
                DstFinding(
                    kind=kind,
                    zone=tl.zone.key,
                    at=from_instant(tr.at, tl.zone),
                    local_times=[f"{wall_datetime(w):%H:%M}" for w in walls[:100]] or [f"{wall_datetime(lo):%H:%M}"],
                    count=max(len(walls), 1),
                    effect=effect,
                )
            )
        return findings

    def note(self, fire: datetime, zone: ZoneInfo) -> str | None:
        return describe_wall(timeline(zone), to_instant(fire))


def _duration(seconds: int) -> str:
    """5 minutes, 2 hours, 90 minutes: the interval as a groc expression writes it."""
    if seconds % 3600 == 0:
        hours = seconds // 3600
        return f"{hours} hour{'s' if hours > 1 else ''}"
    minutes = seconds // 60
    return f"{minutes} minute{'s' if minutes > 1 else ''}"
