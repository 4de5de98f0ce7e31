"""Property-based fuzz of the routes-file loader: whatever YAML or JSON document it is given, it
loads routes that start (their guards, policies and catch-up windows evaluate), or it refuses with
one `ConfigError` line that names the file: never a traceback, never a regular expression or
pydantic's own wording; `runonce lint` refuses the file in the same line, or not at all.

Documents are built valid-ish (every route field, with values from the right type to the absurd:
huge and non-finite numbers, other scripts' digits, project numbers, unknown target types),
written as YAML or JSON, then sometimes broken: a line repeated (repeated keys), text cut, deep
nesting, aliases, bytes that are not UTF-8, an unquoted date or time (possible or not). Google
targets start from the examples' routes (examples/*.yaml) and are mutated where a user slips: a
field emptied (null, as an empty YAML key is), a value of another type, a key that is a number, a
trailing newline, an unknown field, a field removed, an endpoint that is no Google host.

Budget: RUNONCE_FUZZ_ROUTES_EXAMPLES (default 150); RUNONCE_FUZZ_ROUTES_SEED replays a run; the
seed is printed either way.
"""

from __future__ import annotations

import copy
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from runonce.api.main import checked_routes
from runonce.lint import LintConfig, lint_files
from runonce.routes import route_warnings
from runonce.settings import ConfigError, Settings
from tests.support.procs import REPO

EXAMPLES = int(os.environ.get("RUNONCE_FUZZ_ROUTES_EXAMPLES", "150"))
SEED = int(os.environ.get("RUNONCE_FUZZ_ROUTES_SEED", random.randrange(2**32)))

numbers = st.one_of(
    st.integers(-5, 10**6),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 60, 2**63, 10**21, 1e30, "60", "1_000", "\u0663\u0660", "1:30", "017", "0x10", ".inf"]),
)
texts = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        [
            "my-project",
            "123456789012",
            "example.com:my-project",
            "us-central1",
            "US",
            "nightly",
            "a b",
            "* * * * *",
            "every 5 minutes",
            "0 0 29 2 *",
            "61 * * * *",
            "America/New_York",
            "Mars/Olympus",
            "scheduler@my-project.iam.gserviceaccount.com",
            "nobody",
            "Bad Name",
        ]
    ),
)
scalars = st.one_of(numbers, texts, st.booleans(), st.none())
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)

