"""The Cloud Build recipe: the step's script, with Cloud Build's substitutions applied, run against the
emulator's REST endpoint through a forwarder that holds each call to the firestore.v1 discovery
document; the step claims, runs, skips, releases and is fenced like the Python guard."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote

import httpx
import pytest
import yaml

from runonce_guard import StepKey
from runonce_guard.stores.firestore import FirestoreStepStore
from tests.fakes.http_server import LoopbackServer, Reply, Request
from tests.guard.firestore_rest import CONNECTOR, check_args
from tests.support.discovery import Violation
from tests.support.stores import FIRESTORE_PROJECT

BUILD = yaml.safe_load((Path(__file__).resolve().parents[2] / "guard" / "cloudbuild" / "cloudbuild.yaml").read_text())
STEP = BUILD["steps"][0]
# Cloud Build's built-in substitutions (https://cloud.google.com/build/docs/configuring-builds/substitute-variable-values)
BUILT_IN = {
    "PROJECT_ID",
    "PROJECT_NUMBER",
    "BUILD_ID",
    "LOCATION",
    "TRIGGER_NAME",
    "COMMIT_SHA",
    "SHORT_SHA",
    "REVISION_ID",
    "REPO_NAME",
    "REPO_FULL_NAME",
    "BRANCH_NAME",
    "TAG_NAME",
    "REF_NAME",
    "TRIGGER_BUILD_CONFIG_PATH",
    "SERVICE_ACCOUNT_EMAIL",
    "SERVICE_ACCOUNT",
}
SUBSTITUTION = re.compile(r"\$(\$|\{([A-Za-z0-9_]+)\}|([A-Za-z0-9_]+))")


def substitute(text: str, values: dict[str, str]) -> str:
    """Cloud Build's substitution: `$$` is a literal `$`; `$NAME` / `${NAME}` must be known."""

    def one(match: re.Match[str]) -> str:
        if match.group(1) == "$":
            return "$"
        key = match.group(2) or match.group(3)
        return values[key]

    return SUBSTITUTION.sub(one, text)


def test_every_substitution_the_step_uses_is_defined_and_the_script_has_no_dollar() -> None:
    declared = set(BUILD["substitutions"])
    assert declared == {"_IDEMPOTENCY_KEY"}  # the name runonce's cloud_build_trigger sets by default
    for text in [*STEP["env"], *STEP["args"]]:
        for match in SUBSTITUTION.finditer(text):
            key = match.group(2) or match.group(3)
            assert match.group(1) == "$" or key in BUILT_IN | declared, f"{text!r}: ${key} is not a substitution"
    assert "$" not in STEP["args"][1]  # a bash/python `$` would be taken for a substitution
    assert STEP["entrypoint"] == "python3" and STEP["args"][0] == "-c"


class CheckingForwarder:
    """Loopback HTTP server in front of the emulator: maps each request to its firestore.v1 method,
    checks it with the discovery document (400 + recorded violation if it fails), forwards it."""

    def __init__(self, emulator_host: str):
        self.calls: list[tuple[str, int]] = []
        self.violations: list[str] = []
        self.emulator = f"http://{emulator_host}"
        self.server = LoopbackServer(self.handle)
        self.url = self.server.url

    def handle(self, request: Request) -> Reply:
        path = unquote(request.path).removeprefix("/v1/")
        query = {k: v[0] for k, v in request.query.items()}
        body, verb = request.json(), request.method
        try:
            if verb == "POST" and path.endswith("/documents:commit"):
                method, args = "commit", {"database": path.removesuffix("/documents:commit"), "body": body}
            elif verb == "POST":
                parent, collection = path.rsplit("/", 1)
                method, args = "createDocument", {"parent": parent, "collectionId": collection, **query, "body": body}
            elif verb == "GET":
                method, args = "get", {"name": path, **query}
            else:
                raise Violation(f"{verb} /{path}: not a call the recipe makes")
            check_args(CONNECTOR + "projects.databases.documents." + method, args)
        except Violation as violation:
            self.violations.append(str(violation))
            return Reply(400, {"error": {"code": 400, "message": str(violation)}})
        response = httpx.request(
            verb,
            self.emulator + request.path,
            params=request.query,
            json=body,
            headers={"Authorization": "Bearer owner"},
            timeout=10,
        )
        self.calls.append((method, response.status_code))
        return Reply(response.status_code, response.json())

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def build_step(firestore_emulator, collection: str, run_id: str, job_env):
    forwarder = CheckingForwarder(firestore_emulator.host)

    def run(command: list[str], idempotency_key: str = run_id, step: str = "deploy", build_id: str = "b-1"):
        values = {"_IDEMPOTENCY_KEY": idempotency_key, "PROJECT_ID": FIRESTORE_PROJECT, "BUILD_ID": build_id}
        env = dict(substitute(item, values).split("=", 1) for item in STEP["env"])
        env |= {
            "RUNONCE_STEP": step,
            "RUNONCE_COLLECTION": collection,
            "BUILD_ID": build_id,
            "RUNONCE_FIRESTORE_API": forwarder.url,
            "RUNONCE_ACCESS_TOKEN": "owner",  # local runs only
            "PATH": job_env["PATH"],
            "FIRESTORE_EMULATOR_HOST": firestore_emulator.host,
        }
        script = substitute(STEP["args"][1], values)
        return subprocess.run(
            [sys.executable, "-c", script, *command], env=env, capture_output=True, text=True, timeout=60
        )

    run.forwarder = forwarder  # type: ignore[attr-defined]
    yield run
    forwarder.close()
    assert forwarder.violations == []


