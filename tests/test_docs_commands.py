"""Every shell command the README and the docs show runs as written, on the default settings.

The commands are extracted from the pages' fenced `sh` and `console` blocks, and from the text
where it shows `runonce` with options (tests/support/doc_commands.py). Here run those a laptop
can, the way the local quick start leaves it (`make run`'s settings, a run in `runonce.db`):

- `runonce …`: exits 0, or 1 where the command reports a condition (status, audit, lint, a run
  with no lease to release); never 2 (a usage error: the command as written is wrong) nor a
  traceback. A `console` block's output is the output, exactly. A command line synopsis
  (`runonce status [--route R] [--since 6h]`) runs with every option and a value for each
  placeholder. A backfill runs as `--dry-run` (a real one starts the route's Google target).
- `curl` against `http://127.0.0.1:8080` goes to a `runonce serve` started as `make run` starts it.
- `make X`: the target exists and its recipe expands (`make -n`); `make run` serves until stopped
  and `make test` is the whole suite, so neither is run from here.

The deployment commands (deploy/*.sh, gcloud, terraform, HCL) run in tests/deploy/test_docs_deploy.py
against the fake Google APIs, and every command falls in one of these groups or fails the test below.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from runonce.schedules import parse_schedule
from runonce.schedules.zones import get_zone
from runonce.stores import Finish
from runonce.stores.base import COMPLETED
from runonce.stores.sqlite import SQLiteStore
from tests.support.doc_commands import REPO, Statement, inline_runonce_commands, shell_statements
from tests.support.procs import start_server
from tests.support.runs import LEASE, RETENTION, new_run

STATEMENTS = shell_statements()
LOCAL = {"runonce", "curl", "make", "sed"}
DEPLOYMENT = {"gcloud", "terraform"}  # and deploy/*.sh: tests/deploy/test_docs_deploy.py
NOT_RUN = {
    "git": "a maintainer's release steps (commit, tag, push); the script they call is tests/test_release.py's",
    "pip": "installs the guard: tests/guard/test_install.py installs ./guard; the git pin is a placeholder "
    "(tests/test_release.py)",
}
REMOTE_CURL = "$RUNONCE_URL"  # a deployed service, with a Google identity token


def _ids(statements: list[Statement]) -> list[str]:
    return [f"{s.page.replace('/', '.')}:{s.line}" for s in statements]


def test_every_command_shown_is_run_by_a_test_or_says_why_not() -> None:
    unclassified = [
        (s.where, program)
        for s in STATEMENTS
        for program in s.programs
        if program not in LOCAL | DEPLOYMENT | set(NOT_RUN) and not program.startswith("deploy/")
    ]
    assert unclassified == []
    assert len(STATEMENTS) > 60 and sum("runonce" in s.programs for s in STATEMENTS) > 20


# -- the local quick start's state -----------------------------------------------------------------

MAKE_RUN = re.search(r"^run:.*?\n\t(.*?)\n\n", (REPO / "Makefile").read_text(), re.S | re.M)
assert MAKE_RUN is not None
MAKE_RUN_ENV = dict(re.findall(r"(RUNONCE_\w+)=(\S+)", MAKE_RUN.group(1)))
DEMO_DELIVERY = {"job": "nightly", "schedule_time": "2026-10-16T12:00:00Z"}  # the README's curl


def _routes() -> str:
    """The quick start's demo route, and the examples' routes the pages name (a route with its job)."""
    merged = {}
    for name, route in (
        ("demo-routes.yaml", "demo"),
        ("audit-backfill.yaml", "nightly-etl"),
        ("routes-scheduled.yaml", "every-5-minutes"),
        ("sources-pubsub.yaml", "orders"),
        ("sources-eventarc.yaml", "uploads"),
    ):
        merged[route] = yaml.safe_load((REPO / "examples" / name).read_text())["routes"][route]
    return yaml.safe_dump({"routes": merged})


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkout's view (examples/, runonce/, .venv/) with the quick start's runonce.db holding
    the README's delivery, completed."""
    directory = tmp_path_factory.mktemp("checkout")
    for name in ("examples", "runonce", ".venv", "deploy"):
        (directory / name).symlink_to(REPO / name)
    (directory / "routes.yaml").write_text(_routes())
    assert MAKE_RUN_ENV["RUNONCE_STORE"] == "sqlite:///runonce.db"

    async def seed() -> None:
        store = SQLiteStore(str(directory / "runonce.db"))
        claim = await store.claim(
            new_run(route="demo", run_id=_demo_run_id(directory)), datetime.now(UTC), LEASE, RETENTION
        )
        await store.finish(claim, Finish(COMPLETED, target={"type": "log", "resource": "log/demo"}), datetime.now(UTC))
        await store.close()

    asyncio.run(seed())
    return directory