TARGET_TYPES = ["log", "http", "workflows", "cloud_run_job", "cloud_build_trigger", "bigquery_job", "cloud_tasks_task"]
targets = st.fixed_dictionaries(
    {"type": st.sampled_from([*TARGET_TYPES, "nosuch", 7])},
    optional={
        "url": st.sampled_from(["https://example.com/hook", "ftp://x", "not a url"]) | texts,
        "job": st.sampled_from(["projects/my-project/locations/us-central1/jobs/nightly", "jobs/x"]) | texts,
        "workflow": st.just("projects/my-project/locations/us-central1/workflows/etl") | texts,
        "trigger": st.just("projects/my-project/locations/global/triggers/t") | texts,
        "queue": st.just("projects/my-project/locations/us-central1/queues/q") | texts,
        "task_count": numbers,
        "timeout": st.sampled_from(["600s", "1e30s", "\u0665s"]) | texts,
        "labels": json_values,
        "argument": json_values,
    },
)
routes = st.fixed_dictionaries(
    {"target": targets | json_values},
    optional={
        "allowed_callers": st.lists(texts, max_size=3) | json_values,
        "namespace": st.fixed_dictionaries({"project": texts, "location": texts}) | json_values,
        "schedule": texts,
        "time_zone": texts,
        "missing_schedule_time": st.sampled_from(["reject", "snap", "sometimes"]),
        "forced_runs": st.sampled_from(["separate", "dedupe", "reject", 1]),
        "max_concurrent_dispatches": numbers,
        "overlap": st.sampled_from(["allow", "skip", "wait", None]),
        "max_lateness_seconds": numbers,
        "job": texts,
        "catch_up": st.sampled_from(["none", "latest", "all", "every"]),
        "catch_up_window_seconds": numbers,
        "body": json_values,
        "colour": scalars,
    },
)
NAMESPACE = {"project": "my-project", "location": "us-central1"}
good_routes = st.fixed_dictionaries(
    {
        "target": st.sampled_from(
            [
                {"type": "log"},
                {"type": "http", "url": "https://example.com/hook"},
                {"type": "cloud_run_job", "job": "projects/my-project/locations/us-central1/jobs/nightly"},
                {"type": "workflows", "workflow": "projects/my-project/locations/us-central1/workflows/etl"},
            ]
        )
    },
    optional={
        "namespace": st.just(NAMESPACE),
        "schedule": st.sampled_from(["0 * * * *", "*/5 * * * *", "every 5 minutes", "0 0 29 2 *"]),
        "time_zone": st.sampled_from(["UTC", "America/New_York", "Asia/Kolkata"]),
        "forced_runs": st.sampled_from(["separate", "dedupe", "reject"]),
        "max_concurrent_dispatches": st.integers(1, 10_000),
        "max_lateness_seconds": st.integers(1, 10 * 365 * 86400),
        "body": st.dictionaries(st.text(max_size=8), json_values, max_size=3),
        "allowed_callers": st.just(["scheduler@my-project.iam.gserviceaccount.com"]),
    },
)
EXAMPLE_TARGETS = [
    route["target"]
    for path in sorted((REPO / "examples").glob("*.yaml"))
    for route in (yaml.safe_load(path.read_text(encoding="utf-8")).get("routes") or {}).values()
    if route["target"]["type"] not in ("log", "http")
]
"""The Google targets of the examples: correct routes of every Google target type."""
ENDPOINTS = [
    "http://example.com",
    "https://user:pw@batch.googleapis.com",
    "https://batch.googleapis.com/x?y#z",
    "https://batch.googleapis.com:99999",
    "file:///etc/passwd",
    "http://127.0.0.1:8085",
    "https://us-central1-aiplatform.googleapis.com",
]


def _places(value: Any) -> Iterator[tuple[Any, Any]]:
    """Every (container, key or index) in a target, but its `type`."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if key != "type":
            yield value, key
            yield from _places(item)


@st.composite
def mutated_targets(draw: st.DrawFn) -> dict[str, Any]:
    """An example's Google target with one to three slips in it."""
    target = copy.deepcopy(draw(st.sampled_from(EXAMPLE_TARGETS)))
    for _ in range(draw(st.integers(1, 3))):
        places = list(_places(target))
        if not places:  # everything but the type was removed
            break
        container, key = draw(st.sampled_from(places))
        how = draw(st.sampled_from(["null", "value", "number key", "newline", "unknown", "remove", "endpoint"]))
        if how == "null":
            container[key] = None
        elif how == "value":
            container[key] = draw(json_values)
        elif how == "number key" and isinstance(container[key], dict):
            container[key][draw(st.integers(-5, 3000))] = draw(scalars)
        elif how == "newline" and isinstance(container[key], str):
            container[key] += "\n"
        elif how == "unknown" and isinstance(container[key], dict):
            container[key]["destinaton"] = draw(scalars)
        elif how == "remove" and isinstance(container, dict):
            del container[key]
        elif how == "endpoint" and target["type"] == "google_api":
            target["endpoint"] = draw(st.sampled_from(ENDPOINTS))
    return target


documents = st.one_of(
    st.fixed_dictionaries(
        {"routes": st.fixed_dictionaries({"google": st.fixed_dictionaries({"target": mutated_targets()})})}
    ),
    st.fixed_dictionaries(
        {
            "routes": st.dictionaries(
                st.from_regex(r"[a-z][a-z0-9_-]{0,10}", fullmatch=True), good_routes, min_size=1, max_size=3
            )
        }
    ),
    st.fixed_dictionaries({"routes": st.dictionaries(texts, routes | json_values, max_size=3)}),
    json_values,
)


