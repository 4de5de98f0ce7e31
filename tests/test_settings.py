"""Settings that would let two dispatches of one run overlap refuse to start, with one line naming
the settings at fault; the defaults and every combination the suite and the deploy files use pass."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runonce.settings import ConfigError, Settings, load_settings
from tests.support.procs import REPO


@pytest.mark.parametrize(
    "values, named",
    [
        # the lease covers the dispatch timeout but not the store time around it (claim wait + finish)
        (
            {"lease_seconds": 40, "dispatch_timeout_seconds": 30, "store_timeout_seconds": 5},
            (
                "RUNONCE_LEASE_SECONDS (40)",
                "RUNONCE_DISPATCH_TIMEOUT_SECONDS (30)",
                "RUNONCE_STORE_TIMEOUT_SECONDS (5)",
            ),
        ),
        (
            {"lease_seconds": 3, "dispatch_timeout_seconds": 1, "store_timeout_seconds": 1},
            ("RUNONCE_LEASE_SECONDS (3)", "RUNONCE_DISPATCH_TIMEOUT_SECONDS (1)"),
        ),
        (
            {"lease_seconds": 4, "dispatch_timeout_seconds": 5},
            ("RUNONCE_LEASE_SECONDS (4)", "RUNONCE_DISPATCH_TIMEOUT_SECONDS (5)"),
        ),
        # retention below the lease: a record in flight "expires" and is claimed again
        ({"retention_seconds": 200}, ("RUNONCE_RETENTION_SECONDS (200)", "RUNONCE_LEASE_SECONDS (300)")),
        ({"retention_seconds": 300}, ("RUNONCE_RETENTION_SECONDS (300)", "RUNONCE_LEASE_SECONDS (300)")),
    ],
)
def test_settings_under_which_dispatches_could_overlap_refuse_to_start(values: dict, named: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(**values)
    message = str(refused.value)
    assert "\n" not in message and all(name in message for name in named), message


def test_the_lease_rule_is_exactly_dispatch_plus_two_store_timeouts_plus_the_margin() -> None:
    from runonce.settings import LEASE_MARGIN_SECONDS

    edge = 30 + 2 * 5 + LEASE_MARGIN_SECONDS
    assert load_settings(lease_seconds=edge, dispatch_timeout_seconds=30, store_timeout_seconds=5).lease_seconds == edge
    with pytest.raises(ConfigError):
        load_settings(lease_seconds=edge - 0.01, dispatch_timeout_seconds=30, store_timeout_seconds=5)


@pytest.mark.parametrize(
    "values",
    [
        {},  # the defaults (README, deploy scripts, Terraform)
        {"lease_seconds": 6, "dispatch_timeout_seconds": 1, "store_timeout_seconds": 2},  # tests/test_e2e.py
        {"lease_seconds": 4, "dispatch_timeout_seconds": 2, "store_timeout_seconds": 0.5},  # tests/targets/harness.py
        {"lease_seconds": 3, "dispatch_timeout_seconds": 1, "store_timeout_seconds": 0.5},
        {"lease_seconds": 300, "retention_seconds": 700},
    ],
)
def test_the_defaults_and_the_suites_settings_pass(values: dict) -> None:
    assert isinstance(load_settings(**values), Settings)


@pytest.mark.subprocess
def test_serve_refuses_overlapping_settings_in_one_line(tmp_path) -> None:
    """In a subprocess with a deadline: a `serve` that wrongly starts must fail the test, not hang it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNONCE_")}
    env.update(
        RUNONCE_AUTH="none",
        RUNONCE_ROUTES='{"routes": {"demo": {"target": {"type": "log"}}}}',
        RUNONCE_RETENTION_SECONDS="60",
        RUNONCE_STORE=f"sqlite:///{tmp_path / 'runs.db'}",
    )
    done = subprocess.run(
        [sys.executable, "-m", "runonce.cli", "serve", "--port", "0"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "RUNONCE_RETENTION_SECONDS (60)" in done.stderr, done.stderr
