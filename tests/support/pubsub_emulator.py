"""The real Pub/Sub emulator (`gcloud beta emulators pubsub`), driven over its REST API: a topic, a
push subscription to a local runonce, and publishes. It pushes the envelopes Pub/Sub pushes (without
an OIDC token), and redelivers a message until an answer acks it."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import httpx

from tests.support.procs import EmulatorProcess, free_port, require_services, wait_for

PROJECT = "pubsub-project"


class PubSubEmulator(EmulatorProcess):
    """The emulator's REST surface, as the push tests use it."""

    @property
    def api(self) -> str:
        return f"http://{self.host}/v1/projects/{PROJECT}"

    def topic(self, name: str) -> str:
        response = httpx.put(f"{self.api}/topics/{name}", json={}, timeout=10)
        response.raise_for_status()
        return f"projects/{PROJECT}/topics/{name}"

    def push_subscription(self, name: str, topic: str, endpoint: str, ack_deadline: int = 10) -> str:
        body = {"topic": topic, "pushConfig": {"pushEndpoint": endpoint}, "ackDeadlineSeconds": ack_deadline}
        response = httpx.put(f"{self.api}/subscriptions/{name}", json=body, timeout=10)
        response.raise_for_status()
        return f"projects/{PROJECT}/subscriptions/{name}"

    def publish(self, topic: str, data: bytes, attributes: dict[str, str] | None = None) -> str:
        message: dict[str, object] = {"data": base64.b64encode(data).decode()}
        if attributes:
            message["attributes"] = attributes
        response = httpx.post(f"http://{self.host}/v1/{topic}:publish", json={"messages": [message]}, timeout=10)
        response.raise_for_status()
        return str(response.json()["messageIds"][0])


def start_pubsub_emulator(log_dir: Path) -> PubSubEmulator:
    """The emulator on a free port. Fails, never skips, when gcloud or its pubsub component is missing."""
    require_services("the Pub/Sub emulator")
    gcloud = shutil.which("gcloud")
    if gcloud is None or shutil.which("java") is None:
        raise RuntimeError(
            "The Pub/Sub emulator is required: install the Google Cloud CLI with the pubsub-emulator component "
            "and a Java runtime (apt-get install google-cloud-cli-pubsub-emulator openjdk-17-jre-headless)."
        )
    port = free_port()
    log = log_dir / f"pubsub-emulator-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [gcloud, "beta", "emulators", "pubsub", "start", f"--host-port=127.0.0.1:{port}", "--quiet"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    emulator = PubSubEmulator(proc, port, log)
    try:
        wait_for(lambda: "Server started" in log.read_text(), 60, "Pub/Sub emulator", proc, log)
    except Exception:
        emulator.stop()
        raise
    return emulator
