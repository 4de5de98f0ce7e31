"""runonce-guard on every store the server runs on: the same URL forms as the server, `store init`,
and a storm of wrappers on each store that runs the command once."""

from __future__ import annotations

import os
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from runonce.stores import parse_redis_url as server_redis
from runonce.stores import parse_spanner_url as server_spanner
from runonce_guard import GuardConfigError
from runonce_guard.stores.spanner import DDL
from runonce_guard.stores.urls import parse_redis_url, parse_spanner_url
from tests.support.guard_cli import WRAPPER
from tests.support.stores import FIRESTORE_PROJECT, guard_spanner_url, redis_url

SPANNER_URLS = [
    "spanner://projects/my-project/instances/main/databases/runs",
    "spanner://projects/my-project/instances/main/databases/runs?table=Steps_2",
    "spanner://projects/my-project/instances/main/databases/runs?table=2bad",
    "spanner://projects/my-project/instances/main/databases/runs?nosuch=1",
    "spanner://projects/123456/instances/main/databases/runs",
    "spanner://projects/my-project/instances/Main/databases/runs",
    "spanner://projects/my-project/databases/runs",
]
REDIS_URLS = [
    "redis://10.0.0.3:6379/0",
    "redis://:s3cret@10.0.0.3:6379/2",
    "redis://user:p%40ss@memorystore.internal:6380/1?wait_replicas=1",
    "rediss://:pw@10.0.0.3:6378/0?ca_file=/etc/ca.pem",
    "redis://10.0.0.3:6379/0?ca_file=/etc/ca.pem",  # ca_file is for rediss:// only
    "redis://10.0.0.3:6379/0?wait_replicas=17",
    "redis://10.0.0.3:6379/x",
    "redis://10.0.0.3:99999/0",
    "redis:///0",
]


def parsed(parse, url: str) -> object:  # type: ignore[no-untyped-def]
    try:
        return parse(url)
    except (ValueError, GuardConfigError):
        return "refused"


@pytest.mark.parametrize("url", SPANNER_URLS)
def test_the_guard_reads_spanner_urls_as_the_server_does(url: str) -> None:
    server, guard = parsed(server_spanner, url), parsed(parse_spanner_url, url)
    if server == "refused":
        assert guard == "refused"
        return
    assert guard != "refused", url
    same = {"project": guard.project, "instance": guard.instance, "database": guard.database}  # type: ignore[union-attr]
    assert same == {"project": server.project, "instance": server.instance, "database": server.database}  # type: ignore[union-attr]
    if "table=" in url:
        assert guard.table == server.table  # type: ignore[union-attr]
    else:
        assert (server.table, guard.table) == ("runonce_runs", "runonce_steps")  # type: ignore[union-attr]


@pytest.mark.parametrize("url", REDIS_URLS)
def test_the_guard_reads_redis_urls_as_the_server_does(url: str) -> None:
    server, guard = parsed(server_redis, url), parsed(parse_redis_url, url)
    if server == "refused":
        assert guard == "refused"
    else:
        assert guard != "refused", url
        assert vars(guard) == vars(server)


@pytest.mark.subprocess
def test_a_bad_store_url_never_echoes_its_password() -> None:
    done = subprocess.run(
        [WRAPPER, "run", "--step", "x", "--", "true"],
        env={**os.environ, "IDEMPOTENCY_KEY": "a" * 64, "RUNONCE_STORE": "postgres://admin:hunter2@db/x"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 78 and "RUNONCE_STORE" in done.stderr
    assert "hunter2" not in done.stderr


def test_store_init_creates_the_spanner_steps_table_once(spanner_database: str) -> None:
    url = f"{spanner_database}?table=steps_{uuid.uuid4().hex[:12]}"
    env = {**os.environ, "RUNONCE_STORE": url, "RUNONCE_STORE_TIMEOUT_SECONDS": "60"}
    first = subprocess.run([WRAPPER, "store", "init"], env=env, capture_output=True, text=True, timeout=180)
    assert first.returncode == 0, first.stderr
    assert "created Spanner table" in first.stderr
    again = subprocess.run([WRAPPER, "store", "init"], env=env, capture_output=True, text=True, timeout=180)
    assert again.returncode == 0 and "exists: nothing to do" in again.stderr


def test_terraform_declares_the_guard_steps_table_with_store_inits_ddl() -> None:
    """The Spanner database Terraform makes carries the same steps table `store init` creates."""
    rules = (Path(__file__).resolve().parents[2] / "terraform" / "rules.tf").read_text(encoding="utf-8")
    body = DDL.split("(", 1)[1]
    assert body in rules, "terraform/rules.tf's guard steps table differs from runonce_guard/stores/spanner.py's DDL"


@pytest.fixture(params=["firestore", "spanner", "redis"])
def storm_env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RUNONCE_", "CLOUD_RUN_", "IDEMPOTENCY"))}
    env = {**base, "IDEMPOTENCY_KEY": uuid.uuid4().hex * 2, "RUNONCE_STORE_TIMEOUT_SECONDS": "60"}
    if request.param == "firestore":
        emulator = request.getfixturevalue("firestore_emulator")
        env |= {
            "FIRESTORE_EMULATOR_HOST": emulator.host,
            "RUNONCE_FIRESTORE_PROJECT": FIRESTORE_PROJECT,
            "RUNONCE_FIRESTORE_STEPS_COLLECTION": f"steps_{uuid.uuid4().hex[:12]}",
        }
    elif request.param == "spanner":
        env["RUNONCE_STORE"] = guard_spanner_url(request.getfixturevalue("spanner_database"))
        env["SPANNER_EMULATOR_HOST"] = os.environ["SPANNER_EMULATOR_HOST"]
    else:
        env["RUNONCE_STORE"] = redis_url(request.getfixturevalue("redis_server"))
    return env


def test_16_concurrent_wrappers_run_the_command_once(storm_env: dict[str, str], tmp_path: Path) -> None:
    """16 task attempts of one run start at once; each waits for the step while another holds it."""
    log = tmp_path / "effects"
    command = [WRAPPER, "run", "--step", "charge", "--", "sh", "-c", f"echo ran >> {log}; sleep 0.5"]

    def attempt(index: int) -> subprocess.CompletedProcess[str]:
        env = storm_env | {"CLOUD_RUN_TASK_ATTEMPT": str(index)}
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)

    with ThreadPoolExecutor(16) as pool:
        done = list(pool.map(attempt, range(16)))
    assert [d.returncode for d in done] == [0] * 16, [d.stderr for d in done if d.returncode]
    assert log.read_text() == "ran\n"
    assert sum("already done" in d.stderr for d in done) == 15
