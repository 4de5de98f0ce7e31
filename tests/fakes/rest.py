"""Base of the fake Google REST APIs: every request is checked against the API's discovery
document and its bearer token against the fake metadata server, then handled by the subclass
(`handle`), with the scripted misbehaviours of `FakeGoogleApi` applied around it."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, ClassVar

from tests.support.discovery import Discovery, Violation

from .google_api import FakeGoogleApi, Step, error_body
from .http_server import DROP, LoopbackServer, Reply, Request
from .metadata import FakeMetadataServer


def now_rfc3339() -> str:
    """Google's timestamp form, nanoseconds included."""
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond:06d}123Z"


class ApiError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class FakeRestApi(FakeGoogleApi):
    discovery_name: str
    domain: str
    creating_methods: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, metadata: FakeMetadataServer):
        super().__init__()
        self.discovery = Discovery(self.discovery_name)
        self.metadata = metadata
        self._server = LoopbackServer(self._serve)
        self.url = self._server.url

    def close(self) -> None:
        self.release()
        self._server.close()

    def handle(self, method_id: str, params: dict[str, str], request: Request) -> dict[str, Any]:
        """Answer one valid request (200), or raise ApiError."""
        raise NotImplementedError

    def _error(self, code: str, message: str, step: Step | None = None, status: int | None = None) -> Reply:
        status = status or (step.status if step else None) or error_status(code)
        headers = {"Retry-After": step.retry_after} if step and step.retry_after else {}
        delay = step.retry_delay if step else None
        return Reply(status, error_body(code, message, status, self.domain, delay), headers)

    def _serve(self, request: Request) -> Reply:
        try:
            body = request.json()
        except ValueError:
            self.violation(f"{request.method} {request.path}: body is not JSON")
            return self._error("INVALID_ARGUMENT", "Invalid JSON payload received.")
        try:
            method_id, params = self.discovery.match(request.method, request.path, request.query, body)
        except Violation as exc:
            self.violation(str(exc))
            return self._error("INVALID_ARGUMENT", str(exc))
        if not self.metadata.valid_access_token(request.headers.get("Authorization")):
            self.violation(f"{method_id}: no valid access token from the metadata server")
            return self._error("UNAUTHENTICATED", "Request had invalid authentication credentials.")

        step = self.next_step(method_id)
        if step is not None and step.kind == "fail":
            return self._error(step.code, step.message, step)
        if method_id in self.creating_methods and self.create_delay:
            time.sleep(self.create_delay)
        try:
            answer = self.handle(method_id, params, request)
        except ApiError as exc:
            return self._error(exc.code, exc.message)
        response_ref = self.discovery.method(method_id).spec.get("response", {}).get("$ref")
        if response_ref:
            try:
                self.discovery.check(answer, {"$ref": response_ref}, f"fake answer {response_ref}")
            except Violation as exc:  # the fake itself is wrong: fail the test too
                self.violation(str(exc))
        if step is None:
            return Reply(200, answer)
        if step.kind == "drop":
            return DROP
        if step.kind == "hang":
            time.sleep(step.seconds)
            return Reply(200, answer)
        if step.kind == "hold":
            self.wait_held()
            return DROP
        if step.kind == "fail_after":
            return self._error(step.code, step.message, step)
        raise AssertionError(f"unknown step {step.kind}")


def error_status(code: str) -> int:
    from .google_api import HTTP_STATUS_OF

    return HTTP_STATUS_OF[code]
