"""`http` target with `audience`: the proxy sends a Google-signed ID token (from the metadata server)
that the downstream verifies, and fetches a new one only when the cached one is about to expire."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.metadata import FakeMetadataServer
from tests.support.downstream import Downstream
from tests.support.procs import ServerProcess, start_server

from .harness import deliver, new_schedule_time, server_env

pytestmark = pytest.mark.e2e

AUDIENCE = "https://report-abc123-uc.a.run.app"
IDENTITY = "/computeMetadata/v1/instance/service-accounts/default/identity"


@pytest.fixture(scope="module")
def downstream(metadata: FakeMetadataServer) -> Iterator[Downstream]:
    """A Cloud Run service that requires a Google ID token for its URL on /secure and dedupes nothing itself."""

    def authorize(path: str, authorization: str | None) -> Any:
        return metadata.verify_id_token(authorization, AUDIENCE) if path == "/secure" else None

    with Downstream(authorize) as server:
        yield server


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, metadata, fakes, downstream: Downstream) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("runonce-http")
    namespace = {"project": "runonce-test", "location": "us-central1"}
    routes = {
        "routes": {
            "report": {
                "target": {"type": "http", "url": f"{downstream.url}/secure", "audience": AUDIENCE},
                "namespace": namespace,
            },
            "open": {"target": {"type": "http", "url": f"{downstream.url}/open"}, "namespace": namespace},
        }
    }
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
