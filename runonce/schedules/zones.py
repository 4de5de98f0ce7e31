"""Time zones as a timeline of UTC-offset segments, for schedules that run on the wall clock.

Instants are whole UTC epoch seconds (`int`); a *wall* time is the local clock reading written the
same way (seconds since 1970-01-01T00:00 *local*), so `wall = instant + offset`. A zone's history is
cut into segments of constant offset by its transitions:

    offset o1                    | offset o2 > o1 (spring forward)
    ---------------------------- T ---------------------------------   walls [T+o1, T+o2) never shown
    offset o1                    | offset o2 < o1 (fall back)
    ---------------------------- T ---------------------------------   walls [T+o2, T+o1) shown twice

`zoneinfo` does not publish a zone's transitions, so they are found by sampling the offset every
6 hours and bisecting each change to the second (no real zone changes its offset twice within 6
hours), one calendar year at a time, cached. A year costs about 1,500 `utcoffset` calls (~2 ms).
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from runonce.schedules.errors import ScheduleError

EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_SAMPLE_STEP = 6 * 3600
MIN_YEAR, MAX_YEAR = 1900, 2999


def get_zone(name: str | None) -> ZoneInfo:
    """A tz-database zone by name (`Europe/London`); empty means UTC, and `utc` any case is UTC
    (Cloud Scheduler's Job.timeZone documents the lower-case spelling)."""
    if not name or name.strip().lower() in ("utc", "etc/utc"):
        return ZoneInfo("UTC")
    if name != name.strip() or ".." in name or name.startswith("/"):
        raise ScheduleError("time zone", f"{name!r} is not a tz database zone name (e.g. Europe/London)")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:  # OSError: a directory (`US`) or an unreadable file
        raise ScheduleError("time zone", f"{name!r} is not a tz database zone name (e.g. Europe/London)") from exc


def wall_seconds(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return (date(year, month, day).toordinal() - EPOCH_ORDINAL) * 86400 + hour * 3600 + minute * 60


def wall_fields(wall: int) -> tuple[int, int, int, int, int]:
    """(year, month, day, hour, minute) of a wall time (seconds are dropped)."""
    days, rem = divmod(wall, 86400)
    d = date.fromordinal(EPOCH_ORDINAL + days)
    return d.year, d.month, d.day, rem // 3600, (rem % 3600) // 60


def wall_datetime(wall: int) -> datetime:
    return datetime(1970, 1, 1) + timedelta(seconds=wall)


def to_instant(value: datetime) -> int:
    """Whole epoch seconds, rounded down (an aware datetime; naive means UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp() // 1)


def from_instant(instant: int, zone: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(instant, zone)


@dataclass(frozen=True)
class Transition:
    """The zone's offset changes from `before` to `after` (seconds east of UTC) at instant `at`."""

    at: int
    before: int
    after: int

    @property
    def gap(self) -> int:
        """Seconds of wall clock skipped (> 0, spring forward) or repeated (< 0, fall back)."""
        return self.after - self.before


class Timeline:
    """One zone's offsets, with segment look-ups for the schedule evaluators. Build with `timeline()`."""

    def __init__(self, zone: ZoneInfo):
        self.zone = zone
        self._years: set[int] = set()
        self._bounds: list[int] = []  # sorted instants: transitions, plus 1 Jan 00:00Z of loaded years
        self._trans: dict[int, Transition] = {}

    def offset(self, instant: int) -> int:
        off = datetime.fromtimestamp(instant, self.zone).utcoffset()
        return int(off.total_seconds()) if off is not None else 0

    def _load(self, year: int) -> None:
        if year in self._years or not MIN_YEAR <= year <= MAX_YEAR:
            return
        self._years.add(year)
        start = int(datetime(year, 1, 1, tzinfo=UTC).timestamp())
        end = int(datetime(year + 1, 1, 1, tzinfo=UTC).timestamp())
        found = [Transition(start, self.offset(start - 1), self.offset(start))]
        previous_at, previous = start, found[0].after
        for at in range(start + _SAMPLE_STEP, end + _SAMPLE_STEP, _SAMPLE_STEP):
            at = min(at, end)
            now = self.offset(at)
            if now != previous:
                lo, hi = previous_at, at  # offset(lo) == previous, offset(hi) == now
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if self.offset(mid) == previous:
                        lo = mid
                    else:
                        hi = mid
                found.append(Transition(hi, previous, now))
            previous_at, previous = at, now
            if at == end:
                break
        for item in found:
            if item.at not in self._trans or item.before != item.after:
                if item.at not in self._trans:
                    bisect.insort(self._bounds, item.at)
                self._trans[item.at] = item

    def _year_of(self, instant: int) -> int:
        return max(MIN_YEAR, min(MAX_YEAR, datetime.fromtimestamp(instant, UTC).year))

    def segment(self, instant: int) -> tuple[Transition, int | None]:
        """The boundary at or before `instant` (its `after` is the offset in force) and the next
        boundary's instant (None past year 2999). Boundaries are transitions and, where a year has
        none, its first instant (a `Transition` with before == after)."""
        year = self._year_of(instant)
        self._load(year)
        self._load(year + 1)
        i = bisect.bisect_right(self._bounds, instant)
        if i == 0:  # before 1900: one segment
            self._load(year - 1)
            i = bisect.bisect_right(self._bounds, instant)
            if i == 0:
                return Transition(instant, self.offset(instant), self.offset(instant)), self._bounds[0]
        at = self._bounds[i - 1]
        following = self._bounds[i] if i < len(self._bounds) else None
        return self._trans[at], following

    def transitions(self, start: int, end: int) -> list[Transition]:
        """Real transitions (the offset changes) with start <= at < end."""
        for year in range(self._year_of(start), self._year_of(end) + 1):
            self._load(year)
        lo = bisect.bisect_left(self._bounds, start)
        hi = bisect.bisect_left(self._bounds, end)
        return [t for t in (self._trans[at] for at in self._bounds[lo:hi]) if t.before != t.after]

    def wall(self, instant: int) -> int:
        return instant + self.segment(instant)[0].after

    def wall_instants(self, wall: int) -> list[int]:
        """The instants showing `wall` on the clock: none (in a gap), one, or two (in a fold)."""
        naive = wall_datetime(wall)
        found = set()
        for fold in (0, 1):
            instant = int(naive.replace(tzinfo=self.zone, fold=fold).timestamp())
            if self.wall(instant) == wall:
                found.add(instant)
        return sorted(found)


@functools.lru_cache(maxsize=512)
def timeline(zone: ZoneInfo) -> Timeline:
    """The shared, cached timeline of a zone (ZoneInfo objects are cached by key, so this is too)."""
    return Timeline(zone)


def describe_wall(tl: Timeline, instant: int) -> str | None:
    """Why this local clock reading is unusual, or None: the time is shown twice (fold)."""
    wall = tl.wall(instant)
    instants = tl.wall_instants(wall)
    if len(instants) == 2:
        which = "first" if instant == instants[0] else "second"
        return (
            f"ambiguous: {wall_datetime(wall):%H:%M} occurs twice on {wall_datetime(wall):%Y-%m-%d}; "
            f"this is the {which}"
        )
    return None
