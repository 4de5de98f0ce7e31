"""Cloud Scheduler's schedule formats, evaluated in any tz-database zone.

    parse_schedule("30 2 * * *")                  -> CronSchedule      (unix-cron, cron.py)
    parse_schedule("first sunday of month 12:00") -> SpecificTimeSchedule (groc, groc.py)
    parse_schedule("every 5 minutes")             -> IntervalSchedule     (groc, groc.py)

Every schedule answers `next_after`, `iter_after`, `latest_at_or_before` and `dst_findings`
(base.py); each format states its rule for the skipped and the repeated local hour in its module
docstring and in `dst_rule_text`. This package imports nothing from the rest of runonce (a test
holds it to that): `runonce/lint.py` checks jobs and routes with it, and `runonce/routes.py` validates a
route's schedule with it.
"""

from __future__ import annotations

import functools
import re

from runonce.schedules.base import DstFinding, DstRule, Schedule
from runonce.schedules.cron import CronSchedule
from runonce.schedules.errors import ScheduleError
from runonce.schedules.groc import IntervalSchedule, SpecificTimeSchedule, parse_groc
from runonce.schedules.zones import get_zone

_GROC_HINT = re.compile(r"(?i)^\s*every|:|\b(?:of|synchronized|1st|2nd|3rd|4th|5th|first|second|third|fourth|fifth)\b")


@functools.lru_cache(maxsize=1024)
def parse_schedule(text: str) -> Schedule:
    """A unix-cron or groc schedule, validated as Cloud Scheduler would. Raises `ScheduleError`.

    groc when the text starts with `every`, contains a time of day (`:`) or a groc word (`of`,
    ordinals); unix-cron otherwise. Cached: schedules are immutable.
    """
    if not isinstance(text, str) or not text.strip():
        raise ScheduleError("schedule", "is empty")
    if len(text) > 500:
        raise ScheduleError("schedule", f"is {len(text)} characters long; at most 500")
    if _GROC_HINT.search(text):
        return parse_groc(text)
    return CronSchedule(text)


__all__ = [
    "CronSchedule",
    "DstFinding",
    "DstRule",
    "IntervalSchedule",
    "Schedule",
    "ScheduleError",
    "SpecificTimeSchedule",
    "get_zone",
    "parse_schedule",
]
