"""Cold start (issue 14): a process imports the clients its routes and store use, not every client
runonce knows. Each case starts a fresh interpreter, goes through what `runonce serve` does up to serving
(the CLI module, the settings from the environment, `create_app`, the lifespan that builds the
targets) and lists the modules it imported. Timings live in bench/ (bench_perf.py's cold-start rows)."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.procs import REPO

START_UP = """
import asyncio, json, ssl, sys
import runonce.cli  # the entry point's module, as `runonce serve` imports it
from runonce.api.main import create_app
from runonce.settings import load_settings

ca_loads = []  # each load of a CA bundle into a TLS context from here on
for method in ("load_verify_locations", "load_default_certs", "set_default_verify_paths"):
    def counted(self, *args, _original=getattr(ssl.SSLContext, method), **kwargs):
        ca_loads.append(1)
        return _original(self, *args, **kwargs)
    setattr(ssl.SSLContext, method, counted)

app = create_app(load_settings())

async def serve_and_stop():
    async with app.router.lifespan_context(app):
        pass

asyncio.run(serve_and_stop())
print(json.dumps({"modules": sorted(sys.modules), "ca_loads": len(ca_loads)}))
"""


def start_up(tmp_path: Path, routes: dict, **settings: str) -> dict:
    """What a fresh process did up to serving: `modules` it imported, `ca_loads` after the imports."""
    routes_file = tmp_path / "routes.yaml"
    routes_file.write_text(json.dumps({"routes": routes}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNONCE_", "FIRESTORE_", "K_", "GCE_"))}
    env |= {
        "RUNONCE_ROUTES_FILE": str(routes_file),
        "RUNONCE_AUTH": "none",
        "RUNONCE_STORE": f"sqlite:///{tmp_path / 'runs.db'}",
        **settings,
    }
    done = subprocess.run(
        [sys.executable, "-c", START_UP], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def modules_after_start_up(tmp_path: Path, routes: dict) -> set[str]:
    return set(start_up(tmp_path, routes)["modules"])


def google_clients(modules: set[str]) -> set[str]:
    """The heavy Google client packages among `modules` (gRPC, the generated API clients, api-core,
    and google-auth's transports and ID tokens, which only a route that calls Google needs)."""
    return {
        m
        for m in modules
        if m == "grpc"
        or m.startswith(
            (
                "google.cloud.workflows",
                "google.cloud.firestore",
                "google.api_core",
                "google.oauth2",
                "google.auth.transport",
            )
        )
    }


@pytest.mark.subprocess
def test_the_commands_that_do_not_serve_start_without_the_web_app() -> None:
    """`runonce lint`, `key`, `schedule next` and the runs commands import runonce/cli.py, not the
    web app, the callers' auth, the missed-runs code or Google's auth: cli.py defers those imports
    to the commands that use them."""
    code = "import json, sys, runonce.cli; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    deferred = ("fastapi", "uvicorn", "google.auth", "runonce.api", "runonce.auth", "runonce.missed", "runonce.lint")
    assert sorted(m for m in loaded if m.startswith(deferred)) == []


@pytest.mark.subprocess
def test_http_and_log_routes_on_sqlite_load_no_google_client(tmp_path: Path) -> None:
    modules = modules_after_start_up(
        tmp_path,
        {
            "ping": {"target": {"type": "http", "url": "http://127.0.0.1:9/ping"}},
            "note": {"target": {"type": "log"}},
        },
    )
    assert google_clients(modules) == set()


@pytest.mark.subprocess
def test_a_workflows_route_calls_rest_and_loads_no_google_client_at_start_up(tmp_path: Path) -> None:
    """Every Google target calls REST through the one engine over the shared HTTP client: a
    workflows route loads no gRPC and no generated client; its discovery document is read at
    start-up, where the route is checked against it, not at its first delivery."""
    modules = modules_after_start_up(
        tmp_path,
        {
            "etl": {
                "target": {"type": "workflows", "workflow": "projects/my-project/locations/us-central1/workflows/etl"}
            },
        },
    )
    assert google_clients(modules) == set()
    assert "runonce.targets.engine" in modules


@pytest.mark.subprocess
def test_on_cloud_run_with_oidc_start_up_loads_the_ca_bundle_once(tmp_path: Path) -> None:
    """The OIDC certificates' client and the metadata server's share one TLS context: each more
    would load the CA bundle again (20-30 ms of CPU each)."""
    done = start_up(
        tmp_path,
        {"ping": {"target": {"type": "http", "url": "https://downstream.example/ping"}}},
        RUNONCE_AUTH="oidc",
        RUNONCE_AUDIENCE="https://runonce.example",
        RUNONCE_ALLOWED_CALLERS="s@p.iam.gserviceaccount.com",
        RUNONCE_ALLOW_UNAUTHENTICATED="false",
        K_SERVICE="runonce",
        GCE_METADATA_HOST=f"127.0.0.1:{closed_port()}",
    )
    assert done["ca_loads"] == 1


def closed_port() -> int:
    """A loopback port nothing listens on (the metadata server's answer is then 'none', at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_authenticator_and_the_metadata_lookup_share_one_tls_context(monkeypatch) -> None:
    """The same, in this process: the first client loads the CA bundle, the second reuses it."""
    from runonce import logs, tls
    from runonce.auth.callers import build_authenticator
    from runonce.settings import Settings

    ca_loads = []
    for method in ("load_verify_locations", "load_default_certs", "set_default_verify_paths"):
        original = getattr(ssl.SSLContext, method)
        monkeypatch.setattr(
            ssl.SSLContext,
            method,
            lambda self, *args, _original=original, **kwargs: ca_loads.append(1) or _original(self, *args, **kwargs),
        )
    tls.client_context.cache_clear()
    monkeypatch.setenv("K_SERVICE", "runonce")
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{closed_port()}")
    for name in ("GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "GCP_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings(
        auth="oidc", audience=["https://runonce.example"], allowed_callers=["s@p.iam.gserviceaccount.com"]
    )
    try:
        build_authenticator(settings, {"ping": []})
        assert len(ca_loads) == 1  # the certificates' client loads it (then, not at its first fetch)
        assert logs.discover_project() is None  # the metadata server did not answer
        assert len(ca_loads) == 1
    finally:
        tls.client_context.cache_clear()
