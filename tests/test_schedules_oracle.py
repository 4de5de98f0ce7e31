"""Differential tests of the schedule engine against reference implementations.

- groc: Google's own evaluator from the App Engine SDK (`tests/support/groc_oracle.py`, run in a
  subprocess) over hundreds of generated schedules × zones × start instants, many of them next to
  DST transitions, and over malformed schedules (accepted or rejected alike).
- unix-cron: cronsim, on generated Cloud Scheduler expressions × zones × starts.

Known, deliberate differences (not generated): `every minute` (documented by Cloud Scheduler, rejected
by the SDK's older parser); zones with negative DST in pytz such as Europe/Dublin, where the oracle
runs a repeated specific time only in its second pass; cronsim started *inside* the second pass of
a repeated hour (it answers a time before the start), so cron starts avoid folds; and cronsim
in zones whose transitions are not whole hours away from midnight (Lord Howe's 30-minute shift,
Chatham's 02:45, Santiago's midnight): its wildcard iteration steps an hour of UTC at a time and
misses or invents fire times there ('*/15 2 * * 7' in Lord Howe on 2026-04-05 starts at 02:30; '*
*/2 * * 0' in Santiago on 2026-09-06 fires at 01:00). Those zones are checked against explicit
expectations in test_schedules.py and, for groc, against Google's evaluator here.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from cronsim import CronSim

from runonce.schedules import ScheduleError, get_zone, parse_schedule
from runonce.schedules.zones import timeline, to_instant
from tests.support.groc_oracle import run_oracle

ZONES = [
    "America/New_York",
    "Europe/London",
    "Australia/Lord_Howe",
    "UTC",
    "Europe/Berlin",
    "Pacific/Chatham",
    "America/St_Johns",
    "Australia/Adelaide",
    "Asia/Kolkata",
    "America/Santiago",
]
ORDINALS = ["1st", "first", "2nd", "second", "3rd", "third", "4th", "fourth", "5th", "fifth"]
WEEKDAYS = [
    "mon",
    "monday",
    "tue",
    "tuesday",
    "wed",
    "wednesday",
    "thu",
    "thursday",
    "fri",
    "friday",
    "sat",
    "saturday",
    "sun",
    "sunday",
]
MONTHS = [
    "jan",
    "january",
    "feb",
    "february",
    "mar",
    "march",
    "apr",
    "april",
    "may",
    "jun",
    "june",
    "jul",
    "july",
    "aug",
    "august",
    "sep",
    "september",
    "oct",
    "october",
    "nov",
    "november",
    "dec",
    "december",
]
DST_TIMES = ["00:00", "00:30", "01:00", "01:30", "01:45", "02:00", "02:15", "02:30", "02:45", "03:00", "03:30"]


def _time(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return rng.choice(DST_TIMES)
    hour = rng.randrange(24)
    return f"{hour:02d}:{rng.randrange(60):02d}" if rng.random() < 0.7 else f"{hour}:{rng.randrange(60):02d}"


def _pick(rng: random.Random, items: list[str], most: int) -> str:
    return ",".join(rng.sample(items, rng.randint(1, most)))


def generate_groc(rng: random.Random) -> str:
    form = rng.randrange(7)
    if form == 0:
        ordinals = "every" if rng.random() < 0.3 else _pick(rng, ORDINALS, 3)
        days = "day" if rng.random() < 0.15 else _pick(rng, WEEKDAYS, 3)
        return f"{ordinals} {days} {_time(rng)}"
    if form == 1:
        ordinals = "every" if rng.random() < 0.3 else _pick(rng, ORDINALS, 3)
        days = "day" if rng.random() < 0.2 else _pick(rng, WEEKDAYS, 3)
        months = rng.choice(
            [
                "month",
                _pick(rng, MONTHS, 3),
                "quarter",
                f"{_pick(rng, ['first', 'second', 'third'], 2)} month of quarter",
            ]
        )
        return f"{ordinals} {days} of {months} {_time(rng)}"
    if form == 2:
        days = ",".join(str(d) for d in rng.sample(range(1, 32), rng.randint(1, 4)))
        months = rng.choice(["month", _pick(rng, MONTHS, 3), "quarter"])
        return f"{days} of {months} {_time(rng)}"
    if form == 3:
        n, unit = rng.choice(
            [
                (1, "minutes"),
                (2, "mins"),
                (5, "minutes"),
                (7, "minutes"),
                (15, "mins"),
                (45, "minutes"),
                (90, "minutes"),
                (1, "hours"),
                (3, "hours"),
                (48, "hours"),
            ]
        )
        on = f" on {_pick(rng, WEEKDAYS, 3)}" if rng.random() < 0.3 and (unit != "hours" or n <= 24) else ""
        return f"every {n} {unit}{on}"
    if form == 4:
        n, unit = rng.choice(
            [
                (1, "minutes"),
                (5, "minutes"),
                (10, "mins"),
                (30, "minutes"),
                (1, "hours"),
                (2, "hours"),
                (3, "hours"),
                (6, "hours"),
                (12, "hours"),
                (24, "hours"),
            ]
        )
        on = f" on {_pick(rng, WEEKDAYS, 2)}" if rng.random() < 0.3 else ""
        return f"every {n} {unit} synchronized{on}"
    n, unit = rng.choice(
        [(5, "minutes"), (7, "minutes"), (20, "mins"), (45, "minutes"), (1, "hours"), (2, "hours"), (5, "hours")]
    )
    on = f" on {_pick(rng, WEEKDAYS, 2)}" if rng.random() < 0.3 else ""
    return f"every {n} {unit} from {_time(rng)} to {_time(rng)}{on}"


def _starts(rng: random.Random, zone_name: str, count: int) -> list[int]:
    """Start instants in 2025-2028, most within a day of (or inside) a DST transition."""
    lo = to_instant(datetime(2025, 1, 1, tzinfo=UTC))
    hi = to_instant(datetime(2028, 12, 1, tzinfo=UTC))
    transitions = timeline(get_zone(zone_name)).transitions(lo, hi)
    starts = []
    for _ in range(count):
        if transitions and rng.random() < 0.75:
            at = rng.choice(transitions).at
            starts.append(at + rng.randint(-36 * 3600, 6 * 3600))
        else:
            starts.append(rng.randint(lo, hi))
    return starts


GROC_SHARDS = 3
"""Google's evaluator takes about 4 s of CPU per shard of 600 cases: a shard a test, so two workers share them."""


