"""The schedule engine: Cloud Scheduler's unix-cron dialect and groc, and the stated DST rules in
New York (1 h at 02:00), London (1 h at 01:00 UTC) and Lord Howe (30 minutes at 02:00)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runonce.errors import ConfigError
from runonce.routes import parse_routes
from runonce.schedules import (
    CronSchedule,
    IntervalSchedule,
    ScheduleError,
    SpecificTimeSchedule,
    get_zone,
    parse_schedule,
)

NY, LONDON, LORD_HOWE = get_zone("America/New_York"), get_zone("Europe/London"), get_zone("Australia/Lord_Howe")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def fires(expr: str, zone, after: datetime, count: int) -> list[str]:  # type: ignore[no-untyped-def]
    schedule = parse_schedule(expr)
    return [t.isoformat() for _, t in zip(range(count), schedule.iter_after(after, zone), strict=False)]


# -- unix-cron: the dialect ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        "* * * * *",
        "0 * * * *",
        "0 0 * * *",
        "0 0 * * 1-5",
        "0 0 * * MON-FRI",
        "0 0 * * 0",
        "0 0 * * 7",
        "0 0 * * SUN",
        "0 0 1 * *",
        "0 0 1 1,4,7,10 *",
        "0 0 1 JAN,APR,JUL,OCT *",
        "0 0 1 1 *",
        "0 0 1 JAN *",
        "*/2 * * * *",
        "0 0-12/2 * * *",
        "0-5,30-35 * * * *",
        "0 0,12 * * *",
        "* 0 1 1 1",
        "0 9 * * mon-fri",
    ],
)
def test_documented_cron_examples_parse(expr: str) -> None:
    assert isinstance(parse_schedule(expr), CronSchedule)


def test_cron_documented_meanings() -> None:
    after = utc(2026, 1, 1)
    assert fires("0 0-12/2 * * *", UTC, after, 7)[-2:] == ["2026-01-01T12:00:00+00:00", "2026-01-02T00:00:00+00:00"]
    assert fires("0 0 * * 7", UTC, after, 1) == fires("0 0 * * SUN", UTC, after, 1) == ["2026-01-04T00:00:00+00:00"]
    # Both day fields restricted: OR. 2026-08-01 is a Saturday; the 1st of September is a Tuesday.
    assert fires("0 0 1 * SAT", UTC, utc(2026, 8, 20), 3) == [
        "2026-08-22T00:00:00+00:00",
        "2026-08-29T00:00:00+00:00",
        "2026-09-01T00:00:00+00:00",
    ]
    # A field starting with '*' counts as unrestricted (Vixie cron): '*/2' AND Monday.
    assert fires("0 0 */2 * MON", UTC, utc(2026, 1, 1), 2) == ["2026-01-05T00:00:00+00:00", "2026-01-19T00:00:00+00:00"]


@pytest.mark.parametrize(
    "expr, field, says",
    [
        ("0 0 L * *", "day-of-month", "'L'"),
        ("0 0 * * 5L", "day-of-week", "'L'"),
        ("0 0 15W * *", "day-of-month", "'W'"),
        ("0 0 * * MON#2", "day-of-week", "'#'"),
        ("0 0 ? * *", "day-of-month", "'?'"),
        ("*/60 * * * *", "minute", "step 60 is larger"),
        ("0 */24 * * *", "hour", "step 24 is larger"),
        ("0 0 */32 * *", "day-of-month", "step 32 is larger"),
        ("0 0 * */13 *", "month", "step 13 is larger"),
        ("*/0 * * * *", "minute", "step of 0"),
        ("5/15 * * * *", "minute", "needs a range"),
        ("60 * * * *", "minute", "out of range 0-59"),
        ("0 24 * * *", "hour", "out of range 0-23"),
        ("0 0 0 * *", "day-of-month", "out of range 1-31"),
        ("0 0 * 13 *", "month", "out of range 1-12"),
        ("0 0 * * 8", "day-of-week", "out of range 0-7"),
        ("0 0 * * FOO", "day-of-week", "unknown name 'FOO'"),
        ("0 0 * MON *", "month", "unknown name 'MON'"),
        ("0 JAN * * *", "hour", "names are not allowed"),
        ("0 5-1 * * *", "hour", "runs backwards"),
        ("0 0 31 FEB *", "day-of-month", "never occurs"),
        ("1,,2 * * * *", "minute", "empty list item"),
        ("0 0 * * * *", "schedule", "no seconds or year field"),
        ("0 0 * *", "schedule", "takes 5"),
        ("@daily", "schedule", "macros"),
    ],
)
def test_cron_rejections_name_the_field_and_character(expr: str, field: str, says: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(expr)
    assert caught.value.field == field
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_lower_case_names_are_accepted_and_noticed() -> None:
    schedule = parse_schedule("0 9 * jan mon")
    assert isinstance(schedule, CronSchedule) and schedule.lower_case_names
    assert not parse_schedule("0 9 * JAN MON").lower_case_names  # type: ignore[attr-defined]


# -- unix-cron: DST (Vixie cron's rule) -------------------------------------------------------------


def test_fixed_time_cron_runs_a_skipped_time_at_the_jump_new_york() -> None:
    # 2026-03-08: 02:00 EST -> 03:00 EDT. 02:30 does not exist: it runs at 03:00, once.
    assert fires("30 2 * * *", NY, utc(2026, 3, 7, 12), 3) == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
        "2026-03-10T02:30:00-04:00",
    ]
    # Skipped times and 03:00 itself collapse into one run at the jump.
    assert fires("0,30 2,3 * * *", NY, utc(2026, 3, 8, 6), 3) == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T03:30:00-04:00",
        "2026-03-09T02:00:00-04:00",
    ]


def test_fixed_time_cron_runs_a_repeated_time_once_london() -> None:
    # 2026-10-25: 02:00 BST -> 01:00 GMT. 01:30 happens twice; a fixed-time job runs in the first pass.
    assert fires("30 1 * * *", LONDON, utc(2026, 10, 24, 12), 2) == [
        "2026-10-25T01:30:00+01:00",
        "2026-10-26T01:30:00+00:00",
    ]


def test_wildcard_cron_follows_the_wall_clock_new_york() -> None:
    # Fall back 2026-11-01 02:00 EDT -> 01:00 EST: every :30 in the repeated hour runs twice.
    assert fires("*/30 * * * *", NY, utc(2026, 11, 1, 4), 5) == [
        "2026-11-01T00:30:00-04:00",
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:30:00-05:00",
    ]
    # Spring forward: the skipped hour's fire times do not run.
    assert fires("*/30 * * * *", NY, utc(2026, 3, 8, 6, 15), 3) == [
        "2026-03-08T01:30:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T03:30:00-04:00",
    ]


def test_cron_in_lord_howes_half_hour_shift() -> None:
    # 2026-10-04 02:00 +10:30 -> 02:30 +11:00: 02:00-02:29 does not exist.
    assert fires("15 2 * * *", LORD_HOWE, utc(2026, 10, 3, 10), 2) == [
        "2026-10-04T02:30:00+11:00",
        "2026-10-05T02:15:00+11:00",
    ]
    assert fires("*/15 2 * * *", LORD_HOWE, utc(2026, 10, 3, 10), 3) == [
        "2026-10-04T02:30:00+11:00",
        "2026-10-04T02:45:00+11:00",
        "2026-10-05T02:00:00+11:00",
    ]
    # 2026-04-05 02:00 +11:00 -> 01:30 +10:30: 01:30-01:59 happens twice.
    assert fires("45 1 * * *", LORD_HOWE, utc(2026, 4, 4, 10), 2) == [
        "2026-04-05T01:45:00+11:00",
        "2026-04-06T01:45:00+10:30",
    ]
    assert fires("*/15 1 * * *", LORD_HOWE, utc(2026, 4, 4, 14, 20), 6) == [
        "2026-04-05T01:30:00+11:00",
        "2026-04-05T01:45:00+11:00",
        "2026-04-05T01:30:00+10:30",
        "2026-04-05T01:45:00+10:30",
        "2026-04-06T01:00:00+10:30",
        "2026-04-06T01:15:00+10:30",
    ]


def test_latest_at_or_before_follows_the_same_rules() -> None:
    schedule = parse_schedule("30 1 * * *")
    # 01:15 EST is after 01:30 EDT: the run it belongs to is that first pass, not the day before.
    at = datetime(2026, 11, 1, 1, 15, tzinfo=NY, fold=1)
    assert schedule.latest_at_or_before(at, NY).isoformat() == "2026-11-01T01:30:00-04:00"  # type: ignore[union-attr]
    shifted = parse_schedule("30 2 * * *").latest_at_or_before(utc(2026, 3, 8, 7, 10), NY)
    assert shifted.isoformat() == "2026-03-08T03:00:00-04:00"  # type: ignore[union-attr]


def test_dst_findings_list_the_dates_and_what_happens() -> None:
    findings = parse_schedule("30 2 * * *").dst_findings(NY, utc(2026, 1, 1), utc(2028, 1, 1))
    assert [(f.kind, f.date.isoformat(), f.local_times) for f in findings] == [
        ("skipped", "2026-03-08", ["02:30"]),
        ("skipped", "2027-03-14", ["02:30"]),
    ]
    assert "runs once at 03:00" in findings[0].message()
    every_minute = parse_schedule("* * * * *").dst_findings(LORD_HOWE, utc(2026, 1, 1), utc(2027, 1, 1))
    assert [(f.kind, f.date.isoformat(), f.count) for f in every_minute] == [
        ("repeated", "2026-04-05", 30),
        ("skipped", "2026-10-04", 30),
    ]
    assert parse_schedule("0 12 * * *").dst_findings(NY, utc(2026, 1, 1), utc(2028, 1, 1)) == []


# -- groc -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr, kind",
    [
        ("first sunday of month 12:00", SpecificTimeSchedule),
        ("2nd,3rd tue,wed,thu of feb,aug 13:50", SpecificTimeSchedule),
        ("every wed of december 00:00", SpecificTimeSchedule),
        ("1st friday of quarter 9:00", SpecificTimeSchedule),
        ("second,4th tue,thursday of 3rd month of quarter 18:30", SpecificTimeSchedule),
        ("1,3,4,7,11,18,29 of jan,jul 12:34", SpecificTimeSchedule),
        ("03 of month 12:34", SpecificTimeSchedule),
        ("every day 09:00", SpecificTimeSchedule),
        ("every sun,tue,thu 9:00", SpecificTimeSchedule),
        ("every 48 hours", IntervalSchedule),
        ("every 5 minutes", IntervalSchedule),
        ("every 60 minutes on mon,wed", IntervalSchedule),
        ("every minute", IntervalSchedule),
        ("every 2 hours from 08:00 to 18:00", IntervalSchedule),
        ("every 10 minutes synchronized", IntervalSchedule),
    ],
)
def test_documented_groc_examples_parse(expr: str, kind: type) -> None:
    schedule = parse_schedule(expr)
    assert isinstance(schedule, kind) and not schedule.header_guaranteed


def test_groc_specific_time_skips_a_missing_time_and_repeats_a_doubled_one() -> None:
    # New York: 02:30 does not exist on 2026-03-08: no run that day.
    assert fires("every day 02:30", NY, utc(2026, 3, 7, 12), 2) == [
        "2026-03-09T02:30:00-04:00",
        "2026-03-10T02:30:00-04:00",
    ]
    # London: 01:30 happens twice on 2026-10-25: it runs twice.
    assert fires("every day 01:30", LONDON, utc(2026, 10, 24, 12), 3) == [
        "2026-10-25T01:30:00+01:00",
        "2026-10-25T01:30:00+00:00",
        "2026-10-26T01:30:00+00:00",
    ]
    # Lord Howe: 01:45 twice on 2026-04-05, 02:15 missing on 2026-10-04.
    assert fires("every day 01:45", LORD_HOWE, utc(2026, 4, 4, 4, 30), 3) == [
        "2026-04-05T01:45:00+11:00",
        "2026-04-05T01:45:00+10:30",
        "2026-04-06T01:45:00+10:30",
    ]
    assert fires("every day 02:15", LORD_HOWE, utc(2026, 10, 3, 4, 30), 1) == ["2026-10-05T02:15:00+11:00"]


def test_groc_windowed_intervals_count_elapsed_time() -> None:
    assert fires("every 2 hours synchronized", NY, utc(2026, 3, 8, 4, 30), 3) == [
        "2026-03-08T00:00:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T05:00:00-04:00",
    ]
    assert fires("every 1 hours from 01:00 to 05:00", LORD_HOWE, utc(2026, 10, 3, 10, 30), 5) == [
        "2026-10-04T01:00:00+10:30",
        "2026-10-04T02:30:00+11:00",
        "2026-10-04T03:30:00+11:00",
        "2026-10-04T04:30:00+11:00",
        "2026-10-05T01:00:00+11:00",
    ]
    # A window starting in the skipped hour starts at the first minute after it.
    assert fires("every 20 minutes from 02:10 to 03:00", NY, utc(2026, 3, 8, 4, 30), 2) == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:10:00-04:00",
    ]
    findings = parse_schedule("every 2 hours synchronized").dst_findings(NY, utc(2026, 1, 1), utc(2027, 1, 1))
    assert [(f.kind, f.date.isoformat()) for f in findings] == [("skipped", "2026-03-08"), ("repeated", "2026-11-01")]
    assert "03:00" in findings[0].effect


def test_groc_plain_intervals_ignore_dst_and_snap_to_a_utc_grid() -> None:
    schedule = parse_schedule("every 5 minutes")
    assert fires("every 5 minutes", NY, utc(2026, 3, 8, 6, 58, 30), 2) == [
        "2026-03-08T03:03:00-04:00",
        "2026-03-08T03:08:00-04:00",
    ]
    assert schedule.dst_findings(NY, utc(2026, 1, 1), utc(2028, 1, 1)) == []
    snapped = schedule.latest_at_or_before(utc(2026, 3, 8, 6, 58, 30), NY)
    assert snapped.astimezone(UTC).isoformat() == "2026-03-08T06:55:00+00:00"  # type: ignore[union-attr]
    assert parse_schedule("every 48 hours").latest_at_or_before(utc(2026, 1, 2, 5), UTC) == utc(2026, 1, 1)


@pytest.mark.parametrize(
    "expr, says",
    [
        ("every 7 minutes synchronized", "divides 24 hours"),
        ("every 0 minutes", "at least 1"),
        ("every 2 days", "unexpected 's'"),
        ("every 2 hour", "unexpected 'hour'"),
        ("every day 24:00", "unexpected"),
        ("31 of feb 9:00", "never occurs"),
        ("first sunday of month", "expected a time of day"),
        ("every 48 hours on mon", "24 hours or less"),
        ("fourth monday of 4th month of quarter 10:00", "first/second/third month of quarter"),
        ("every 5 minutes from 10:00", "'to'"),
    ],
)
def test_groc_rejections_are_one_line(expr: str, says: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(expr)
    assert caught.value.field == "groc" and says in str(caught.value) and "\n" not in str(caught.value)


def test_time_zones() -> None:
    assert get_zone("utc").key == "UTC" and get_zone(None).key == "UTC"
    with pytest.raises(ScheduleError, match="time zone: 'Mars/Olympus' is not a tz database zone"):
        get_zone("Mars/Olympus")


@pytest.mark.parametrize("name", ["US", "America/Argentina", "Etc", "zone1970.tab", "tzdata.zi", "leapseconds"])
def test_a_name_that_is_a_folder_or_a_data_file_of_the_tz_database_is_no_zone(name: str) -> None:
    """The tz database's folders and its index files are found by ZoneInfo's lookup too; each is
    refused as a zone name, in one line, as an unknown name is."""
    with pytest.raises(ScheduleError, match=f"time zone: '{name}' is not a tz database zone name"):
        get_zone(name)
    with pytest.raises(ConfigError, match=f"'{name}' is not a tz database zone name") as caught:
        parse_routes(f"routes:\n  etl:\n    target: {{type: log}}\n    time_zone: {name}\n", "routes.yaml")
    assert "\n" not in str(caught.value)
