"""`X-CloudTasks-QueueName` in both forms Cloud Tasks dispatchers send: the queue id (`Q`) and the
queue's resource name (`projects/P/locations/L/queues/Q`). The two are one run in namespace P/L; a
resource name that disagrees with the namespace named by the query or the route is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.api import Harness, run_id_of

FULL = "projects/route-project/locations/europe-west1/queues/exports"


def task(queue: str, name: str = "task-123") -> dict[str, str]:
    return {"X-CloudTasks-QueueName": queue, "X-CloudTasks-TaskName": name}


async def test_resource_name_and_queue_id_in_its_namespace_are_one_run(api: Harness) -> None:
    full = await api.deliver(headers=task(FULL))
    short = await api.deliver(headers=task("exports"))  # the route's namespace is route-project/europe-west1
    assert full.status_code == 200 and full.json()["status"] == "processed"
    assert short.json() == {**full.json(), "status": "duplicate"}
    assert full.json()["run_id"] == run_id_of("runonce/v1|tasks|route-project|europe-west1|etl|exports|task-123")
    assert len(api.target.dispatched) == 1
    assert api.target.dispatched[0].job == "exports"


async def test_resource_name_supplies_the_namespace_a_bare_route_lacks(api: Harness) -> None:
    response = await api.deliver("bare", headers=task("projects/other-project/locations/us-east1/queues/q-1"))
    assert response.json()["run_id"] == run_id_of("runonce/v1|tasks|other-project|us-east1|bare|q-1|task-123")
    record = await api.store.get(response.json()["run_id"], api.clock())
    assert (record.project, record.location, record.job) == ("other-project", "us-east1", "q-1")
    # the same task by queue id, with the namespace in the query, is the same run
    again = await api.client.post("/v1/routes/bare:run?project=other-project&location=us-east1", headers=task("q-1"))
    assert again.json()["status"] == "duplicate" and again.json()["run_id"] == response.json()["run_id"]


async def test_query_matching_the_resource_name_is_accepted(api: Harness) -> None:
    response = await api.client.post(
        "/v1/routes/bare:run?project=other-project",
        headers=task("projects/other-project/locations/us-east1/queues/q-1"),
    )
    assert response.json()["run_id"] == run_id_of("runonce/v1|tasks|other-project|us-east1|bare|q-1|task-123")


@pytest.mark.parametrize(
    ("route", "query", "queue", "says"),
    [
        (
            "etl",
            "",
            "projects/other-project/locations/europe-west1/queues/exports",
            "the queue is in project 'other-project', but this delivery's namespace (query parameter project, else the "
            "route's namespace) says 'route-project'",
        ),
        (
            "etl",
            "",
            "projects/route-project/locations/us-east1/queues/exports",
            "the queue is in location 'us-east1', but this delivery's namespace (query parameter location, else the "
            "route's namespace) says 'europe-west1'",
        ),
        (
            "bare",
            "?project=query-project",
            "projects/other-project/locations/us-east1/queues/q",
            "project 'other-project', but this delivery's namespace (query parameter project, else the route's "
            "namespace) says 'query-project'; runs of different projects are never merged: send project=other-project",
        ),
        (
            "bare",
            "?location=asia-east1",
            "projects/other-project/locations/us-east1/queues/q",
            "says 'asia-east1'; runs of different locations are never merged: send location=us-east1, or none",
        ),
    ],
    ids=["route-project", "route-location", "query-project", "query-location"],
)
async def test_resource_name_in_another_namespace_is_400_naming_both(
    api: Harness, route: str, query: str, queue: str, says: str
) -> None:
    response = await api.client.post(f"/v1/routes/{route}:run{query}", headers=task(queue))
    assert response.status_code == 400
    body = response.json()
    assert body["status"] == "invalid" and body["route"] == route
    assert body["error"]["field"] == "X-CloudTasks-QueueName"
    assert says in body["error"]["message"]
    assert api.target.dispatched == [] and await api.store.list(api.clock()) == []


@pytest.mark.parametrize(
    ("queue", "says"),
    [
        ("projects/route-project/locations/europe-west1/queues/", "neither a queue id"),
        ("projects/route-project/locations/europe-west1/queues/a_b", "the queue in the queue's resource name"),
        ("projects/route-project/locations/europe-west1/queue/exports", "neither a queue id"),
        ("projects/123/locations/europe-west1/queues/exports", "the project in"),  # a number, not a project id
        ("projects/route-project/locations/Europe/queues/exports", "the location in"),
        ("projects/route-project/locations/europe-west1/queues/exports/tasks/t", "neither a queue id"),
        ("locations/europe-west1/queues/exports", "neither a queue id"),
        ("exports|x", "neither a queue id"),
    ],
)
async def test_malformed_queue_names_are_400(api: Harness, queue: str, says: str) -> None:
    response = await api.deliver(headers=task(queue))
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "X-CloudTasks-QueueName"
    assert says in response.json()["error"]["message"]
    assert api.target.dispatched == []


@pytest.fixture
def key_cli(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`runonce key` with a routes file whose route `etl` pins no namespace."""
    routes = tmp_path / "routes.yaml"
    routes.write_text("routes:\n  etl:\n    target: {type: log}\n")
    monkeypatch.setenv("RUNONCE_ROUTES_FILE", str(routes))
    return cli


def test_key_accepts_both_queue_forms_and_they_agree(key_cli) -> None:
    cli = key_cli
    full = cli("key", "--route", "etl", "--queue", FULL, "--task", "t-1", "--canonical")
    short = cli(
        "key",
        "--route",
        "etl",
        "--queue",
        "exports",
        "--task",
        "t-1",
        "--project",
        "route-project",
        "--location",
        "europe-west1",
        "--canonical",
    )
    assert full.exit_code == 0 and short.exit_code == 0
    assert full.output == short.output
    assert full.output.splitlines()[1] == "runonce/v1|tasks|route-project|europe-west1|etl|exports|t-1"


def test_key_refuses_a_queue_in_another_project(key_cli) -> None:
    cli = key_cli
    result = cli("key", "--route", "etl", "--queue", FULL, "--task", "t-1", "--project", "other-project")
    assert result.exit_code == 2
    assert "'route-project'" in result.output and "'other-project'" in result.output
