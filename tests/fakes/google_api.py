"""What every fake Google API shares: a script of misbehaviours, the record of what it created,
and the list of contract violations (requests Google would reject) that a test asserts is empty.

Scripted steps, consumed one per call of the named method:

    fail(...)                answer an error (Google's error shape) and create nothing
    drop_after_create()      create, then drop the connection without answering (lost response)
    hang_after_create(s)     create, then answer only after `s` seconds (the caller times out)
    hold_after_create()      create, set `created`, and wait for `release()` before dropping the
                             connection (lets a test kill the proxy mid-call)
    fail_after_create(...)   create, then answer an error (e.g. a gateway's 504)
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

HTTP_STATUS_OF = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}


@dataclass
class Step:
    kind: str  # fail | drop | hang | hold | fail_after
    code: str = "UNAVAILABLE"
    message: str = ""
    retry_after: str | None = None  # HTTP Retry-After header
    retry_delay: float | None = None  # google.rpc.RetryInfo
    seconds: float = 0.0
    http_status: int | None = None

    @property
    def status(self) -> int:
        return self.http_status or HTTP_STATUS_OF[self.code]


@dataclass
class Created:
    method: str
    resource: str
    token: str | None
    data: dict[str, Any] = field(default_factory=dict)


LIVE_FAKES: weakref.WeakSet = weakref.WeakSet()
"""Every fake alive in this test session. tests/conftest.py resets them before each test and fails
the test if one recorded a violation. Any fake with `violations` (a list) and `reset()` may join."""


class FakeGoogleApi:
    """State and script of one fake API; thread-safe (REST fakes serve from many threads)."""

    def __init__(self) -> None:
        LIVE_FAKES.add(self)
        self.lock = threading.RLock()
        self._script: dict[str, deque[Step]] = {}
        self.violations: list[str] = []
        self.created: list[Created] = []
        self.calls: Counter[str] = Counter()
        self.created_event = threading.Event()
        self._gate = threading.Event()
        self.create_delay = 0.0

    # --- scripting ---
    def _push(self, method: str, step: Step, times: int) -> None:
        with self.lock:
            self._script.setdefault(method, deque()).extend(step for _ in range(times))

    def fail(
        self,
        method: str,
        code: str,
        message: str,
        *,
        times: int = 1,
        http_status: int | None = None,
        retry_after: str | None = None,
        retry_delay: float | None = None,
    ) -> None:
        self._push(method, Step("fail", code, message, retry_after, retry_delay, http_status=http_status), times)

    def drop_after_create(self, method: str) -> None:
        self._push(method, Step("drop"), 1)

    def hang_after_create(self, method: str, seconds: float) -> None:
        self._push(method, Step("hang", seconds=seconds), 1)

    def hold_after_create(self, method: str) -> None:
        self._gate.clear()
        self.created_event.clear()
        self._push(method, Step("hold"), 1)

    def fail_after_create(self, method: str, code: str, message: str, http_status: int | None = None) -> None:
        self._push(method, Step("fail_after", code, message, http_status=http_status), 1)

    def release(self) -> None:
        self._gate.set()

    def wait_held(self, timeout: float = 30) -> None:
        self._gate.wait(timeout)

    def next_step(self, method: str) -> Step | None:
        with self.lock:
            self.calls[method] += 1
            queue = self._script.get(method)
            return queue.popleft() if queue else None

    def pending_steps(self) -> int:
        with self.lock:
            return sum(len(q) for q in self._script.values())

    def reset(self) -> None:
        """A clean slate for the next test (the fakes are session-scoped): no violations, no script
        left over, no create delay, nothing held. What was created stays: runs never share a token."""
        with self.lock:
            self.violations.clear()
            self._script.clear()
            self.create_delay = 0.0
        self._gate.set()

    # --- records ---
    def take_violations(self) -> list[str]:
        """The violations so far, cleared: for a test that provokes one on purpose."""
        with self.lock:
            taken, self.violations = self.violations, []
        return taken

    def violation(self, message: str) -> None:
        with self.lock:
            self.violations.append(message)

    def record_created(self, method: str, resource: str, token: str | None, data: dict[str, Any]) -> None:
        with self.lock:
            self.created.append(Created(method, resource, token, data))
        self.created_event.set()

    def created_for(self, token: str) -> list[str]:
        """Resources created carrying this run_id as their idempotency token."""
        with self.lock:
            return [c.resource for c in self.created if c.token == token]


def error_body(code: str, message: str, status: int, domain: str, retry_delay: float | None = None) -> dict[str, Any]:
    """Google's JSON error answer (AIP-193): `{"error": {code, message, status, details}}`."""
    details: list[dict[str, Any]] = [
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": code, "domain": domain}
    ]
    if retry_delay is not None:
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{retry_delay:g}s"})
    return {"error": {"code": status, "message": message, "status": code, "details": details}}
