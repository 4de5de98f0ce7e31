"""Numbers and strings of any size at every entry point but HTTP (tests/test_fuzz.py has that):
the routes file (loaded and linted), the settings and the `runonce` command line.

Python's `int()` refuses more than 4,300 digits with a ValueError, which was a traceback or a 500
wherever a value reached it unbounded. Each property draws values from the ordinary to thousands of
digits (with units, signs, fractions, other scripts' digits) and holds the entry point to its
promise: the value is taken, or refused with one line that names the field, never a traceback and
never the whole value quoted back.

Budget: RUNONCE_FUZZ_BOUNDS_EXAMPLES (default 60 per property); RUNONCE_FUZZ_BOUNDS_SEED replays a
run; the seed is printed either way.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from runonce.cli import main
from runonce.lint import LintConfig, lint_files
from runonce.routes import parse_routes
from runonce.settings import ConfigError, load_settings

EXAMPLES = int(os.environ.get("RUNONCE_FUZZ_BOUNDS_EXAMPLES", "60"))
SEED = int(os.environ.get("RUNONCE_FUZZ_BOUNDS_SEED") or random.SystemRandom().randrange(2**32))
LONGEST_LINE = 400

digits = st.one_of(st.integers(1, 30), st.integers(4280, 6000)).map(lambda n: "9" * n)
oversized = st.one_of(
    digits,
    st.builds(lambda d, unit: d + unit, digits, st.sampled_from(["s", "m", "h", "d", "d1h", ".5", "e5"])),
    st.builds(lambda sign, d: sign + d, st.sampled_from(["-", "+"]), digits),
    st.integers(1, 6000).map(lambda n: "\u0663" * n),  # Arabic-Indic 3
    st.integers(4280, 6000).map(lambda n: "1" + "0" * n),
    st.text(max_size=12),
)


def fuzz(**strategies: st.SearchStrategy) -> Any:
    return lambda test: seed(SEED)(
        settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))(
            given(**strategies)(test)
        )
    )


def assert_one_short_line(message: str) -> None:
    assert "Traceback" not in message and "set_int_max_str_digits" not in message, message[-500:]
    # A value is quoted whole only while it is short (at most 64 to 80 characters, by entry point).
    assert "9" * 100 not in message and "0" * 100 not in message and "\u0663" * 100 not in message, message[:300]
    assert message.strip() and len(message.strip().splitlines()[-1]) <= LONGEST_LINE, message[:500]


NUMERIC_ROUTE_FIELDS = ("max_concurrent_dispatches", "max_lateness_seconds", "catch_up_window_seconds")


@st.composite
def routes_files(draw: st.DrawFn) -> str:
    """A valid routes file with one number (or number-like string) of any size in a numeric field
    of the route or its target, written as YAML (bare, quoted, float) or JSON."""
    value = draw(oversized)
    route: dict[str, Any] = {
        "target": {"type": "cloud_run_job", "job": "projects/my-project/locations/us-central1/jobs/n"},
        "namespace": {"project": "my-project", "location": "us-central1"},
        "schedule": "0 * * * *",
        "time_zone": "UTC",
        "catch_up": "latest",
        "job": "nightly",
    }
    where = draw(st.sampled_from([*NUMERIC_ROUTE_FIELDS, "task_count", "schedule"]))
    placeholder = "__VALUE__"
    if where == "task_count":
        route["target"]["task_count"] = placeholder
    elif where == "schedule":
        route["schedule"] = draw(st.sampled_from(["{} * * * *", "every {} minutes", "*/{} * * * *"]))
        route["schedule"] = route["schedule"].replace("{}", value if value.isascii() and value.isdigit() else "5")
    else:
        route[where] = placeholder
    form = draw(st.sampled_from(["yaml", "quoted yaml", "json"]))
    if form == "json":
        text = json.dumps({"routes": {"nightly": route}})
        return text.replace(f'"{placeholder}"', value if value.lstrip("+-").isdigit() else json.dumps(value))
    text = yaml.safe_dump({"routes": {"nightly": route}})
    return text.replace(placeholder, json.dumps(value) if form == "quoted yaml" else value)


def test_a_routes_file_with_a_number_of_any_size_loads_or_is_refused_in_one_line(tmp_path: Path) -> None:
    print(f"\nbounds fuzz (routes file): RUNONCE_FUZZ_BOUNDS_SEED={SEED} RUNONCE_FUZZ_BOUNDS_EXAMPLES={EXAMPLES}")
    path = tmp_path / "routes.yaml"
    outcomes = {"loaded": 0, "refused": 0}

    @fuzz(text=routes_files())
    def check(text: str) -> None:
        try:
            parse_routes(text, "routes file r.yaml")
            outcomes["loaded"] += 1
        except ConfigError as exc:
            assert "\n" not in str(exc) and str(exc).startswith("routes file r.yaml: "), str(exc)[:300]
            assert_one_short_line(str(exc))
            outcomes["refused"] += 1
        path.write_text(text)
        for finding in lint_files([str(path)], LintConfig(lease_seconds=300, retention_seconds=86400)):
            assert_one_short_line(finding.message)

    check()
    print(f"bounds fuzz (routes file): {outcomes}")
    assert outcomes["refused"] > 0


NUMERIC_SETTINGS = (
    "RUNONCE_STORE_TIMEOUT_SECONDS",
    "RUNONCE_LEASE_SECONDS",
    "RUNONCE_RETENTION_SECONDS",
    "RUNONCE_DISPATCH_TIMEOUT_SECONDS",
    "RUNONCE_FORCED_RUN_TOLERANCE_SECONDS",
    "RUNONCE_SHUTDOWN_GRACE_SECONDS",
    "RUNONCE_OIDC_CLOCK_SKEW_SECONDS",
)


def test_a_numeric_setting_of_any_size_is_taken_or_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    print(f"\nbounds fuzz (settings): RUNONCE_FUZZ_BOUNDS_SEED={SEED}")

    # What an environment variable can hold: no NUL, no lone surrogate.
    environment_values = oversized.filter(lambda v: "\x00" not in v and not any("\ud800" <= c <= "\udfff" for c in v))

    @fuzz(name=st.sampled_from(NUMERIC_SETTINGS), value=environment_values)
    def check(name: str, value: str) -> None:
        with monkeypatch.context() as patch:
            patch.setenv(name, value)
            try:
                load_settings()
            except ConfigError as exc:
                assert name in str(exc), str(exc)[:300]
                assert_one_short_line(str(exc))

    check()


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    routes = {
        "routes": {
            "nightly": {
                "target": {"type": "log"},
                "namespace": {"project": "my-project", "location": "us-central1"},
                "job": "nightly",
                "schedule": "30 2 * * *",
                "time_zone": "UTC",
            }
        }
    }
    (tmp_path / "routes.yaml").write_text(yaml.safe_dump(routes))
    for name in [k for k in os.environ if k.startswith("RUNONCE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("RUNONCE_ROUTES_FILE", str(tmp_path / "routes.yaml"))
    monkeypatch.setenv("RUNONCE_STORE", f"sqlite:///{tmp_path / 'runs.db'}")


FROM, TO = "2026-01-01T00:00:00Z", "2026-01-01T06:00:00Z"
# Each command with a flag that takes a number, a duration or a timestamp ("{}": the fuzzed value).
# `serve` is left out: a value it takes would start a server (its flags are cases in test_cli.py).
COMMANDS = (
    ("status", "--since", "{}"),
    ("audit", "--since", "{}"),
    ("audit", "--from", "{}"),
    ("runs", "list", "--limit", "{}"),
    ("backfill", "nightly", "--from", FROM, "--to", TO, "--dry-run", "--concurrency", "{}"),
    ("backfill", "nightly", "--from", FROM, "--to", TO, "--dry-run", "--timeout", "{}"),
    ("backfill", "nightly", "--from", "{}", "--to", TO, "--dry-run"),
    ("schedule", "next", "0 * * * *", "--count", "{}"),
    ("schedule", "next", "0 * * * *", "--after", "{}"),
    ("key", "--route", "nightly", "--job", "nightly", "--schedule-time", "{}"),
)


@pytest.mark.usefixtures("cli_env")
def test_every_numeric_flag_takes_or_refuses_a_value_of_any_size_in_one_line() -> None:
    print(f"\nbounds fuzz (command line): RUNONCE_FUZZ_BOUNDS_SEED={SEED}")
    runner = CliRunner()
    codes: dict[int, int] = {}

    @fuzz(command=st.sampled_from(COMMANDS), value=oversized)
    def check(command: tuple[str, ...], value: str) -> None:
        args = [value if part == "{}" else part for part in command]
        result = runner.invoke(main, args, catch_exceptions=True)
        codes[result.exit_code] = codes.get(result.exit_code, 0) + 1
        assert result.exception is None or isinstance(result.exception, SystemExit), (args[:4], result.output[-500:])
        assert result.exit_code in (0, 1, 2), (args[:4], result.exit_code, result.output[-500:])
        if result.exit_code == 2:
            assert_one_short_line(result.output)

    check()
    print(f"bounds fuzz (command line): exit codes {codes}")
    assert codes.get(2, 0) > 0
