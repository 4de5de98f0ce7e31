"""What every schedule answers, and the evaluator shared by schedules that fire at wall-clock times.

A schedule is evaluated in a tz-database zone. The public methods take and return aware datetimes;
inside, instants are whole epoch seconds and local clock readings are *walls* (see `zones`).

`WallSchedule` covers unix-cron and groc's specific-time form ("every day 09:00"): both name the
local clock readings that fire, and differ only in what happens when a reading is skipped (spring
forward) or shown twice (fall back). That choice is a `DstRule`; each format states its own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from zoneinfo import ZoneInfo

from runonce.schedules.zones import Timeline, Transition, from_instant, timeline, to_instant, wall_datetime

SEARCH_YEARS = 60
"""How far next/previous look before concluding a schedule never fires again (a valid schedule
fires at least every 28 years: Feb 29 on a given weekday)."""
_YEAR = 366 * 86400


def ceil_minute(seconds: int) -> int:
    return -(-seconds // 60) * 60


def floor_minute(seconds: int) -> int:
    return seconds // 60 * 60


@dataclass(frozen=True)
class DstRule:
    """What a wall-clock schedule does with a fire time the clock skips or shows twice."""

    shift_skipped: bool  # True: runs once at the transition; False: does not run
    repeat_folded: bool  # True: runs in both passes; False: only in the first


@dataclass(frozen=True)
class DstFinding:
    """One transition in the scanned window that touches the schedule's fire times."""

    kind: str  # "skipped" (spring forward) or "repeated" (fall back)
    zone: str
    at: datetime  # the transition instant, in the zone (after the change)
    local_times: list[str]  # the affected clock readings, HH:MM
    count: int  # how many fire times fall in the skipped/repeated interval
    effect: str  # what happens to them, in words

    @property
    def date(self) -> date:
        return self.at.date()

    def message(self) -> str:
        if self.count == 1:
            times = self.local_times[0]
        elif self.count == 2:
            times = " and ".join(self.local_times)
        else:
            times = f"{self.local_times[0]}-{self.local_times[-1]} ({self.count} fire times)"
        if self.kind == "skipped":
            return f"{self.date.isoformat()} in {self.zone}: the clock skips {times}; {self.effect}"
        return f"{self.date.isoformat()} in {self.zone}: the clock shows {times} twice; {self.effect}"

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "date": self.date.isoformat(),
            "transition": self.at.isoformat(),
            "local_times": self.local_times,
            "count": self.count,
            "effect": self.effect,
        }


class Schedule(ABC):
    """A parsed schedule. Immutable once built; safe to share between requests."""

    kind: str  # "unix-cron" or "groc"
    header_guaranteed: bool  # does Scheduler always send X-CloudScheduler-ScheduleTime?

    @property
    def dst_rule_text(self) -> str:
        """The DST rule, stated for humans (CLI, lint, README); each kind of schedule states its own."""
        raise NotImplementedError(f"{type(self).__name__} states no DST rule")

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.text!r})"

    # -- public API: aware datetimes ----------------------------------------------------------

    def next_after(self, after: datetime, zone: ZoneInfo) -> datetime | None:
        """The first fire time strictly after `after`, in `zone`; None if it never fires again."""
        found = self._next(to_instant(after), timeline(zone))
        return from_instant(found, zone) if found is not None else None

    def iter_after(self, after: datetime, zone: ZoneInfo) -> Iterator[datetime]:
        """Fire times strictly after `after`, in order (until it never fires again)."""
        tl, t = timeline(zone), to_instant(after)
        while True:
            found = self._next(t, tl)
            if found is None:
                return
            yield from_instant(found, zone)
            t = found

    def latest_at_or_before(self, at: datetime, zone: ZoneInfo) -> datetime | None:
        """The last fire time at or before `at`: the run a delivery received at `at` belongs to."""
        found = self._prev(to_instant(at), timeline(zone))
        return from_instant(found, zone) if found is not None else None

    def dst_findings(self, zone: ZoneInfo, start: datetime, end: datetime) -> list[DstFinding]:
        """Transitions of `zone` in [start, end) that skip or repeat one of this schedule's fire
        times. Reasoned from the transitions alone: the cost does not grow with the fire rate."""
        tl = timeline(zone)
        return self._findings(tl, tl.transitions(to_instant(start), to_instant(end)))

    def note(self, fire: datetime, zone: ZoneInfo) -> str | None:
        """Why this fire time is unusual (DST), for `runonce schedule next`; None when it is not."""
        return None

    # -- per format: epoch seconds --------------------------------------------------------------

    @abstractmethod
    def _next(self, t: int, tl: Timeline) -> int | None: ...

    @abstractmethod
    def _prev(self, t: int, tl: Timeline) -> int | None: ...

    @abstractmethod
    def _findings(self, tl: Timeline, transitions: list[Transition]) -> list[DstFinding]: ...


