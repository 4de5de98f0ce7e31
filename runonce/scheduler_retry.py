"""Cloud Scheduler's retry window: how long after a run's first attempt its retries can arrive.

The one implementation: `runonce lint`, the deploy scripts (`python3 runonce/scheduler_retry.py`, no
install needed: standard library only) and Terraform's rules.tf (held to this by a test) use it.

Scheduler's RetryConfig, as documented:
- the wait before retry i starts at `minBackoffDuration`, doubles `maxDoublings` times, then grows
  linearly by `minBackoffDuration * 2^maxDoublings`, and is capped at `maxBackoffDuration`
  (10s, 300s, 3 doublings: 10, 20, 40, 80, 160, 240, 300, 300, ...);
- retries go on until BOTH `retryCount` and `maxRetryDuration` (measured from the first attempt)
  are used up; a `maxRetryDuration` of 0 sets no time limit, so `retryCount` alone decides;
- a retry waits for the previous attempt to end: an attempt ends when it is answered, at the
  latest after `attemptDeadline`.

So the window has two bounds, and each rule needs one of them:
- `shortest`: when the last retry starts if every attempt is answered at once (runonce answers
  409 at once while another attempt holds the claim). A dead attempt's claim is only taken over by
  a retry that comes after the lease: the rule "shortest >= lease + attempt deadline".
- `longest`: when the last attempt ends if every attempt takes the whole deadline. Records must
  outlive it (retention), and a run that fails for that long delays or skips the job's next runs.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Scheduler's defaults for fields the API leaves out (RetryConfig, and Job.attemptDeadline for
# HTTP targets).
DEFAULT_ATTEMPT_DEADLINE = 180.0
DEFAULT_MIN_BACKOFF = 5.0
DEFAULT_MAX_BACKOFF = 3600.0
DEFAULT_MAX_DOUBLINGS = 5
MAX_RETRIES = 10_000  # a zero backoff with a time limit would retry forever in no time


@dataclass(frozen=True)
class RetryConfig:
    """A job's retry settings, in seconds."""

    retry_count: int = 0
    min_backoff: float = DEFAULT_MIN_BACKOFF
    max_backoff: float = DEFAULT_MAX_BACKOFF
    max_doublings: int = DEFAULT_MAX_DOUBLINGS
    max_retry_duration: float = 0.0
    attempt_deadline: float = DEFAULT_ATTEMPT_DEADLINE

    @classmethod
    def from_job(cls, job: Mapping[str, Any]) -> RetryConfig:
        """From a Job resource as the API returns it (absent fields take Scheduler's defaults).
        Raises ValueError naming the field that is not a duration or a count."""
        config = job.get("retryConfig") or {}
        return cls(
            retry_count=_count(config.get("retryCount", 0), "retryConfig.retryCount"),
            min_backoff=duration_seconds(
                config.get("minBackoffDuration", f"{DEFAULT_MIN_BACKOFF:g}s"), "retryConfig.minBackoffDuration"
            ),
            max_backoff=duration_seconds(
                config.get("maxBackoffDuration", f"{DEFAULT_MAX_BACKOFF:g}s"), "retryConfig.maxBackoffDuration"
            ),
            max_doublings=_count(config.get("maxDoublings", DEFAULT_MAX_DOUBLINGS), "retryConfig.maxDoublings"),
            max_retry_duration=duration_seconds(config.get("maxRetryDuration", "0s"), "retryConfig.maxRetryDuration"),
            attempt_deadline=duration_seconds(
                job.get("attemptDeadline", f"{DEFAULT_ATTEMPT_DEADLINE:g}s"), "attemptDeadline"
            ),
        )

    def backoff(self, retry: int) -> float:
        """The wait before retry number `retry` (1-based), after the previous attempt ended."""
        if retry <= self.max_doublings + 1:
            wait = self.min_backoff * 2 ** (retry - 1)
        else:
            wait = self.min_backoff * 2**self.max_doublings * (retry - self.max_doublings)
        return min(wait, self.max_backoff)

    def describe(self) -> str:
        text = (
            f"retryCount {self.retry_count}, backoff {self.min_backoff:g}s..{self.max_backoff:g}s with "
            f"{self.max_doublings} doublings, attempt deadline {self.attempt_deadline:g}s"
        )
        if self.max_retry_duration:
            text += f", maxRetryDuration {self.max_retry_duration:g}s"
        return text


@dataclass(frozen=True)
class RetryWindow:
    retries: int  # retries of one run, at most (with every attempt taking the deadline)
    shortest: float  # last retry's start, every attempt answered at once
    longest: float  # last attempt's end, every attempt taking the whole deadline


def _last_retry(config: RetryConfig, attempt_seconds: float) -> tuple[int, float]:
    """(retries, start of the last attempt) when each attempt takes `attempt_seconds`."""
    retries, start = 0, 0.0
    while retries < MAX_RETRIES:
        following = start + attempt_seconds + config.backoff(retries + 1)
        within_count = retries < config.retry_count
        within_time = config.max_retry_duration > 0 and following <= config.max_retry_duration
        if not (within_count or within_time):
            break
        retries, start = retries + 1, following
    return retries, start


def retry_window(config: RetryConfig) -> RetryWindow:
    _, shortest = _last_retry(config, 0.0)
    retries, last_start = _last_retry(config, config.attempt_deadline)
    return RetryWindow(retries, shortest, last_start + config.attempt_deadline)


def duration_seconds(value: object, field: str) -> float:
    """A google-duration (`"300s"`, `"0.5s"`) in seconds."""
    if isinstance(value, str) and re.fullmatch(r"\d+(?:\.\d+)?s", value):
        return float(value[:-1])
    raise ValueError(f"{field}: {value!r} is not a duration like '300s'")


def _count(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).isdigit():
        raise ValueError(f"{field}: {value!r} is not a whole number")
    return int(value)


def _number(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:g}"


def main(argv: list[str] | None = None) -> None:
    """For the deploy scripts: print `RETRIES SHORTEST LONGEST` (seconds) on one line."""
    parser = argparse.ArgumentParser(description="Cloud Scheduler's retry window of one job, in seconds.")
    parser.add_argument("--attempt-deadline", type=float, default=DEFAULT_ATTEMPT_DEADLINE)
    parser.add_argument("--retry-count", type=int, default=0)
    parser.add_argument("--min-backoff", type=float, default=DEFAULT_MIN_BACKOFF)
    parser.add_argument("--max-backoff", type=float, default=DEFAULT_MAX_BACKOFF)
    parser.add_argument("--max-doublings", type=int, default=DEFAULT_MAX_DOUBLINGS)
    parser.add_argument("--max-retry-duration", type=float, default=0.0)
    args = parser.parse_args(argv)
    window = retry_window(
        RetryConfig(
            args.retry_count,
            args.min_backoff,
            args.max_backoff,
            args.max_doublings,
            args.max_retry_duration,
            args.attempt_deadline,
        )
    )
    print(window.retries, _number(window.shortest), _number(window.longest))


if __name__ == "__main__":
    main()