@pytest.mark.subprocess
@pytest.mark.parametrize("shard", range(GROC_SHARDS))
def test_groc_matches_googles_evaluator(shard: int) -> None:
    rng = random.Random(20260308 + shard)
    cases = []
    while len(cases) < 600:
        expr = generate_groc(rng)
        for zone_name in rng.sample(ZONES, 3):
            for start in _starts(rng, zone_name, 2):
                cases.append({"expr": expr, "tz": zone_name, "start": start, "n": 8})
    answers = run_oracle(cases)
    assert len(answers) == len(cases)
    compared = rejected = 0
    mismatches = []
    for case, answer in zip(cases, answers, strict=True):
        try:
            schedule = parse_schedule(case["expr"])
        except ScheduleError as exc:
            if "error" not in answer:
                mismatches.append(f"{case['expr']!r}: we reject ({exc}), Google accepts")
            rejected += 1
            continue
        if "error" in answer:
            mismatches.append(f"{case['expr']!r}: we accept, Google rejects ({answer['error']})")
            continue
        zone = get_zone(case["tz"])
        start = datetime.fromtimestamp(case["start"], UTC)
        ours = [int(t.timestamp()) for _, t in zip(range(8), schedule.iter_after(start, zone), strict=False)]
        theirs = [int(t) for t in answer["matches"]]
        compared += 1
        if ours != theirs:
            fmt = lambda ts, zone=zone: [datetime.fromtimestamp(t, zone).strftime("%m-%d %H:%M%z") for t in ts]  # noqa: E731
            mismatches.append(
                f"{case['expr']!r} in {case['tz']} after {start:%Y-%m-%dT%H:%M:%SZ}:\n"
                f"  ours   {fmt(ours)}\n  Google {fmt(theirs)}"
            )
    assert not mismatches, f"{len(mismatches)} of {len(cases)} differ:\n" + "\n".join(mismatches[:10])
    assert compared > 500 and rejected < 50  # the generator makes mostly valid schedules


