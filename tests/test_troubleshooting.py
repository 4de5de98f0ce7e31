"""The start-up errors the troubleshooting page explains are the ones runonce says: each row's
quoted beginning is matched against the real line, produced by the real loader from a bad setting
or routes file (in process: the same `load_settings` and `create_app` that `runonce serve` runs)."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from runonce.api.main import create_app
from runonce.cli import _port_from_environment
from runonce.settings import ConfigError, load_settings
from runonce.stores.memory import MemoryStore

PAGE = Path(__file__).resolve().parents[1] / "docs" / "troubleshooting.md"
LOG = '{"routes": {"a": {"target": {"type": "log"}}}}'
NAMESPACE = '"namespace": {"project": "my-project", "location": "us-central1"}'


def _route(fields: str) -> dict[str, str]:
    return {"RUNONCE_ROUTES": '{"routes": {"a": {"target": {"type": "log"}, ' + fields + "}}}"}


CASES: dict[str, dict[str, str] | None] = {
    "bad settings: RUNONCE_X: Input should be …": {"RUNONCE_AUTH": "basic"},
    "bad settings: RUNONCE_LEASE_SECONDS (…) must be at least RUNONCE_DISPATCH_TIMEOUT_SECONDS …": {
        "RUNONCE_LEASE_SECONDS": "10"
    },
    "bad settings: RUNONCE_RETENTION_SECONDS (…) must be above RUNONCE_LEASE_SECONDS …": {
        "RUNONCE_RETENTION_SECONDS": "100"
    },
    "bad settings: RUNONCE_STORE: unknown store …": {"RUNONCE_STORE": "postgres://db/runs"},
    "bad settings: RUNONCE_STORE: must be sqlite:///PATH …": {"RUNONCE_STORE": "sqlite:///"},
    "bad settings: RUNONCE_STORE: unknown option …": {"RUNONCE_STORE": "redis://localhost:6379/0?nosuch=1"},
    "bad settings: RUNONCE_<NAME>_ENDPOINT: … use https://HOST[:PORT] with HOST under googleapis.com …": {
        "RUNONCE_RUN_ENDPOINT": "https://run.googleapis.com/v2"
    },
    "RUNONCE_AUTH=oidc needs RUNONCE_AUDIENCE …": {"RUNONCE_AUTH": "oidc"},
    "RUNONCE_AUTH=oidc and no caller is allowed on route(s) …": {
        "RUNONCE_AUTH": "oidc",
        "RUNONCE_AUDIENCE": "https://r",
    },
    "RUNONCE_ALLOWED_CALLERS: '…' is not an email address": {
        "RUNONCE_AUTH": "oidc",
        "RUNONCE_AUDIENCE": "https://r",
        "RUNONCE_ALLOWED_CALLERS": "scheduler",
    },
    "RUNONCE_AUTH=none on Cloud Run (K_SERVICE is set) …": {"K_SERVICE": "runonce"},
    "RUNONCE_AUTH=cloud_run_iam …": None,  # asks Cloud Run's Admin API: tests/test_auth_cloud_run_iam.py
    "PORT must be a port number from 1 to 65535 …": {"PORT": "http"},
    "no routes configured: set RUNONCE_ROUTES_FILE …": {"RUNONCE_ROUTES": ""},
    "set RUNONCE_ROUTES_FILE or RUNONCE_ROUTES, not both": {"RUNONCE_ROUTES_FILE": "examples/log.yaml"},
    "routes file F: cannot read: …": {"RUNONCE_ROUTES": "", "RUNONCE_ROUTES_FILE": "no/such/routes.yaml"},
    "…: not valid YAML or JSON: …": {"RUNONCE_ROUTES": "routes: {a: [}"},
    "…: expected a mapping with a top-level 'routes:' key": {"RUNONCE_ROUTES": "[1, 2]"},
    "…: route name '…': …": {"RUNONCE_ROUTES": '{"routes": {"Nightly ETL": {"target": {"type": "log"}}}}'},
    "…: route 'R': field 'target': …": {"RUNONCE_ROUTES": '{"routes": {"a": {"target": {"type": "nosuch"}}}}'},
    "…: route 'R': field 'F': Extra inputs are not permitted (did you mean …? this block takes: …)": _route(
        '"overlaps": "skip"'
    ),
    "…: route 'R': field 'namespace.project': …": _route('"namespace": {"project": "123456789", "location": "eu"}'),
    "…: route 'R': field 'schedule': …": _route('"schedule": "0 9 * * MON#2"'),
    "…: route 'R': field 'time_zone': '…' is not a tz database zone name": _route(
        '"schedule": "0 9 * * *", "time_zone": "Mars/Olympus"'
    ),
    "…: route 'R': missing_schedule_time 'snap' needs the job's 'schedule' …": _route(
        '"missing_schedule_time": "snap"'
    ),
    "…: route 'R': overlap 'skip' asks the target whether the previous execution still runs, and a '…' target "
    "cannot tell …": _route('"overlap": "skip"'),
    "…: route 'R': field 'job': needs 'namespace' …": _route('"schedule": "0 9 * * *", "job": "a"'),
    "…: route 'R': field 'catch_up_window_seconds': …": _route(
        f'"schedule": "0 9 * * *", "job": "a", {NAMESPACE}, "catch_up_window_seconds": 3600'
    ),
}
"""Each documented beginning, and a bad configuration that produces it (None: covered elsewhere)."""


def _documented() -> list[str]:
    rows = re.findall(r"^\| `([^`]+)`", PAGE.read_text(), flags=re.M)
    return [row for row in rows if not row.startswith("runonce ")]


def _pattern(documented: str) -> re.Pattern[str]:
    """The quoted beginning as a pattern: `…` is any text, R, F and X name a route, file or setting."""
    text = re.escape(documented)
    for placeholder, meaning in (
        (re.escape(" …"), ".*?"),  # "… is" then any words, punctuation included
        (re.escape("…"), ".*?"),
        (re.escape("RUNONCE_<NAME>"), "RUNONCE_[A-Z_]+"),
        ("RUNONCE_X", "RUNONCE_[A-Z_]+"),
        ("'R'", "'[^']+'"),
        ("'F'", "'[^']+'"),
        (r"file\ F:", r"file\ \S+:"),
    ):
        text = text.replace(placeholder, meaning)
    return re.compile(text)


def _first_line(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("K_SERVICE", raising=False)
    monkeypatch.setenv("RUNONCE_AUTH", "none")
    monkeypatch.setenv("RUNONCE_ROUTES", LOG)
    for name, value in env.items():
        if value:
            monkeypatch.setenv(name, value)
        else:
            monkeypatch.delenv(name, raising=False)
    try:
        if "PORT" in env:
            _port_from_environment()
        create_app(load_settings(), store=MemoryStore())
    except (ConfigError, click.ClickException) as exc:
        return str(exc.message if isinstance(exc, click.ClickException) else exc).splitlines()[0]
    raise AssertionError(f"{env} started")


def test_every_documented_error_has_a_case() -> None:
    assert sorted(set(_documented()) - set(CASES)) == []
    assert sorted(set(CASES) - set(_documented())) == []


@pytest.mark.parametrize("documented", [row for row, env in CASES.items() if env is not None])
def test_the_page_quotes_what_runonce_says(documented: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env = CASES[documented]
    assert env is not None
    line = _first_line(env, monkeypatch)
    assert _pattern(documented).match(line), f"the page says {documented!r}; runonce says {line!r}"
