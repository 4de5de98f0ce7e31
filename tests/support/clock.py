"""The clock a test moves by hand: no test sleeps for a lease or a cache lifetime."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

START = datetime(2026, 10, 16, 12, 0, 0, tzinfo=UTC)


class Clock:
    """Tells `now` until the test moves it. `Clock()` tells a UTC datetime (runonce's clocks);
    `Clock(1000.0)` tells seconds, for code that reads a float clock (`time.monotonic`, `time.time`)."""

    def __init__(self, start: datetime | float | None = None):
        self.now: datetime | float = START if start is None else start

    def __call__(self) -> datetime | float:
        return self.now

    def advance(self, seconds: float) -> datetime | float:
        if isinstance(self.now, datetime):
            self.now = self.now + timedelta(seconds=seconds)
        else:
            self.now = self.now + seconds
        return self.now