MUTATIONS = [
    lambda s, r: s.replace(" ", "", 1),
    lambda s, r: s + " foo",
    lambda s, r: s.replace(",", ",,", 1),
    lambda s, r: s.upper(),
    lambda s, r: s.replace("of", "in", 1),
    lambda s, r: s.replace(":", "", 1),
    lambda s, r: s.replace("every", "each", 1),
    lambda s, r: s.replace("minutes", "minute", 1),
    lambda s, r: s.replace("hours", "hour", 1),
    lambda s, r: " ".join(reversed(s.split())),
    lambda s, r: s.replace("1st", "0th").replace("first", "zeroth"),
    lambda s, r: s.replace("synchronized", "from 10:00 to 11:00 synchronized"),
    lambda s, r: f"every {r.choice([0, 100000, 99999, 24, 25, 1440, 1441])} {r.choice(['minutes', 'hours'])}",
    lambda s, r: f"{r.randint(0, 40)} of {r.choice(['feb', 'apr', 'month', 'quarter'])} 10:00",
    lambda s, r: f"every {r.randint(1, 49)} hours on mon",
    lambda s, r: f"every day {r.randint(0, 30)}:{r.randint(0, 70):02d}",
]


@pytest.mark.subprocess
def test_groc_accepts_and_rejects_like_googles_parser() -> None:
    rng = random.Random(7)
    texts = [rng.choice(MUTATIONS)(generate_groc(rng), rng) for _ in range(400)]
    texts = [t for t in texts if t.strip().lower() != "every minute"]  # documented by Cloud Scheduler only
    answers = run_oracle([{"expr": t, "tz": "UTC", "start": 0, "n": 0} for t in texts])
    disagree = []
    for text, answer in zip(texts, answers, strict=True):
        try:
            parse_schedule(text)
            ours = "accepts"
        except ScheduleError as exc:
            ours = f"rejects ({exc})"
        theirs = f"rejects ({answer['error']})" if "error" in answer else "accepts"
        if ours.split()[0] != theirs.split()[0]:
            disagree.append(f"{text!r}: we {ours}, Google {theirs}")
    assert not disagree, f"{len(disagree)} of {len(texts)}:\n" + "\n".join(disagree[:15])


def test_every_minute_is_accepted_as_cloud_scheduler_documents() -> None:
    schedule = parse_schedule("every minute")
    after = datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)
    assert [t.isoformat() for _, t in zip(range(2), schedule.iter_after(after, get_zone("UTC")), strict=False)] == [
        "2026-01-01T00:01:00+00:00",
        "2026-01-01T00:02:00+00:00",
    ]


# -- unix-cron against cronsim ------------------------------------------------------------------


def _cron_field(rng: random.Random, low: int, high: int, names: list[str] | None = None) -> str:
    def value() -> str:
        v = rng.randint(low, high)
        if names and rng.random() < 0.3:
            return names[v - low] if v - low < len(names) else str(v)
        return str(v)

    kind = rng.random()
    if kind < 0.3:
        return "*"
    if kind < 0.45:
        return f"*/{rng.randint(1, min(high, 13))}"
    if kind < 0.6:
        a, b = sorted(rng.sample(range(low, high + 1), 2))
        return f"{a}-{b}" + (f"/{rng.randint(1, 5)}" if rng.random() < 0.4 else "")
    return ",".join(sorted({value() for _ in range(rng.randint(1, 3))}))


