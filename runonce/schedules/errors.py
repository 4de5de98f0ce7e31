"""The one error of the schedule engine: which part of the expression is wrong, and why."""

from __future__ import annotations

from runonce.errors import RunonceError


class ScheduleError(RunonceError, ValueError):
    """A schedule or time zone that Cloud Scheduler would reject (or that could never fire).

    `field` names the part at fault (`day-of-week`, `minute`, `groc`, `time zone`) and `text` the
    offending piece, if any; `str()` is one line, e.g.
    `day-of-week field '5L': 'L' (last day) is not supported by Cloud Scheduler`.
    """

    def __init__(self, field: str, reason: str, text: str | None = None):
        where = f"{field} field {text!r}" if text is not None else field
        super().__init__(f"{where}: {reason}")
        self.field = field
        self.reason = reason
        self.text = text
