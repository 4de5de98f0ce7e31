"""`http` target with `audience`: the proxy sends a Google-signed ID token (from the metadata server)
that the downstream verifies, and fetches a new one only when the cached one is about to expire."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.http_server import LoopbackServer, Reply, Request
from tests.fakes.metadata import FakeMetadataServer
from tests.support.procs import ServerProcess, start_server

from .harness import deliver, new_schedule_time, server_env

pytestmark = pytest.mark.e2e

AUDIENCE = "https://report-abc123-uc.a.run.app"
IDENTITY = "/computeMetadata/v1/instance/service-accounts/default/identity"


class Downstream:
    """A Cloud Run service that requires a Google ID token for its URL and dedupes nothing itself."""

    def __init__(self, metadata: FakeMetadataServer):
        self.metadata = metadata
        self.received: list[dict[str, Any]] = []
        self.rejected: list[str] = []
        self._lock = threading.Lock()
        self._server = LoopbackServer(self._handle)
        self.url = self._server.url

    def _handle(self, request: Request) -> Reply:
        authorization = request.headers.get("Authorization")
        try:
            claims = self.metadata.verify_id_token(authorization, AUDIENCE) if request.path == "/secure" else None
        except ValueError as exc:
            with self._lock:
                self.rejected.append(str(exc))
            return Reply(401, {"error": str(exc)})
        with self._lock:
            self.received.append({
                "path": request.path,
                "key": request.headers.get("Idempotency-Key"),
                "authorization": authorization,
                "claims": claims,
                "body": json.loads(request.raw_body),
            })
        return Reply(200, {"ok": True})

    def close(self) -> None:
        self._server.close()


@pytest.fixture(scope="module")
def downstream(metadata: FakeMetadataServer) -> Iterator[Downstream]:
    server = Downstream(metadata)
    yield server
    server.close()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, metadata, fakes, downstream: Downstream) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("runonce-http")
    namespace = {"project": "runonce-test", "location": "us-central1"}
    routes = {"routes": {
        "report": {"target": {"type": "http", "url": f"{downstream.url}/secure", "audience": AUDIENCE}, "namespace": namespace},
        "open": {"target": {"type": "http", "url": f"{downstream.url}/open"}, "namespace": namespace},
    }}
    server = start_server(server_env(tmp, metadata, fakes, routes), tmp)
    yield server
    server.stop()


def test_id_token_for_the_audience_is_sent_cached_and_refreshed(proxy, downstream: Downstream, metadata) -> None:
    before = metadata.calls[IDENTITY]
    metadata.id_token_lifetime = 120  # inside google-auth's refresh margin: stale at once
    for _ in range(2):
        response = deliver(proxy.url, "report", new_schedule_time())
        assert response.status_code == 200, response.text
    assert metadata.calls[IDENTITY] - before == 2  # a stale token is never reused

    metadata.id_token_lifetime = 3600
    run_ids = []
    for _ in range(3):
        response = deliver(proxy.url, "report", new_schedule_time())
        assert response.status_code == 200, response.text
        run_ids.append(response.json()["run_id"])
    assert metadata.calls[IDENTITY] - before == 3  # one fresh token, then reused for every run

    assert downstream.rejected == []
    seen = [r for r in downstream.received if r["path"] == "/secure"]
    assert [r["key"] for r in seen[-3:]] == run_ids
    for received in seen:
        assert received["claims"]["aud"] == AUDIENCE
        assert received["claims"]["email"].startswith("runonce@")
        assert received["body"]["run_id"] == received["key"]


def test_without_audience_no_token_is_sent(proxy, downstream: Downstream) -> None:
    response = deliver(proxy.url, "open", new_schedule_time())
    assert response.status_code == 200, response.text
    [received] = [r for r in downstream.received if r["path"] == "/open"]
    assert received["authorization"] is None
    assert received["key"] == response.json()["run_id"]
