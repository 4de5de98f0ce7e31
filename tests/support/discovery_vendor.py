"""Write the discovery documents runonce carries (`runonce/targets/discovery/`), reduced, from the
installed google-api-python-client's cache, and the `SOURCE.json` that pins them to its version.

    make discovery      # = python -m tests.support.discovery_vendor

tests/targets/test_google_api.py checks that the files still equal what this would write.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from importlib.metadata import version

from runonce.targets.google_api_discovery import VENDORED, reduce_document
from tests.support.discovery import _documents_dir

APIS = (
    "aiplatform.v1",  # Vertex AI: pipelineJobs.create (pipelineJobId), customJobs
    "batch.v1",  # Cloud Batch: jobs.create (jobId, requestId)
    "bigquery.v2",  # jobs.insert (jobReference.jobId)
    "cloudbuild.v1",  # builds.create, triggers.run
    "cloudtasks.v2",  # Cloud Tasks: tasks.create (the task name is client-chosen)
    "composer.v1",  # Cloud Composer: environments
    "dataflow.v1b3",  # Flex Templates: launch (jobName)
    "dataproc.v1",  # Dataproc Serverless: batches.create (batchId, requestId)
    "file.v1",  # Filestore: backups.create (backupId)
    "pubsub.v1",  # topics/subscriptions/snapshots.create (the name is client-chosen)
    "run.v2",  # Cloud Run: jobs.create (jobId), jobs.run
    "workflowexecutions.v1",  # Workflows executions
)
CLIENT = "google-api-python-client"


def compressed(api: str) -> tuple[bytes, str]:
    """(the reduced document, gzipped reproducibly; the original's sha256)."""
    original = (_documents_dir() / f"{api}.json").read_bytes()
    reduced = json.dumps(reduce_document(json.loads(original)), separators=(",", ":"), sort_keys=True)
    return gzip.compress(reduced.encode(), compresslevel=9, mtime=0), hashlib.sha256(original).hexdigest()


def source() -> dict[str, object]:
    return {
        "client": CLIENT,
        "version": version(CLIENT),
        "documents": {api: compressed(api)[1] for api in APIS},
    }


def main() -> None:
    VENDORED.mkdir(exist_ok=True)
    for stale in VENDORED.glob("*.json.gz"):
        stale.unlink()
    total = 0
    for api in APIS:
        data, _digest = compressed(api)
        (VENDORED / f"{api}.json.gz").write_bytes(data)
        total += len(data)
        print(f"{api}: {len(data) / 1024:.0f} KiB")
    (VENDORED / "SOURCE.json").write_text(json.dumps(source(), indent=2) + "\n")
    print(f"{len(APIS)} documents, {total / 1024:.0f} KiB, from {CLIENT} {version(CLIENT)}")


if __name__ == "__main__":
    main()
