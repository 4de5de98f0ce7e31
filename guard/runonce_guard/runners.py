"""Which task of a job this process is, read from what each Google job runner sets.

A step's record is `{run_id}~{step}~{task}`: tasks of one job run in parallel and each must guard
its own share, so the guard has to tell them apart. The runners, and what they set:

- Cloud Run jobs: `CLOUD_RUN_TASK_INDEX` of `CLOUD_RUN_TASK_COUNT`, attempt `CLOUD_RUN_TASK_ATTEMPT`;
- Cloud Batch: `BATCH_TASK_INDEX` of `BATCH_TASK_COUNT`, attempt `BATCH_TASK_RETRY_ATTEMPT`;
- Vertex AI custom jobs (also a pipeline's custom-job component): `CLUSTER_SPEC` (else `TF_CONFIG`),
  whose `task.type` and `task.index` name one of the replicas listed in `cluster`; no attempt.

Vertex's replicas are numbered across worker pools in order (workerpool0's replica is 0, the
first of workerpool1 is 1, …), so every replica has one number. Dataproc runs one driver per batch
and Vertex AI Pipelines one container per task: neither sets an index, so a step there has no task
part. A Spark executor (`SPARK_EXECUTOR_ID`, set by Spark on Kubernetes) runs partitions that its
environment does not name, and a job whose task count is above 1 but whose index is missing or
malformed cannot be told apart either: both are refused, naming `--task`, rather than guessed (a
guess would let one task's record stand for all of them: the others would skip their share).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import GuardConfigError
from .settings import shown

INDEX = re.compile(r"[0-9]{1,9}")
"""A task index or count as the runners write it: ASCII digits, bounded before `int()`."""

MAX_SPEC_CHARS = 1_000_000
"""A `CLUSTER_SPEC`/`TF_CONFIG` longer than this is not a runner's (the JSON is refused unread)."""

FIX = "pass the task index with --task N (task=N in the library), or --no-task for one record for all tasks"


@dataclass(frozen=True)
class TaskIdentity:
    """What the runner says about this process: its task index (None: the job has one task, or no
    runner is in sight) and its attempt (0 on a first run, None when the runner does not say)."""

    runner: str | None
    index: str | None
    count: int | None
    attempt: int | None


def _number(environ: Mapping[str, str], name: str, runner: str) -> int | None:
    raw = environ.get(name)
    if raw is None or raw == "":
        return None
    if not INDEX.fullmatch(raw):
        raise GuardConfigError(f"{name}: {shown(raw)} is not a {runner} task number (0 to 999999999): {FIX}")
    return int(raw)


def _indexed(environ: Mapping[str, str], runner: str, prefix: str, attempt_name: str) -> TaskIdentity | None:
    """Cloud Run jobs and Batch: an index and a count in two variables."""
    index_name, count_name = f"{prefix}_INDEX", f"{prefix}_COUNT"
    if not any(environ.get(name) for name in (index_name, count_name, attempt_name)):
        return None
    count = _number(environ, count_name, runner)
    index = _number(environ, index_name, runner)
    attempt = _number(environ, attempt_name, runner)
    if index is None and count is not None and count > 1:
        raise GuardConfigError(f"{runner}: {count_name} is {count} but {index_name} is not set: {FIX}")
    if index is not None and count is not None and index >= count:
        raise GuardConfigError(f"{runner}: {index_name} {index} is not below {count_name} {count}: {FIX}")
    return TaskIdentity(runner, None if index is None else str(index), count, attempt)


_TF_POOLS = ("chief", "master", "worker", "ps", "evaluator")
"""TF_CONFIG's task types in Vertex's worker-pool order (workerpool0 is the chief or master)."""


def _pool_order(pool: str) -> tuple[int, str]:
    match = re.fullmatch(r"workerpool([0-9]{1,2})", pool)
    if match:
        return int(match[1]), pool
    return (_TF_POOLS.index(pool), pool) if pool in _TF_POOLS else (len(_TF_POOLS), pool)


def _cluster_replica(name: str, raw: str) -> TaskIdentity:
    """Vertex's `CLUSTER_SPEC`/`TF_CONFIG`: this replica's number across all worker pools."""
    runner = f"Vertex AI ({name})"
    try:
        spec = json.loads(raw) if len(raw) <= MAX_SPEC_CHARS else None
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        spec = None
    cluster = spec.get("cluster") if isinstance(spec, dict) else None
    task = spec.get("task") if isinstance(spec, dict) else None
    pools = (
        {pool: hosts for pool, hosts in cluster.items() if isinstance(hosts, list)} if isinstance(cluster, dict) else {}
    )
    count = sum(len(hosts) for hosts in pools.values())
    pool = task.get("type") if isinstance(task, dict) else None
    index = task.get("index") if isinstance(task, dict) else None
    if isinstance(index, str) and INDEX.fullmatch(index):
        index = int(index)
    if not (
        isinstance(pool, str) and pool in pools and isinstance(index, int) and 0 <= index < len(pools[pool])
    ) or isinstance(index, bool):
        if isinstance(cluster, dict) and count <= 1:  # one replica (or none listed): nothing to tell apart
            return TaskIdentity(runner, "0" if count == 1 else None, count, None)
        raise GuardConfigError(
            f"{name} does not say which of the job's replicas this is (its task.type and task.index "
            f"must name one of the replicas in cluster): {FIX}"
        )
    assert isinstance(pool, str) and isinstance(index, int)
    before = sum(len(pools[other]) for other in pools if _pool_order(other) < _pool_order(pool))
    return TaskIdentity(runner, str(before + index), count, None)


def task_identity(environ: Mapping[str, str]) -> TaskIdentity:
    """This process's task, from whichever runner's variables are set. GuardConfigError (naming
    `--task`) when the tasks of a job with several cannot be told apart, or two runners disagree."""
    found = [
        identity
        for identity in (
            _indexed(environ, "Cloud Run job", "CLOUD_RUN_TASK", "CLOUD_RUN_TASK_ATTEMPT"),
            _indexed(environ, "Cloud Batch", "BATCH_TASK", "BATCH_TASK_RETRY_ATTEMPT"),
            _cluster_replica("CLUSTER_SPEC", environ["CLUSTER_SPEC"]) if environ.get("CLUSTER_SPEC") else None,
        )
        if identity is not None
    ]
    if not found and environ.get("TF_CONFIG"):
        found.append(_cluster_replica("TF_CONFIG", environ["TF_CONFIG"]))
    if not found and environ.get("SPARK_EXECUTOR_ID"):
        raise GuardConfigError(
            "a Spark executor runs many partitions and its environment does not say which: "
            "pass the partition (task=TaskContext.get().partitionId()), or guard the step in the driver"
        )
    indexes = {identity.index for identity in found if identity.index is not None}
    if len(indexes) > 1:
        runners = " and ".join(f"{identity.runner} (task {identity.index})" for identity in found)
        raise GuardConfigError(f"{runners} both name this task, differently: {FIX}")
    if not found:
        return TaskIdentity(None, None, None, None)
    return next((identity for identity in found if identity.index is not None), found[0])
