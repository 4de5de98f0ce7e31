"""The guard in every Google job runner: each task of a multi-task job guards its own share.

Each case runs the installed `runonce-guard` as the runner would, with the environment variables
that runner sets (Cloud Run jobs, Cloud Batch, Vertex AI's CLUSTER_SPEC/TF_CONFIG, a Dataproc
driver, a Vertex AI Pipelines component), against the Firestore emulator.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.guard_cli import guard

RUNNER_VARIABLES = ("CLOUD_RUN_", "BATCH_", "CLUSTER_SPEC", "TF_CONFIG", "SPARK_", "IDEMPOTENCY_KEY")


@pytest.fixture
def store_env(job_env: dict[str, str], run_id: str) -> dict[str, str]:
    """The store's settings and RUNONCE_RUN_ID (what the batch, Dataproc and Vertex targets set),
    without any runner's variables."""
    base = {k: v for k, v in job_env.items() if not k.startswith(RUNNER_VARIABLES)}
    return base | {"RUNONCE_RUN_ID": run_id, "RUNONCE_SCHEDULE_TIME": "2026-12-06T02:00:00Z"}


def _cluster_spec(pools: dict[str, int], pool: str, index: int) -> str:
    cluster = {name: [f"cmle-training-{name}-ab-{i}:2222" for i in range(n)] for name, n in pools.items()}
    return json.dumps({"cluster": cluster, "environment": "cloud", "task": {"type": pool, "index": index}, "job": "{}"})


def _tf_config(pools: dict[str, int], pool: str, index: int) -> str:
    cluster = {name: [f"{name}-{i}:2222" for i in range(n)] for name, n in pools.items()}
    return json.dumps({"cluster": cluster, "environment": "cloud", "task": {"type": pool, "index": index}})


def _tasks(runner: str) -> list[dict[str, str]]:
    """Every task's own variables in a 4-task (4-replica) job of `runner`, as the runner sets them."""
    if runner == "cloud_run":
        return [
            {
                "CLOUD_RUN_EXECUTION": "render-x7k2p",
                "CLOUD_RUN_TASK_INDEX": str(i),
                "CLOUD_RUN_TASK_COUNT": "4",
                "CLOUD_RUN_TASK_ATTEMPT": "0",
                "CLOUD_RUN_JOB": "render",
            }
            for i in range(4)
        ]
    if runner == "batch":
        return [
            {
                "BATCH_TASK_INDEX": str(i),
                "BATCH_TASK_COUNT": "4",
                "BATCH_TASK_RETRY_ATTEMPT": "0",
                "BATCH_HOSTS_FILE": "/etc/cloudbatch-taskgroup-hosts",
            }
            for i in range(4)
        ]
    pools = {"workerpool0": 1, "workerpool1": 2, "workerpool2": 1}
    replicas = [("workerpool0", 0), ("workerpool1", 0), ("workerpool1", 1), ("workerpool2", 0)]
    if runner == "vertex_cluster_spec":
        return [{"CLUSTER_SPEC": _cluster_spec(pools, pool, i)} for pool, i in replicas]
    tf_pools = {"chief": 1, "worker": 2, "ps": 1}
    tf_replicas = [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]
    return [{"TF_CONFIG": _tf_config(tf_pools, pool, i)} for pool, i in tf_replicas]


def _render(log: Path, shard: int) -> list[str]:
    return ["sh", "-c", f"echo {shard} >> {log}"]


@pytest.mark.parametrize("runner", ["cloud_run", "batch", "vertex_cluster_spec", "vertex_tf_config"])
def test_every_task_of_a_multi_task_job_runs_its_own_step(
    runner: str, store_env: dict[str, str], run_id: str, tmp_path: Path
) -> None:
    """Four tasks, one step name: four shards rendered, four records; a retried task skips its own."""
    log = tmp_path / "shards"
    tasks = _tasks(runner)
    for shard, variables in enumerate(tasks):
        done = guard(
            store_env | variables,
            "run",
            "--step",
            "render",
            "--run-id-env",
            "RUNONCE_RUN_ID",
            "--",
            *_render(log, shard),
        )
        assert done.returncode == 0, done.stderr
    assert sorted(log.read_text().split()) == ["0", "1", "2", "3"]

    for shard, variables in enumerate(tasks):
        status = guard(store_env | variables, "status", "--step", "render", "--run-id-env", "RUNONCE_RUN_ID")
        assert json.loads(status.stdout)["key"] == f"{run_id}~render~{shard}", status.stderr

    retry = tasks[2] | {"CLOUD_RUN_TASK_ATTEMPT": "1"} if runner == "cloud_run" else tasks[2]
    retry = retry | {"BATCH_TASK_RETRY_ATTEMPT": "1"} if runner == "batch" else retry
    again = guard(
        store_env | retry, "run", "--step", "render", "--run-id-env", "RUNONCE_RUN_ID", "--", *_render(log, 9)
    )
    assert again.returncode == 0 and "already done" in again.stderr
    assert sorted(log.read_text().split()) == ["0", "1", "2", "3"]