def _demo_run_id(directory: Path) -> str:
    delivery = ["--job", DEMO_DELIVERY["job"], "--schedule-time", DEMO_DELIVERY["schedule_time"]]
    key = subprocess.run(
        [str(REPO / ".venv" / "bin" / "runonce"), "key", "--route", "demo", *delivery],
        env={**_base_env(), "RUNONCE_ROUTES_FILE": str(REPO / "examples" / "demo-routes.yaml")},
        capture_output=True,
        text=True,
        check=True,
    )
    return key.stdout.strip()


def _base_env() -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("RUNONCE_")}
    return {**keep, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}", "PYTHONUNBUFFERED": "1"}


def _env() -> dict[str, str]:
    return {**_base_env(), **MAKE_RUN_ENV, "RUNONCE_ROUTES_FILE": "routes.yaml"}


# -- a synopsis made concrete -------------------------------------------------------------------------


def _placeholders(workdir: Path) -> dict[str, str]:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    ago = lambda minutes: (now - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    return {
        "R": "nightly-etl",
        "ROUTE": "nightly-etl",
        "RUN_ID": _demo_run_id(workdir),
        "S": "completed",
        "J": "nightly-etl",
        # within the default retention (one day), wide enough to hold the daily route's fire time
        "T": ago(23 * 60 + 50),
        "T1": ago(23 * 60 + 50),
        "T2": ago(5),
        "RFC3339": ago(60),
        "EXPR": "'every 5 minutes'",
        "TZ": "Europe/Paris",
        "N": "2",
        "FILE…": "examples/routes-scheduled.yaml examples/scheduler/nightly-etl.json",
        "H": "127.0.0.1",
        "P": "8080",
    }


def concrete(text: str, values: dict[str, str]) -> str:
    """`runonce audit (--since 6h | --from T1 [--to T2]) [--format table|json]` ->
    `runonce audit --since 6h --format table`: every optional part, the first of alternatives,
    a value for each placeholder."""
    previous = None
    while previous != text:
        previous = text
        text = re.sub(r"\(([^()|]*?)\s*\|[^()]*\)", r"\1", text)  # (a | b) -> a
        text = re.sub(r"\[([^\[\]]*)\]", r"\1", text)  # [x] -> x
    text = re.sub(r"(?<=\s)([\w-]+)\|[\w|-]+", r"\1", text)  # table|json -> table
    return " ".join(values.get(word, word) for word in text.split())


def test_a_synopsis_is_made_concrete() -> None:
    values = {"R": "etl", "T1": "t1", "T2": "t2"}
    assert concrete("runonce audit [--route R] (--since 6h | --from T1 [--to T2]) [--format table|json]", values) == (
        "runonce audit --route etl --since 6h --format table"
    )
    assert concrete("runonce backfill ROUTE --from T1 --to T2 [--dry-run]", values) == (
        "runonce backfill ROUTE --from t1 --to t2 --dry-run"
    )


# -- runonce ----------------------------------------------------------------------------------------

RUNONCE = [s for s in STATEMENTS if s.command == "runonce"] + inline_runonce_commands()
EXIT_1_MEANS = ("status", "audit", "lint", "release")  # a condition reported, not a usage error


def _latest_fire_time(route_name: str, now: datetime) -> datetime:
    """The route's last fire time before `now` (its schedule in its zone)."""
    route = yaml.safe_load(_routes())["routes"][route_name]
    fires = parse_schedule(route["schedule"]).iter_after(now - timedelta(days=3), get_zone(route.get("time_zone")))
    latest = next(fires)
    for fire in fires:
        if fire >= now:
            return latest
        latest = fire
    raise AssertionError("unreachable: a schedule's fire times go on")


def _backfill_placeholders(values: dict[str, str]) -> dict[str, str]:
    """A backfill (always --dry-run here, so the retention does not bound it) needs a fire time in
    [T1, T2): the route's latest, whatever the time of day the test runs at."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    fire = _latest_fire_time(values["ROUTE"], now)
    stamp = lambda at: at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    return {**values, "T1": stamp(fire - timedelta(minutes=1)), "T2": stamp(min(fire + timedelta(minutes=1), now))}


def _as_run(statement: Statement, workdir: Path) -> str:
    words = statement.words
    values = _placeholders(workdir)
    if "backfill" in words:
        values = _backfill_placeholders(values)
    text = concrete(statement.text, values) if not statement.output else statement.text
    if "serve" in words:
        text += " --help"  # serves until stopped: its options are checked, the server runs below
    if "backfill" in words and "--dry-run" not in words:
        text += " --dry-run"
    return text


@pytest.mark.subprocess
@pytest.mark.parametrize("statement", RUNONCE, ids=_ids(RUNONCE))
def test_each_runonce_command_shown_runs_as_written(statement: Statement, workdir: Path) -> None:
    command = _as_run(statement, workdir)
    result = subprocess.run(
        ["bash", "-c", command + " 2>&1"], cwd=workdir, env=_env(), capture_output=True, text=True, timeout=120
    )
    out = result.stdout
    assert "Traceback" not in out, f"{statement.where}\n{out}"
    if statement.output:  # a console block: what the page shows is what it prints
        assert out.splitlines() == statement.output, f"{statement.where}\n{out}"
        return
    allowed = (0, 1) if any(word in statement.words for word in EXIT_1_MEANS) else (0,)
    assert result.returncode in allowed, f"{statement.where}\nran: {command}\nexit {result.returncode}:\n{out}"


# -- make -------------------------------------------------------------------------------------------

MAKE = [s for s in STATEMENTS if s.command == "make"]


@pytest.mark.subprocess
@pytest.mark.parametrize("statement", MAKE, ids=_ids(MAKE))
def test_each_make_command_shown_names_a_target_whose_recipe_expands(statement: Statement) -> None:
    words = statement.words
    result = subprocess.run(["make", "-n", *words[1:]], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"{statement.where}\n{result.stderr}"
    target = next(word for word in words[1:] if "=" not in word)
    assert f"\n{target}:" in (REPO / "Makefile").read_text()


# -- the quick start's server ---------------------------------------------------------------------

CURL = [s for s in STATEMENTS if s.command == "curl" and REMOTE_CURL not in s.text]


@pytest.mark.e2e
@pytest.mark.parametrize("statement", CURL, ids=_ids(CURL))
def test_each_curl_shown_answers_as_the_page_says(statement: Statement, tmp_path: Path) -> None:
    env = {**MAKE_RUN_ENV, "RUNONCE_STORE": f"sqlite:///{tmp_path / 'runonce.db'}"}
    env["RUNONCE_ROUTES_FILE"] = str(REPO / env["RUNONCE_ROUTES_FILE"])
    server = start_server(env, tmp_path)
    try:
        command = statement.text.replace("http://127.0.0.1:8080", server.url)
        answers = [subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60) for _ in (1, 2)]
    finally:
        server.stop()
    first, again = (answer.stdout for answer in answers)
    assert first.startswith("HTTP/1.1 200") and '"status":"processed"' in first, f"{statement.where}\n{first}"
    assert again.startswith("HTTP/1.1 200") and '"status":"duplicate"' in again
    assert "runonce-replayed: true" in again.lower()
    assert '"target":{"type":"log"' in first  # as the comment under it shows


@pytest.mark.subprocess
def test_the_sed_that_reads_the_version_prints_it(workdir: Path) -> None:
    from runonce import __version__

    for statement in (s for s in STATEMENTS if "sed" in s.programs):
        result = subprocess.run(
            ["bash", "-c", f"{statement.text}; echo $VERSION"], cwd=workdir, capture_output=True, text=True
        )
        assert result.stdout.strip() == __version__, statement.where
