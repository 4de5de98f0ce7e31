"""The Workflows recipe: the YAML parses, every Firestore connector call is what Google's discovery
document allows, and the subworkflows themselves (interpreted, see workflows_interp.py) claim,
skip, take over and fence against the emulator's REST endpoint, writing the documents the Python
guard reads."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from runonce_guard import StepKey
from runonce_guard.stores.firestore import FirestoreStepStore
from tests.guard.firestore_rest import CONNECTOR, FirestoreRest, check_args
from tests.guard.workflows_interp import Interpreter, WorkflowError
from tests.support.clock import Clock
from tests.support.discovery import Violation
from tests.support.stores import FIRESTORE_PROJECT

WORKFLOWS = Path(__file__).resolve().parents[2] / "guard" / "workflows"
LIBRARY = yaml.safe_load((WORKFLOWS / "runonce_guard.yaml").read_text())
EXAMPLE = yaml.safe_load((WORKFLOWS / "example.yaml").read_text())


def connector_calls(node: Any, found: list | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Every `call: googleapis.firestore.v1.…` in a parsed workflow, with its args."""
    found = [] if found is None else found
    if isinstance(node, dict):
        if isinstance(node.get("call"), str) and node["call"].startswith("googleapis."):
            found.append((node["call"], node.get("args", {})))
        for value in node.values():
            connector_calls(value, found)
    elif isinstance(node, list):
        for value in node:
            connector_calls(value, found)
    return found


def assigned_literals(workflow: dict[str, Any]) -> dict[str, Any]:
    """Maps assigned as literals in a subworkflow (`- claim: {fields: …}`), to check bodies given as `${claim}`."""
    literals: dict[str, Any] = {}
    for step in workflow.get("steps", []):
        ((_name, body),) = step.items()
        for item in body.get("assign", []) if isinstance(body, dict) else []:
            ((target, value),) = item.items()
            if isinstance(value, dict) and "." not in target:
                literals[target] = value
    return literals


def check_workflow_file(source: dict[str, Any]) -> int:
    checked = 0
    for _name, workflow in source.items():
        literals = assigned_literals(workflow)
        for connector, args in connector_calls(workflow):
            args = dict(args)
            body = args.get("body")
            if isinstance(body, str) and body.strip("${}") in literals:
                args["body"] = literals[body.strip("${}")]
            check_args(connector, args)
            checked += 1
    return checked


def test_yaml_parses_and_the_example_carries_the_subworkflows_verbatim() -> None:
    assert set(LIBRARY) == {"runonce_once", "runonce_done", "runonce_release", "runonce_write_if_held"}
    assert set(EXAMPLE) == {"main", *LIBRARY}
    for name in LIBRARY:
        assert EXAMPLE[name] == LIBRARY[name], f"example.yaml's {name} differs from runonce_guard.yaml"
    assert LIBRARY["runonce_once"]["params"][:3] == ["run_id", "step", "project"]


def test_every_connector_call_is_allowed_by_the_firestore_discovery_document() -> None:
    calls = connector_calls(LIBRARY)
    assert sorted(c for c, _ in calls) == sorted(
        CONNECTOR + "projects.databases.documents." + m for m in ("createDocument", "get", "commit", "commit")
    )
    assert check_workflow_file(LIBRARY) == 4
    assert check_workflow_file(EXAMPLE) == 4


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda c: c["runonce_once"]["steps"][0]["init"]["assign"][-1]["claim"]["fields"]["status"].update(
                {"stringvalue": "x"}
            ),
            "unknown field 'stringvalue'",
        ),
        (
            lambda c: c["runonce_once"]["steps"][1]["create"]["try"]["args"].update({"documentID": "x"}),
            "unknown argument 'documentID'",
        ),
        (
            lambda c: c["runonce_once"]["steps"][1]["create"]["try"]["args"].pop("collectionId"),
            "required argument 'collectionId'",
        ),
        (
            lambda c: c["runonce_once"]["steps"][1]["create"]["try"].update(
                {"call": CONNECTOR + "projects.databases.documents.insert"}
            ),
            "no method firestore.projects.databases.documents.insert",
        ),
    ],
)
def test_the_discovery_check_rejects_a_broken_call(mutate, message: str) -> None:
    broken = copy.deepcopy(LIBRARY)
    mutate(broken)
    with pytest.raises(Violation, match=message):
        check_workflow_file(broken)


@pytest.fixture
def workflows(firestore_emulator, collection: str):
    """Runs subworkflows of a source file as executions would: each call is a new execution id."""
    rest, clock = FirestoreRest(firestore_emulator.host), Clock(datetime.now(UTC).timestamp())
    http_calls: list[dict[str, Any]] = []
    state = {"executions": 0, "http_fails": 0}

    def calls(name: str, args: dict[str, Any]) -> Any:
        if name == "http.post":  # the example's side effect: the one fake here, at the network edge
            http_calls.append(args)
            if state["http_fails"]:
                state["http_fails"] -= 1
                raise WorkflowError({"code": 503, "message": "publisher unavailable", "tags": ["HttpError"]})
            return {"code": 200, "body": {"published": len(http_calls)}}
        return rest(name, args)

    def run(name: str, source: dict[str, Any] = LIBRARY, **args: Any) -> Any:
        state["executions"] += 1
        env = {
            "GOOGLE_CLOUD_WORKFLOW_EXECUTION_ID": f"exec-{state['executions']}",
            "GOOGLE_CLOUD_WORKFLOW_ID": "publish",
            "GOOGLE_CLOUD_PROJECT_ID": FIRESTORE_PROJECT,
        }
        if name == "runonce_once":
            args = {"project": FIRESTORE_PROJECT, "collection": collection, **args}
        return Interpreter(source, calls, env, clock).run(name, args)

    run.rest, run.clock, run.http_calls, run.state = rest, clock, http_calls, state  # type: ignore[attr-defined]
    return run


