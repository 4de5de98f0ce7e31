"""A local downstream HTTP service that counts what runonce sends it, per path and per
Idempotency-Key, and answers as each path's behaviour says (ok, fail, hang)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Downstream:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()  # by path
        self.keys: dict[str, list[str]] = {}  # path -> Idempotency-Key of each call
        self.bodies: dict[str, list[dict]] = {}
        self.behaviour: dict[str, tuple[int, float]] = {}  # path -> (status, delay seconds)
        self._lock = threading.Lock()
        downstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with downstream._lock:
                    downstream.calls[self.path] += 1
                    downstream.keys.setdefault(self.path, []).append(self.headers.get("Idempotency-Key", ""))
                    downstream.bodies.setdefault(self.path, []).append(body)
                    status, delay = downstream.behaviour.get(self.path, (200, 0.0))
                if delay:
                    time.sleep(delay)
                payload = json.dumps({"ok": status < 300}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # runonce gave up waiting (the hang case)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def set(self, path: str, status: int = 200, delay: float = 0.0) -> None:
        with self._lock:
            self.behaviour[path] = (status, delay)

    def __enter__(self) -> Downstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
