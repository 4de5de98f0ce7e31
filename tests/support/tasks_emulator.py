"""gcloud-tasks-emulator (PyPI): a third-party Cloud Tasks server (gRPC) that dispatches HTTP tasks.

It pins protobuf < 5 and google-cloud-tasks < 3, which the project's venv cannot hold, so it lives
in its own venv, `.tools/tasks-emulator` (`make .tools/tasks-emulator/.installed`, which `make test`
runs). The tests drive it with the project's own `google-cloud-tasks` client, as a user's code would.
It sends `X-CloudTasks-QueueName` as the queue's resource name.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.procs import REPO, EmulatorProcess, free_port, listening, require_services, wait_for

EMULATOR = REPO / ".tools" / "tasks-emulator" / "bin" / "gcloud-tasks-emulator"


class TasksEmulator(EmulatorProcess):
    """gcloud-tasks-emulator's gRPC API on 127.0.0.1:`port`."""

    def client(self):
        """A `google.cloud.tasks_v2.CloudTasksClient` talking to the emulator (insecure channel)."""
        import grpc
        from google.cloud.tasks_v2 import CloudTasksClient
        from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

        return CloudTasksClient(transport=CloudTasksGrpcTransport(channel=grpc.insecure_channel(self.host)))


def start_tasks_emulator(log_dir: Path, max_retries: int = 5) -> TasksEmulator:
    """The emulator on a free port; a task is retried at most `max_retries` times. Fails, never
    skips, when it is not installed."""
    require_services("the Cloud Tasks emulator")
    if not EMULATOR.exists():
        raise RuntimeError(
            f"gcloud-tasks-emulator is required at {EMULATOR}: run `make .tools/tasks-emulator/.installed` "
            "(a venv with `pip install gcloud-tasks-emulator`; it cannot share the project's venv)"
        )
    port = free_port()
    log = log_dir / f"tasks-emulator-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(EMULATOR), "start", "--port", str(port), "--max-retries", str(max_retries)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    emulator = TasksEmulator(proc, port, log)
    try:
        wait_for(lambda: listening(port), 30, "gcloud-tasks-emulator", proc, log)
    except Exception:
        emulator.stop()
        raise
    return emulator
