"""A loopback HTTP server in a thread, for fakes that need full control of the socket (answer,
stall, or drop the connection without a byte of answer)."""

from __future__ import annotations

import json
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


class Request:
    def __init__(self, handler: BaseHTTPRequestHandler, body: bytes):
        url = urlsplit(handler.path)
        self.method = handler.command
        self.path = url.path
        self.query = parse_qs(url.query, keep_blank_values=True)
        self.headers = handler.headers
        self.raw_body = body

    def json(self) -> Any:
        return json.loads(self.raw_body) if self.raw_body else None


class Reply:
    """What the handler tells the server to do."""

    def __init__(self, status: int = 200, body: Any = None, headers: dict[str, str] | None = None, drop: bool = False):
        self.status = status
        self.body = body
        self.headers = headers or {}
        self.drop = drop


DROP = Reply(drop=True)


class LoopbackServer:
    """Serve `handle(request) -> Reply` on 127.0.0.1:<free port> until `close()`."""

    def __init__(self, handle):

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                reply = handle(Request(self, body))
                if reply.drop:
                    # RST, no answer: the client sees the connection die after sending its request.
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    return
                payload = (
                    b""
                    if reply.body is None
                    else (reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode())
                )
                try:
                    self.send_response(reply.status)
                    content_type = reply.headers.pop("Content-Type", "application/json")
                    self.send_header("Content-Type", content_type)
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        # A short poll: `close` (shutdown) waits for the loop's next poll, 0.5 s by default.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, name=f"fake-{self.port}", daemon=True
        )
        self._thread.start()
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
