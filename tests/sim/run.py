"""Run many histories within a budget, shrink a failing one, print the figures.

RUNONCE_SIM_SEED=N            first seed (default: fixed, so CI is reproducible)
RUNONCE_SIM_HISTORIES=N       histories per store (default below)
RUNONCE_SIM_SECONDS=S         stop a store's histories after S seconds of wall time
"""

from __future__ import annotations

import gc
import json
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass, field

from .world import Report, draw_config, run_history

DEFAULT_SEED = 20261016


@dataclass
class Summary:
    store: str
    first_seed: int
    histories: int = 0
    answers: int = 0
    crashes: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    covered: Counter[str] = field(default_factory=Counter)
    failures: list[Report] = field(default_factory=list)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        kinds = ", ".join(f"{k}={n}" for k, n in sorted(self.faults.items())) or "none"
        lines = [
            f"sim[{self.store}]: seeds {self.first_seed}..{self.first_seed + self.histories - 1}, "
            f"{self.histories} histories, {self.answers} answers, {self.crashes} instance crashes, "
            f"{len(self.failures)} histories with violations, {self.seconds:.1f}s",
            f"sim[{self.store}]: faults by kind: {kinds}",
            f"sim[{self.store}]: covered: {', '.join(f'{k} {n}' for k, n in sorted(self.covered.items()))}",
        ]
        for report in self.failures[:3]:
            lines.extend(describe(report))
        return lines


def quiet() -> None:
    """The app logs every 5xx; thousands of histories would drown the output."""
    logging.disable(logging.CRITICAL)


def explore(store: str, first_seed: int, histories: int, seconds: float, shrink_failures: bool = True) -> Summary:
    summary = Summary(store, first_seed)
    started = time.monotonic()
    quiet()
    try:
        for seed in range(first_seed, first_seed + histories):
            if time.monotonic() - started > seconds:
                break
            report = run_history(draw_config(seed, store))
            summary.histories += 1
            summary.answers += report.answers
            summary.crashes += report.crashes
            summary.covered.update(report.covered)
            summary.faults.update(f"{key.split(':')[0]}.{kind}" for key, kind in report.faults.items())
            if report.violations:
                summary.failures.append(shrink(report) if shrink_failures and len(summary.failures) < 3 else report)
    finally:
        gc.collect()  # crashed requests are closed here, while their last log lines are muted
        logging.disable(logging.NOTSET)
    summary.seconds = time.monotonic() - started
    return summary


def shrink(report: Report) -> Report:
    """Replay the seed with fewer faults, one at a time, while the history still fails: what is
    left is a minimal fault list for that seed (each remaining fault is needed)."""
    config, best = report.config, report
    changed = True
    while changed:
        changed = False
        for key in sorted(best.faults):
            fewer = {k: v for k, v in best.faults.items() if k != key}
            again = run_history(config, fewer)
            if again.violations:
                best, changed = again, True
                break
    return best


def replay_command(report: Report) -> str:
    faults = json.dumps(report.faults, sort_keys=True)
    return (
        f".venv/bin/python -m tests.sim --store {report.config.store} --seed {report.config.seed} --faults '{faults}'"
    )


def describe(report: Report) -> list[str]:
    lines = [
        f"  seed {report.config.seed} ({report.config.store}): {len(report.violations)} violation(s) with faults "
        f"{report.faults}"
    ]
    lines += [f"    {v}" for v in report.violations[:5]]
    lines.append(f"    replay: {replay_command(report)}")
    return lines


def budget(store: str) -> tuple[int, int, float]:
    """(first seed, histories, seconds) from the environment, with CI's defaults per store."""
    default = {"memory": 2000, "sqlite": 800, "firestore": 60, "spanner": 60, "redis": 200}[store]
    seed = int(os.environ.get("RUNONCE_SIM_SEED", DEFAULT_SEED))
    histories = int(os.environ.get("RUNONCE_SIM_HISTORIES", default))
    seconds = float(os.environ.get("RUNONCE_SIM_SECONDS", 10_000))
    return seed, histories, seconds