def python_guard_record(collection: str, run_id: str, step: str):
    store = FirestoreStepStore(project=FIRESTORE_PROJECT, collection=collection)
    try:
        return store.get(StepKey(run_id, step, "-"), datetime.now(UTC))
    finally:
        store.close()


def test_claim_then_in_progress_then_done_then_skip(workflows, collection: str, run_id: str) -> None:
    claim = workflows("runonce_once", run_id=run_id, step="publish")
    assert claim["run"] is True and claim["attempts"] == 1 and claim["recovering"] is False
    with pytest.raises(WorkflowError) as busy:
        workflows("runonce_once", run_id=run_id, step="publish")
    assert busy.value.value["code"] == 409 and busy.value.value["tags"] == ["RunonceStepInProgress"]
    assert "in progress in workflows/publish/exec-1" in busy.value.value["message"]

    assert workflows("runonce_done", claim=claim, result={"published": 3}) is True
    skip = workflows("runonce_once", run_id=run_id, step="publish")
    assert skip["run"] is False and skip["result"] == '{"published":3}'
    assert list(workflows.rest.calls) == [
        ("createDocument", 200),
        ("createDocument", 409),
        ("get", 200),
        ("commit", 200),
        ("createDocument", 409),
        ("get", 200),
    ]
    record = python_guard_record(collection, run_id, "publish")  # the Python guard reads the same document
    assert record is not None and record.status == "completed" and record.result_value() == {"published": 3}
    assert record.attempt_id == "exec-1" and record.holder == "workflows/publish/exec-1"


def test_release_lets_the_next_execution_run_the_step(workflows, collection: str, run_id: str) -> None:
    claim = workflows("runonce_once", run_id=run_id, step="publish")
    assert workflows("runonce_release", claim=claim, error={"code": 503, "message": "down"}) is True
    record = python_guard_record(collection, run_id, "publish")
    assert record is not None and record.status == "failed" and '"down"' in record.last_error
    again = workflows("runonce_once", run_id=run_id, step="publish")
    assert again["run"] is True and again["attempts"] == 2 and again["recovering"] is False


def test_lease_expiry_takeover_fences_the_stale_execution(workflows, run_id: str) -> None:
    stale = workflows("runonce_once", run_id=run_id, step="publish", lease_seconds=60)
    workflows.clock.advance(61)  # the first execution hangs (or died) past its lease
    fresh = workflows("runonce_once", run_id=run_id, step="publish", lease_seconds=60)
    assert fresh["run"] is True and fresh["recovering"] is True and fresh["attempts"] == 2
    with pytest.raises(WorkflowError) as fenced:
        workflows("runonce_done", claim=stale, result="stale")
    assert fenced.value.value["tags"] == ["RunonceFenced"]
    assert workflows("runonce_release", claim=stale, error="late failure") is False  # releases nothing
    assert workflows("runonce_done", claim=fresh) is True


def test_example_workflow_publishes_once_per_run_id(workflows, run_id: str) -> None:
    args = {"args": {"idempotency_key": run_id, "runonce": {"job": "nightly"}}}
    workflows.state["http_fails"] = 1
    with pytest.raises(WorkflowError, match="publisher unavailable"):
        workflows("main", EXAMPLE, **args)  # the side effect failed: released
    first = workflows("main", EXAMPLE, **args)  # a retry of the execution: publishes
    second = workflows("main", EXAMPLE, **args)  # executed again with the same argument: skipped
    assert first == {"run_id": run_id, "published": True, "attempts": 2}
    assert second == {"run_id": run_id, "published": False, "attempts": 2}
    assert [call["headers"] for call in workflows.http_calls] == [{"Idempotency-Key": run_id}] * 2


def test_a_step_the_python_guard_holds_is_in_progress_for_the_workflow(workflows, collection: str, run_id: str) -> None:
    store = FirestoreStepStore(project=FIRESTORE_PROJECT, collection=collection)
    now = datetime.now(UTC)

    claim = store.claim(StepKey(run_id, "publish", "-"), now, timedelta(minutes=5), timedelta(days=1), holder=None)
    with pytest.raises(WorkflowError) as busy:
        workflows("runonce_once", run_id=run_id, step="publish")
    assert "is in progress in another attempt until" in busy.value.value["message"]
    store.finish(claim, "completed", now, result='{"id":7}')
    store.close()
    skip = workflows("runonce_once", run_id=run_id, step="publish")
    assert skip["run"] is False and skip["result"] == '{"id":7}'