def generate_cron(rng: random.Random) -> str:
    hour = rng.choice(["*", "*/2", "0-3", "1", "2", "1,2,3", "2-4/2", str(rng.randint(0, 23)), _cron_field(rng, 0, 23)])
    minute = rng.choice(["0", "30", "*/15", "*", "0,30", "15,45", _cron_field(rng, 0, 59)])
    dom = rng.choice(["*", "*", "*", _cron_field(rng, 1, 28)])
    month = rng.choice(
        [
            "*",
            "*",
            "*",
            _cron_field(
                rng, 1, 12, ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
            ),
        ]
    )
    dow = rng.choice(
        [
            "*",
            "*",
            "1-5",
            "MON-FRI",
            "0",
            "7",
            "SUN",
            "6,0",
            _cron_field(rng, 0, 6, ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]),
        ]
    )
    return f"{minute} {hour} {dom} {month} {dow}"


CRONSIM_ZONES = [
    "America/New_York",
    "Europe/London",
    "Europe/Berlin",
    "Australia/Adelaide",
    "America/St_Johns",
    "UTC",
    "Asia/Kolkata",
]


def test_cron_matches_cronsim_across_dst() -> None:
    rng = random.Random(42)
    compared = 0
    mismatches = []
    for _ in range(400):
        expr = generate_cron(rng)
        schedule = parse_schedule(expr)
        for zone_name in rng.sample(CRONSIM_ZONES, 3):
            zone = get_zone(zone_name)
            tl = timeline(zone)
            for start_instant in _starts(rng, zone_name, 2):
                # cronsim answers wrongly when started inside the second pass of a repeated hour
                boundary, _ = tl.segment(start_instant)
                if boundary.gap < 0 and start_instant < boundary.at - boundary.gap + 3600:
                    start_instant = boundary.at - boundary.gap + 3600
                start = datetime.fromtimestamp(start_instant, zone)
                theirs = [t.timestamp() for _, t in zip(range(12), CronSim(expr, start), strict=False)]
                ours = [t.timestamp() for _, t in zip(range(12), schedule.iter_after(start, zone), strict=False)]
                compared += 1
                if ours != theirs:
                    mismatches.append(
                        f"{expr!r} in {zone_name} after {start.isoformat()}:\n  ours    "
                        f"{[datetime.fromtimestamp(t, zone).isoformat() for t in ours]}\n  cronsim "
                        f"{[datetime.fromtimestamp(t, zone).isoformat() for t in theirs]}"
                    )
    assert not mismatches, f"{len(mismatches)} of {compared} differ:\n" + "\n".join(mismatches[:8])


@pytest.mark.parametrize("zone_name", ["America/New_York", "Europe/London", "Australia/Lord_Howe"])
def test_latest_at_or_before_is_the_inverse_of_next(zone_name: str) -> None:
    """For any instant t: p = latest_at_or_before(t) is a fire time, and no fire lies in (p, t]."""
    rng = random.Random(zone_name)
    zone = get_zone(zone_name)
    exprs = [generate_cron(rng) for _ in range(60)] + [generate_groc(rng) for _ in range(60)]
    for expr in exprs:
        schedule = parse_schedule(expr)
        for t_instant in _starts(rng, zone_name, 4):
            t = datetime.fromtimestamp(t_instant, UTC)
            p = schedule.latest_at_or_before(t, zone)
            assert p is not None, expr
            assert p <= t
            if getattr(schedule, "plain", False):
                continue  # plain intervals: next counts from its argument, prev uses the snap grid
            p = p.astimezone(UTC)  # zone-aware arithmetic would be wall-clock arithmetic
            following = schedule.next_after(p - timedelta(seconds=1), zone)
            # compare instants: datetimes in a fold never compare equal across zones (PEP 495)
            assert following is not None and following.timestamp() == p.timestamp(), (
                f"{expr!r} in {zone_name}: latest {p} before {t} is not a fire time"
            )
            assert schedule.next_after(p, zone).timestamp() > t.timestamp(), (
                f"{expr!r} in {zone_name}: a fire time between {p} and {t}"
            )