class WallSchedule(Schedule):
    """A schedule that names local clock readings (minute resolution). Subclasses give the
    matching walls and the DST rule; segments of constant offset do the rest:

    next fire after t = the first matching wall of t's segment that maps inside the segment;
    else, under `shift_skipped`, the next transition itself if it skips a matching wall; else the
    next segment. Under not `repeat_folded`, a segment that starts with a fall-back transition
    begins only after the repeated interval (those readings were shown before the change).
    """

    rule: DstRule
    _max_listed = 100  # how many affected readings a DST finding lists at most

    @abstractmethod
    def next_wall(self, wall: int) -> int | None:
        """The smallest matching wall >= `wall` (a whole minute), or None within SEARCH_YEARS."""

    @abstractmethod
    def prev_wall(self, wall: int) -> int | None:
        """The largest matching wall <= `wall` (a whole minute), or None within SEARCH_YEARS."""

    def _matches_between(self, lo: int, hi: int) -> list[int]:
        """Matching walls in [lo, hi)."""
        found: list[int] = []
        w = self.next_wall(ceil_minute(lo))
        while w is not None and w < hi and len(found) < self._max_listed:
            found.append(w)
            w = self.next_wall(w + 60)
        return found

    def _skips_match(self, transition: Transition) -> bool:
        w = self.next_wall(ceil_minute(transition.at + transition.before))
        return w is not None and w < transition.at + transition.after

    def _next(self, t: int, tl: Timeline) -> int | None:
        lo = t + 1  # the first instant allowed
        limit = t + SEARCH_YEARS * _YEAR
        while lo < limit:
            boundary, end = tl.segment(lo)
            offset = boundary.after
            if lo == boundary.at and boundary.gap > 0 and self.rule.shift_skipped and self._skips_match(boundary):
                return lo  # the skipped readings run at the jump
            if not self.rule.repeat_folded and boundary.gap < 0:
                lo = max(lo, boundary.at - boundary.gap)  # those readings were shown before the change
            w = self.next_wall(ceil_minute(lo + offset))
            if w is None:
                return None
            if end is None or w - offset < end:
                return w - offset
            if self.rule.shift_skipped:
                following, _ = tl.segment(end)
                if following.gap > 0 and self._skips_match(following):
                    return end
            lo = end
        return None

    def _prev(self, t: int, tl: Timeline) -> int | None:
        hi = t  # the last instant allowed
        limit = t - SEARCH_YEARS * _YEAR
        while hi > limit:
            boundary, _ = tl.segment(hi)
            offset, start = boundary.after, boundary.at
            lo = start
            if not self.rule.repeat_folded and boundary.gap < 0:
                lo = start - boundary.gap
            if hi >= lo:
                w = self.prev_wall(floor_minute(hi + offset))
                if w is None:
                    return None
                if w - offset >= lo:
                    return w - offset
            if self.rule.shift_skipped and boundary.gap > 0 and self._skips_match(boundary):
                return start
            hi = start - 1
        return None

    def _findings(self, tl: Timeline, transitions: list[Transition]) -> list[DstFinding]:
        findings = []
        for tr in transitions:
            if tr.gap > 0:
                kind, walls = "skipped", self._matches_between(tr.at + tr.before, tr.at + tr.after)
            else:
                kind, walls = "repeated", self._matches_between(tr.at + tr.after, tr.at + tr.before)
            if not walls:
                continue
            count = len(walls)
            when = from_instant(tr.at, tl.zone)
            if kind == "skipped" and self.rule.shift_skipped:
                effect = f"runs once at {when:%H:%M}, the first minute after the jump, instead"
            elif kind == "skipped":
                effect = "that run does not happen" if count == 1 else f"those {count} runs do not happen"
            elif self.rule.repeat_folded:
                effect = (
                    "it runs twice, once per pass" if count == 1 else f"those {count} runs happen twice, once per pass"
                )
            else:
                effect = "runs only in the first pass, before the clocks go back"
            findings.append(
                DstFinding(
                    kind=kind,
                    zone=tl.zone.key,
                    at=when,
                    local_times=[f"{wall_datetime(w):%H:%M}" for w in walls],
                    count=count,
                    effect=effect,
                )
            )
        return findings

    def note(self, fire: datetime, zone: ZoneInfo) -> str | None:
        tl = timeline(zone)
        t = to_instant(fire)
        boundary, _ = tl.segment(t)
        if boundary.at == t and boundary.gap > 0 and self.rule.shift_skipped and self._skips_match(boundary):
            first = wall_datetime(self._matches_between(t + boundary.before, t + boundary.after)[0])
            return (
                f"skipped local time: {first:%H:%M} does not exist on {first:%Y-%m-%d} "
                f"(clocks jump to {wall_datetime(t + boundary.after):%H:%M}); runs at the jump"
            )
        wall = tl.wall(t)
        instants = tl.wall_instants(wall)
        if len(instants) == 2:
            which = "first" if t == instants[0] else "second"
            if which == "first":
                also = ", runs again in the second" if self.rule.repeat_folded else ", not repeated in the second"
            else:
                also = ""
            return (
                f"ambiguous local time: {wall_datetime(wall):%H:%M} occurs twice on "
                f"{wall_datetime(wall):%Y-%m-%d}; this is the {which} pass{also}"
            )
        return None
