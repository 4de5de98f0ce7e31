"""Cloud Scheduler's retry window (runonce/scheduler_retry.py): the one implementation that lint, the
deploy scripts and Terraform's rules are held to."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runonce.scheduler_retry import RetryConfig, retry_window

REPO = Path(__file__).resolve().parents[1]


def test_backoff_follows_the_documented_example() -> None:
    # RetryConfig's documented example: 10 s doubling 3 times, then +80 s, capped at 300 s.
    config = RetryConfig(retry_count=8, min_backoff=10, max_backoff=300, max_doublings=3, attempt_deadline=15)
    assert [config.backoff(i) for i in range(1, 9)] == [10, 20, 40, 80, 160, 240, 300, 300]
    window = retry_window(config)
    assert window.retries == 8
    assert window.shortest == 10 + 20 + 40 + 80 + 160 + 240 + 300 + 300
    assert window.longest == window.shortest + 9 * 15


def test_no_retries_is_one_attempt() -> None:
    assert retry_window(RetryConfig()) == retry_window(RetryConfig.from_job({}))
    assert retry_window(RetryConfig.from_job({})).longest == 180  # Scheduler's default deadline
    assert retry_window(RetryConfig.from_job({})).shortest == 0


def test_retries_go_on_until_both_count_and_duration_are_used_up() -> None:
    # The count alone would stop at 20 + 40 = 60 s; the time limit keeps retrying (at the
    # growing, then capped backoff) while a retry still starts within 1000 s.
    config = RetryConfig(
        retry_count=2, min_backoff=20, max_backoff=300, max_doublings=4, max_retry_duration=1000, attempt_deadline=60
    )
    window = retry_window(config)
    # shortest: retries start at 20, 60, 140, 300, 600, 900; 1200 > 1000 stops.
    assert window.shortest == 900
    # longest, every attempt taking 60 s: starts at 80, 180, 320, 540, 900; 1260 > 1000 stops.
    assert (window.retries, window.longest) == (5, 900 + 60)
    # And a count that outlasts the time limit keeps its retries.
    long_count = RetryConfig(
        retry_count=5, min_backoff=20, max_backoff=300, max_doublings=4, max_retry_duration=30, attempt_deadline=60
    )
    assert retry_window(long_count).shortest == 600


def test_a_time_limit_alone_retries_too() -> None:
    config = RetryConfig(
        retry_count=0, min_backoff=100, max_backoff=100, max_doublings=0, max_retry_duration=350, attempt_deadline=15
    )
    assert retry_window(config).shortest == 300
    assert retry_window(config).retries == 3  # starts at 115, 230, 345


def test_from_job_names_the_bad_field() -> None:
    with pytest.raises(ValueError, match=r"retryConfig.minBackoffDuration: '5m' is not a duration"):
        RetryConfig.from_job({"retryConfig": {"minBackoffDuration": "5m"}})
    with pytest.raises(ValueError, match=r"retryConfig.retryCount"):
        RetryConfig.from_job({"retryConfig": {"retryCount": -1}})


@pytest.mark.subprocess
def test_the_deploy_scripts_entry_point_prints_retries_and_both_bounds() -> None:
    """deploy/lib/common.sh runs the file with a bare python3: no install, standard library only."""
    result = subprocess.run(
        [
            sys.executable,
            "-I",
            str(REPO / "runonce" / "scheduler_retry.py"),
            "--attempt-deadline",
            "60",
            "--retry-count",
            "5",
            "--min-backoff",
            "20",
            "--max-backoff",
            "300",
            "--max-doublings",
            "4",
            "--max-retry-duration",
            "0",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout == "5 600 960\n"
