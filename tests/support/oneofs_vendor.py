"""Write `runonce/targets/discovery/oneofs.json`: the fields of each request schema that the API's
protos declare as one `oneof` (at most one may be set; a oneof whose comment starts "Required."
needs exactly one), read from a checkout of github.com/googleapis/googleapis.

Discovery documents drop `oneof`: Google's REST reference shows it ("Union field executable can be
only one of the following"), and the API refuses a request that sets two of its fields. So the
groups come from the protos the reference is generated from, mapped to the discovery schemas by
message name, and kept only where every field of the group is in the schema runonce carries.

    make oneofs GOOGLEAPIS=~/src/googleapis     # = python -m tests.support.oneofs_vendor DIR

tests/targets/test_google_api_discovery.py checks the file against the documents runonce carries.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from runonce.targets.google_api_discovery import ONEOFS, VENDORED, camel

PROTOS = {
    "aiplatform.v1": "google/cloud/aiplatform/v1",
    "batch.v1": "google/cloud/batch/v1",
    "bigquery.v2": "google/cloud/bigquery/v2",
    "cloudbuild.v1": "google/devtools/cloudbuild/v1",
    "cloudtasks.v2": "google/cloud/tasks/v2",
    "composer.v1": "google/cloud/orchestration/airflow/service/v1",
    "dataflow.v1b3": "google/dataflow/v1beta3",
    "dataproc.v1": "google/cloud/dataproc/v1",
    "file.v1": "google/cloud/filestore/v1",
    "pubsub.v1": "google/pubsub/v1",
    "run.v2": "google/cloud/run/v2",
    "workflowexecutions.v1": "google/cloud/workflows/executions/v1",
}
SCHEMA_PREFIXES = ("", "GoogleCloudAiplatformV1", "GoogleCloudRunV2", "GoogleDevtoolsCloudbuildV1")
"""How discovery names a message: its own name, or its nesting path, behind the API's prefix."""
LEXEMES = re.compile(r'"(?:\\.|[^"\\\n])*"|//[^\n]*|/\*.*?\*/', re.S)
"""A string or a comment, whichever starts first (a `//` in a string is no comment)."""
TOKEN = re.compile(
    r"\b(message|enum|oneof|service)\s+(\w+)\s*\{|\{|\}"
    r"|(?:repeated\s+)?[\w.]+(?:<[^>]*>)?\s+(\w+)\s*=\s*\d+(?:\s*\[[^\]]*?json_name\s*=\s*\"(\w+)\")?"
)


def oneofs(text: str) -> list[dict[str, Any]]:
    """Every `oneof` of a .proto file: the path of messages it sits in, its fields' JSON names, and
    whether its leading comment says "Required."."""
    # comments blanked, and braces in strings, in place (positions kept for the leading comments)
    blank = LEXEMES.sub(lambda m: re.sub(r"[{}]" if m.group(0)[0] == '"' else r"[^\n]", " ", m.group(0)), text)
    stack: list[tuple[str, str]] = []
    found: list[dict[str, Any]] = []
    for match in TOKEN.finditer(blank):
        kind, name, field, json_override = match.groups()
        if kind:
            stack.append((kind, name))
            if kind == "oneof":
                leading = []
                for line in reversed(text[: match.start()].rstrip().split("\n")):
                    if not line.strip().startswith("//"):
                        break
                    leading.insert(0, line.strip()[2:].strip())
                path = [part for kind_, part in stack if kind_ == "message"]
                required = " ".join(leading).startswith("Required")
                found.append({"path": path, "name": name, "fields": [], "required": required})
        elif match.group(0) == "{":
            stack.append(("block", ""))
        elif match.group(0) == "}":
            stack.pop()
        elif field and stack and stack[-1][0] == "oneof":
            found[-1]["fields"].append(json_override or camel(field))
    return found


def groups_of(api: str, files: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """{schema: [{"fields": [...], "required": true?}]} of the oneofs that map to `api`'s document."""
    schemas = json.loads(gzip.decompress((VENDORED / f"{api}.json.gz").read_bytes()))["schemas"]
    groups: dict[str, list[dict[str, Any]]] = {}
    for text in files.values():
        for oneof in oneofs(text):
            if oneof["name"].startswith("_") or len(oneof["fields"]) < 2:
                continue  # proto3 `optional` makes a oneof of one field
            nested = "".join(oneof["path"])
            names = {prefix + nested for prefix in SCHEMA_PREFIXES} | {oneof["path"][-1]}
            fits = [
                name
                for name in sorted(names)
                if name in schemas and set(oneof["fields"]) <= set(schemas[name].get("properties") or {})
            ]
            if len(fits) != 1:
                continue  # a response-only message, or a field newer than the document
            group = {"fields": oneof["fields"], **({"required": True} if oneof["required"] else {})}
            if group not in groups.setdefault(fits[0], []):
                groups[fits[0]].append(group)
    return dict(sorted(groups.items()))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.oneofs_vendor GOOGLEAPIS_CHECKOUT", file=sys.stderr)
        return 2
    repo = Path(argv[0])
    commit = _git(repo, "rev-parse", "HEAD").strip()
    apis = {}
    for api, directory in PROTOS.items():
        paths = [
            p for p in _git(repo, "ls-tree", "--name-only", "HEAD", f"{directory}/").split() if p.endswith(".proto")
        ]
        apis[api] = groups_of(api, {path: _git(repo, "show", f"HEAD:{path}") for path in paths})
        print(f"{api}: {sum(map(len, apis[api].values()))} oneofs")
    data = {"source": {"repository": "googleapis/googleapis", "commit": commit}, "apis": apis}
    ONEOFS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
