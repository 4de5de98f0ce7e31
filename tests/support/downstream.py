"""The downstream service runonce's `http` target calls, on a loopback port: it counts what it
receives per path and per Idempotency-Key, answers as each path's behaviour says (status, delay,
Retry-After), tracks how many requests it serves at once, and can require a token (`authorize`)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Downstream:
    """`authorize(path, authorization_header)` returns the token's claims (kept in `received`) or
    raises ValueError: the request is then refused with 401 and its reason kept in `rejected`."""

    def __init__(self, authorize: Callable[[str, str | None], Any] | None = None) -> None:
        self.calls: Counter[str] = Counter()  # by path
        self.keys: dict[str, list[str]] = {}  # path -> Idempotency-Key of each call
        self.bodies: dict[str, list[dict]] = {}
        self.received: list[dict[str, Any]] = []  # every accepted request: path, key, authorization, claims, body
        self.rejected: list[str] = []  # why `authorize` refused a request
        self.behaviour: dict[str, tuple[int, float, str | None]] = {}  # path -> (status, delay, Retry-After)
        self.active = self.max_active = 0  # requests being served now, and the most at once
        self._lock = threading.Lock()
        downstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length)
                authorization = self.headers.get("Authorization")
                try:
                    claims = authorize(self.path, authorization) if authorize else None
                except ValueError as exc:
                    with downstream._lock:
                        downstream.rejected.append(str(exc))
                    self._answer(401, None, {"error": str(exc)})
                    return
                body = json.loads(raw or b"{}")
                key = self.headers.get("Idempotency-Key")
                with downstream._lock:
                    downstream.calls[self.path] += 1
                    downstream.keys.setdefault(self.path, []).append(key or "")
                    downstream.bodies.setdefault(self.path, []).append(body)
                    downstream.received.append(
                        {"path": self.path, "key": key, "authorization": authorization, "claims": claims, "body": body}
                    )
                    status, delay, retry_after = downstream.behaviour.get(self.path, (200, 0.0, None))
                    downstream.active += 1
                    downstream.max_active = max(downstream.max_active, downstream.active)
                try:
                    if delay:
                        time.sleep(delay)
                finally:
                    with downstream._lock:
                        downstream.active -= 1
                self._answer(status, retry_after, {"ok": status < 300})

            def _answer(self, status: int, retry_after: str | None, body: dict) -> None:
                payload = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    if retry_after is not None:
                        self.send_header("Retry-After", retry_after)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # runonce gave up waiting (the hang case)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # A short poll: `close` (shutdown) waits for the loop's next poll, 0.5 s by default.
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def set(self, path: str, status: int = 200, delay: float = 0.0, retry_after: str | None = None) -> None:
        """How `path` answers from now on: `status` after `delay` seconds, with `Retry-After` if given."""
        with self._lock:
            self.behaviour[path] = (status, delay, retry_after)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Downstream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
