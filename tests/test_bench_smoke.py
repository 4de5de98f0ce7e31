"""The benchmarks still run and print what the README quotes (issue 14): `make bench`'s table and
bench/tail_phases.py, with tiny numbers. Their figures are read by a person (README, bench/PROFILE.md),
never asserted here: a timing assertion on a shared machine would test the machine."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from bench.bench_perf import ROWS
from tests.support.procs import REPO

pytestmark = pytest.mark.e2e

NUMBER = re.compile(r"^\d+(\.\d+)?$")
CONTAINER_ROWS = {"cold_start_container_s", "container_floor_s", "container_stack_floor_s"}  # --container only
RUNONCE_ONLY_ROWS = {"stack_floor_s", "stack_floor_cpu_s"}


def test_bench_perf_prints_every_row_for_every_contender() -> None:
    done = subprocess.run(
        [sys.executable, "bench/bench_perf.py", "--smoke"], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    for figure, label, _ in ROWS:
        text = label.format(rtt="5", memory="100")
        row = next((line for line in lines if line.startswith(text)), None)
        assert row is not None, f"no row {text!r} in:\n{done.stdout}"
        cells = row[len(text) :].split()[:3]  # runonce, seed, rewrite
        if figure in CONTAINER_ROWS:
            assert cells == ["n/a"] * 3, row
        elif figure in RUNONCE_ONLY_ROWS:
            assert NUMBER.match(cells[0]) and cells[1:] == ["n/a"] * 2, row
        else:
            assert all(NUMBER.match(cell) for cell in cells), row
    assert any(line.startswith("RSS runonce (MB) after N deliveries") for line in lines)


def test_tail_phases_splits_the_slowest_deliveries() -> None:
    done = subprocess.run(
        [sys.executable, "bench/tail_phases.py", "--deliveries", "100", "--warmup", "50"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "100 deliveries, one at a time" in out, out
    for phase in ("delivery", "commit", "read", "post", "own code"):
        assert re.search(rf"^  {phase} +n +\d+ +median +[\d.]+ +p99 +[\d.]+", out, re.MULTILINE), out
    # one at a time: each delivery made two commits (claim, finish), one read and one POST
    assert re.search(r"^  commit +n +200 ", out, re.MULTILINE) and re.search(r"^  post +n +100 ", out, re.MULTILINE), (
        out
    )
    assert re.search(r"^the \d+ deliveries at or above the p99 \([\d.]+ ms\): longest part ", out, re.MULTILINE), out