def record(collection: str, run_id: str, step: str = "deploy"):
    store = FirestoreStepStore(project=FIRESTORE_PROJECT, collection=collection)
    try:
        return store.get(StepKey(run_id, step, "-"), datetime.now(UTC))
    finally:
        store.close()


def test_runs_once_then_skips(build_step, collection: str, run_id: str, tmp_path: Path) -> None:
    effects = tmp_path / "deployed"
    deploy = ["sh", "-c", f"echo deployed >> {effects}"]
    first = build_step(deploy)
    assert first.returncode == 0, first.stderr
    retry = build_step(deploy, build_id="b-2")
    assert retry.returncode == 0 and "already done" in retry.stdout
    assert effects.read_text() == "deployed\n"
    assert build_step.forwarder.calls == [
        ("createDocument", 200),
        ("commit", 200),
        ("createDocument", 409),
        ("get", 200),
    ]
    done = record(collection, run_id)
    assert (
        done is not None and done.status == "completed" and done.attempt_id == "b-1" and done.holder == "cloudbuild/b-1"
    )


def test_failed_command_passes_its_code_and_a_retried_build_runs_it_again(
    build_step, collection: str, run_id: str
) -> None:
    failed = build_step(["sh", "-c", "exit 3"])
    assert failed.returncode == 3
    released = record(collection, run_id)
    assert released is not None and released.status == "failed" and released.last_error == "command exited with 3"
    again = build_step(["true"], build_id="b-2")
    assert again.returncode == 0, again.stderr
    done = record(collection, run_id)
    assert done is not None and done.status == "completed" and done.attempts == 2 and done.attempt_id == "b-2"


def test_in_progress_elsewhere_exits_75_without_running(
    build_step, collection: str, run_id: str, tmp_path: Path
) -> None:
    store = FirestoreStepStore(project=FIRESTORE_PROJECT, collection=collection)
    store.claim(StepKey(run_id, "deploy", "-"), datetime.now(UTC), timedelta(minutes=5), timedelta(days=1), "job")
    store.close()
    busy = build_step(["sh", "-c", f"touch {tmp_path / 'ran'}"])
    assert busy.returncode == 75 and "is in progress in job" in busy.stderr
    assert not (tmp_path / "ran").exists()


def test_takeover_fences_the_stale_build(build_step, collection: str, run_id: str) -> None:
    # The command itself plays the newer attempt: it takes the step over as if its lease had expired.
    takeover = (
        "from datetime import datetime, timedelta, timezone; from runonce_guard import StepKey; "
        "from runonce_guard.stores.firestore import FirestoreStepStore; "
        f"s = FirestoreStepStore(project={FIRESTORE_PROJECT!r}, collection={collection!r}); "
        f"c = s.claim(StepKey({run_id!r}, 'deploy', '-'), datetime.now(timezone.utc) + timedelta(hours=1), "
        "timedelta(minutes=5), timedelta(days=1)); assert c.decision.name == 'TAKEOVER', c"
    )
    stale = build_step([sys.executable, "-c", takeover])
    assert stale.returncode == 1, stale.stderr
    assert "a newer attempt had taken the step over" in stale.stderr
    held = record(collection, run_id)
    assert held is not None and held.status == "in_progress" and held.attempts == 2


def test_no_idempotency_key_fails_saying_runonce_did_not_start_the_build(build_step, tmp_path: Path) -> None:
    done = build_step(["sh", "-c", f"touch {tmp_path / 'ran'}"], idempotency_key="")
    assert done.returncode == 1 and "not started by runonce" in done.stderr
    assert not (tmp_path / "ran").exists()