def written(document: Any, form: str) -> str:
    if form == "json":
        return json.dumps(document)  # NaN and Infinity as JavaScript writes them
    return yaml.safe_dump(document, allow_unicode=True, default_flow_style=form == "flow yaml")


@st.composite
def broken(draw: st.DrawFn, text: str) -> bytes:
    """`text`, damaged in one of the ways files are."""
    lines = text.splitlines(keepends=True) or [""]
    how = draw(st.sampled_from(["as is"] * 4 + ["repeat a line", "cut", "nest", "alias", "bytes", "insert", "date"]))
    if how == "repeat a line":
        index = draw(st.integers(0, len(lines) - 1))
        lines.insert(index, lines[index])
    elif how == "cut":
        return "".join(lines).encode()[: draw(st.integers(0, len(text)))]
    elif how == "nest":
        depth = draw(st.integers(10, 5000))
        return ("routes: " + "[" * depth + "]" * depth).encode()
    elif how == "alias":
        return b"x: &a [*a, *a]\nroutes: {r: {target: {type: log}, body: {k: *a}}}\n"
    elif how == "bytes":
        return draw(st.binary(max_size=40)) + "".join(lines).encode()
    elif how == "date":  # an unquoted date or timestamp, possible or not (2026-02-30, hour 25)
        year, month, day = draw(st.integers(0, 9999)), draw(st.integers(0, 19)), draw(st.integers(0, 39))
        hour, minute, second = draw(st.integers(0, 29)), draw(st.integers(0, 69)), draw(st.integers(0, 69))
        time = f"T{hour:02d}:{minute:02d}:{second:02d}Z"
        day = f"{year:04d}-{month:02d}-{day:02d}"
        text = text.replace(": ", f": {day}{draw(st.sampled_from(['', time]))} #", 1)
        return text.encode("utf-8", "surrogatepass")
    elif how == "insert":
        index = draw(st.integers(0, len(text)))
        return (text[:index] + draw(st.text(max_size=5)) + text[index:]).encode("utf-8", "surrogatepass")
    return "".join(lines).encode("utf-8", "surrogatepass")


def test_the_routes_loader_starts_or_refuses_in_one_line(tmp_path: Path) -> None:
    print(f"routes fuzz: RUNONCE_FUZZ_ROUTES_SEED={SEED} examples={EXAMPLES}")
    path = tmp_path / "routes.yaml"
    outcomes = {"loaded": 0, "refused": 0}

    @seed(SEED)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    @given(document=documents, form=st.sampled_from(["json", "yaml", "flow yaml"]), data=st.data())
    def check(document: Any, form: str, data: st.DataObject) -> None:
        content = data.draw(broken(written(document, form)))
        path.write_bytes(content)
        [*read] = (
            finding
            for finding in lint_files([str(path)], LintConfig())
            if finding.code in ("unreadable", "invalid_routes")
        )
        try:
            loaded = checked_routes(Settings(routes_file=str(path)))
        except ConfigError as exc:
            message = str(exc)
            # lint agrees; a file cut before its `routes:` key it cannot name as a routes file
            unnamed = message.removeprefix(f"routes file {path}: ")
            assert [finding.message for finding in read] in ([], [message], [unnamed]), (read, message)
            assert "\n" not in message and message.startswith(f"routes file {path}: "), message
            for leak in ("Traceback", "^(?:", "Input tag", "[type=", "errors.pydantic.dev", "unable to parse"):
                assert leak not in message, message
            outcomes["refused"] += 1
            return
        assert read == []  # lint refuses nothing start-up takes
        for route in loaded.values():  # what start-up evaluates
            assert route.guard is not None and route.policy is not None
        route_warnings(loaded)
        outcomes["loaded"] += 1

    check()
    print(f"routes fuzz: {outcomes}")