def test_a_batch_retry_reads_the_step_and_names_its_task_and_attempt(store_env: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "shards"
    task = {"BATCH_TASK_INDEX": "1", "BATCH_TASK_COUNT": "2", "BATCH_TASK_RETRY_ATTEMPT": "0"}
    first = guard(store_env | task, "run", "--step", "s", "--run-id-env", "RUNONCE_RUN_ID", "--", *_render(log, 1))
    assert first.returncode == 0, first.stderr
    record = json.loads(guard(store_env | task, "status", "--step", "s", "--run-id-env", "RUNONCE_RUN_ID").stdout)
    assert record["holder"].endswith("/task1/attempt0")


@pytest.mark.parametrize(
    "runner_env",
    [
        pytest.param({}, id="dataproc_driver"),  # RUNONCE_RUN_ID from spark.dataproc.driverEnv, nothing else
        pytest.param({"BATCH_TASK_INDEX": "0", "BATCH_TASK_COUNT": "1", "BATCH_TASK_RETRY_ATTEMPT": "0"}, id="batch_1"),
        pytest.param({"CLUSTER_SPEC": _cluster_spec({"workerpool0": 1}, "workerpool0", 0)}, id="vertex_1_replica"),
    ],
)
def test_a_single_task_runner_guards_one_record(
    runner_env: dict[str, str], store_env: dict[str, str], run_id: str, tmp_path: Path
) -> None:
    log = tmp_path / "shards"
    for _ in range(2):
        done = guard(
            store_env | runner_env, "run", "--step", "load", "--run-id-env", "RUNONCE_RUN_ID", "--", *_render(log, 0)
        )
        assert done.returncode == 0, done.stderr
    assert log.read_text().split() == ["0"]
    status = guard(store_env | runner_env, "status", "--step", "load", "--run-id-env", "RUNONCE_RUN_ID")
    task = "-" if not runner_env else "0"
    assert json.loads(status.stdout)["key"] == f"{run_id}~load~{task}"


UNTELLABLE = {
    "batch_count_without_index": {"BATCH_TASK_COUNT": "4", "BATCH_TASK_RETRY_ATTEMPT": "0"},
    "cloud_run_count_without_index": {"CLOUD_RUN_TASK_COUNT": "3", "CLOUD_RUN_EXECUTION": "x-1"},
    "batch_index_not_a_number": {"BATCH_TASK_INDEX": "one", "BATCH_TASK_COUNT": "4"},
    "batch_index_of_5000_digits": {"BATCH_TASK_INDEX": "9" * 5000, "BATCH_TASK_COUNT": "4"},
    "batch_index_past_count": {"BATCH_TASK_INDEX": "4", "BATCH_TASK_COUNT": "4"},
    "cluster_spec_without_task": {
        "CLUSTER_SPEC": json.dumps({"cluster": {"workerpool0": ["a:1"], "workerpool1": ["b:1", "c:1"]}})
    },
    "cluster_spec_not_json": {"CLUSTER_SPEC": "{cluster: workerpool0"},
    "cluster_spec_index_past_pool": {
        "CLUSTER_SPEC": _cluster_spec({"workerpool0": 1, "workerpool1": 2}, "workerpool1", 2)
    },
    "tf_config_huge_index": {"TF_CONFIG": _tf_config({"chief": 1, "worker": 2}, "worker", 10**400)},
    "spark_executor": {"SPARK_EXECUTOR_ID": "3", "SPARK_APPLICATION_ID": "spark-1"},
    "two_runners_disagree": {"CLOUD_RUN_TASK_INDEX": "1", "CLOUD_RUN_TASK_COUNT": "4", "BATCH_TASK_INDEX": "2"},
}


@pytest.mark.parametrize("variables", UNTELLABLE.values(), ids=UNTELLABLE.keys())
def test_tasks_the_guard_cannot_tell_apart_are_refused_and_task_wins(
    variables: dict[str, str], store_env: dict[str, str], run_id: str, tmp_path: Path
) -> None:
    log = tmp_path / "shards"
    env = store_env | variables
    refused = guard(env, "run", "--step", "render", "--run-id-env", "RUNONCE_RUN_ID", "--", *_render(log, 0))
    assert refused.returncode == 78, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("runonce-guard: ") and "task" in lines[0], refused.stderr
    assert "Traceback" not in refused.stderr and len(lines[0]) < 400
    assert not log.exists()

    chosen = guard(
        env, "run", "--step", "render", "--task", "2", "--run-id-env", "RUNONCE_RUN_ID", "--", *_render(log, 2)
    )
    assert chosen.returncode == 0, chosen.stderr
    assert log.read_text().split() == ["2"]
    status = guard(env, "status", "--step", "render", "--task", "2", "--run-id-env", "RUNONCE_RUN_ID")
    assert json.loads(status.stdout)["key"] == f"{run_id}~render~2"


def test_task_wins_over_the_runners_index(store_env: dict[str, str], run_id: str, tmp_path: Path) -> None:
    env = store_env | {"BATCH_TASK_INDEX": "1", "BATCH_TASK_COUNT": "4", "CLOUD_RUN_TASK_INDEX": "1"}
    done = guard(env, "run", "--step", "s", "--task", "7", "--run-id-env", "RUNONCE_RUN_ID", "--", "true")
    assert done.returncode == 0, done.stderr
    status = guard(env, "status", "--step", "s", "--task", "7", "--run-id-env", "RUNONCE_RUN_ID")
    assert json.loads(status.stdout)["key"] == f"{run_id}~s~7"
    no_task = guard(env, "status", "--step", "s", "--no-task", "--run-id-env", "RUNONCE_RUN_ID")
    assert json.loads(no_task.stdout) == {"key": f"{run_id}~s~-", "status": "absent"}
