"""Schedule engine benchmark: next-fire throughput beside cronsim's, and lint's two-year DST scan.

    .venv/bin/python bench/bench_schedules.py [--rounds 7]

Next-fire throughput, same expressions, zones and start instants for both engines, in one run:
- iterate: 2,000 consecutive fire times from one start (our `iter_after`; cronsim's iterator);
- one-shot: the first fire time after 500 different instants (our `next_after` on a parsed schedule;
  cronsim builds `CronSim(expr, start)` per instant, which is how its API is used).
Each figure is the median over the rounds of the time per fire time; ratio = cronsim / ours (> 1:
we are faster). The DST scan is `dst_findings` over two years, cold (empty zone cache) and warm;
the budget is 100 ms for any schedule, every-minute ones included.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cronsim import CronSim

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runonce.schedules import get_zone, parse_schedule
from runonce.schedules.zones import timeline

CRON_EXPRS = ["* * * * *", "*/5 * * * *", "30 2 * * *", "0 9 * * MON-FRI", "0 0 1 JAN,APR,JUL,OCT *", "15 10 1,15 * *"]
ZONES = ["UTC", "America/New_York", "Australia/Lord_Howe"]
SCAN_EXPRS = [
    "* * * * *",
    "*/5 * * * *",
    "30 2 * * *",
    "0 */2 * * *",
    "every 1 minutes synchronized",
    "every 5 minutes from 00:00 to 23:00",
    "every day 02:30",
    "every 5 minutes",
]
SCAN_ZONES = ["America/New_York", "Europe/London", "Australia/Lord_Howe", "Pacific/Chatham", "America/Santiago"]
START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def per_item(fn, items: int) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) / items * 1e6  # µs


def bench_iterate(expr: str, zone_name: str, rounds: int) -> tuple[float, float]:
    zone, schedule, n = get_zone(zone_name), parse_schedule(expr), 2000

    def ours() -> None:
        it = schedule.iter_after(START, zone)
        for _ in range(n):
            next(it)

    def theirs() -> None:
        it = CronSim(expr, START.astimezone(zone))
        for _ in range(n):
            next(it)

    ours_us = statistics.median(per_item(ours, n) for _ in range(rounds))
    theirs_us = statistics.median(per_item(theirs, n) for _ in range(rounds))
    return ours_us, theirs_us


def bench_one_shot(expr: str, zone_name: str, rounds: int) -> tuple[float, float]:
    zone, schedule = get_zone(zone_name), parse_schedule(expr)
    starts = [START + timedelta(minutes=97 * i) for i in range(500)]
    local_starts = [s.astimezone(zone) for s in starts]

    def ours() -> None:
        for s in starts:
            schedule.next_after(s, zone)

    def theirs() -> None:
        for s in local_starts:
            next(CronSim(expr, s))

    ours_us = statistics.median(per_item(ours, len(starts)) for _ in range(rounds))
    theirs_us = statistics.median(per_item(theirs, len(starts)) for _ in range(rounds))
    return ours_us, theirs_us


def bench_scan(rounds: int) -> list[tuple[str, str, float, float, int]]:
    rows = []
    end = START + timedelta(days=730)
    for expr in SCAN_EXPRS:
        schedule = parse_schedule(expr)
        for zone_name in SCAN_ZONES:
            zone = get_zone(zone_name)
            colds, warms = [], []
            for _ in range(rounds):
                timeline.cache_clear()
                t0 = time.perf_counter()
                findings = schedule.dst_findings(zone, START, end)
                colds.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                schedule.dst_findings(zone, START, end)
                warms.append((time.perf_counter() - t0) * 1000)
            rows.append((expr, zone_name, statistics.median(colds), statistics.median(warms), len(findings)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(
        f"Python {sys.version.split()[0]}, {args.rounds} rounds, medians; µs per fire time; ratio = cronsim / runonce\n"
    )
    for title, bench in (
        ("iterate (2,000 consecutive fire times)", bench_iterate),
        ("one-shot next after 500 instants", bench_one_shot),
    ):
        print(title)
        print(f"  {'expression':<26} {'zone':<20} {'runonce':>9} {'cronsim':>9} {'ratio':>6}")
        ratios = []
        for expr in CRON_EXPRS:
            for zone_name in ZONES:
                ours_us, theirs_us = bench(expr, zone_name, args.rounds)
                ratios.append(theirs_us / ours_us)
                print(f"  {expr:<26} {zone_name:<20} {ours_us:>9.2f} {theirs_us:>9.2f} {theirs_us / ours_us:>6.2f}")
        print(f"  median ratio {statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f})\n")
    print("DST scan, two years (ms; budget 100 ms)")
    print(f"  {'schedule':<36} {'zone':<20} {'cold':>7} {'warm':>7} {'findings':>8}")
    rows = bench_scan(args.rounds)
    for expr, zone_name, cold, warm, count in rows:
        print(f"  {expr:<36} {zone_name:<20} {cold:>7.2f} {warm:>7.2f} {count:>8}")
    worst = max(cold for _, _, cold, _, _ in rows)
    print(f"  slowest cold scan {worst:.2f} ms: {'within' if worst < 100 else 'OVER'} the 100 ms budget")


if __name__ == "__main__":
    main()
