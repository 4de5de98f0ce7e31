"""Firestore REST calls as a Workflows connector or a Cloud Build step makes them, held to Google's
discovery document (firestore.v1.json) and sent to the emulator's REST endpoint."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.guard.workflows_interp import EXPR, WorkflowError
from tests.support.discovery import Discovery, Violation

CONNECTOR = "googleapis.firestore.v1."


class TemplateDiscovery(Discovery):
    """Checks YAML as written: a `${...}` expression stands for any value of the declared type."""

    def check(self, value: Any, schema: dict[str, Any], where: str, request: bool = False) -> None:
        if isinstance(value, str) and EXPR.match(value):
            return
        super().check(value, schema, where, request)


FIRESTORE = TemplateDiscovery("firestore.v1")


def method_for(connector: str) -> Any:
    """`googleapis.firestore.v1.projects.databases.documents.get` -> discovery method
    `firestore.projects.databases.documents.get` (Violation if the API has no such method)."""
    if not connector.startswith(CONNECTOR):
        raise Violation(f"{connector}: not a Firestore v1 connector call")
    method_id = "firestore." + connector.removeprefix(CONNECTOR)
    try:
        return FIRESTORE.method(method_id)
    except StopIteration:
        raise Violation(f"{connector}: firestore.v1 has no method {method_id}") from None


def _path_pattern(pattern: str) -> str:
    # Discovery renders the HTTP rule `documents/**` (zero or more segments) as `documents/.*$`,
    # which demands a segment; `parent: projects/P/databases/D/documents` (a top-level collection)
    # is what the API and Google's own connector samples use.
    return pattern.replace("/documents/.*$", "/documents(/.*)?$")


def check_args(connector: str, args: dict[str, Any]) -> Any:
    """The connector call's arguments against the method: names, required, path patterns, query
    types and the request body's schema. Returns the method."""
    method = method_for(connector)
    declared = method.spec.get("parameters", {})
    for name, value in args.items():
        if name == "body":
            if "request" not in method.spec:
                raise Violation(f"{connector}: takes no body")
            FIRESTORE.check(value, method.spec["request"], f"{connector}.body", request=True)
            continue
        spec = declared.get(name)
        if spec is None:
            raise Violation(f"{connector}: unknown argument {name!r} (declared: {sorted(declared)})")
        if isinstance(value, str) and EXPR.match(value):
            continue
        if spec.get("pattern") and not re.match(_path_pattern(spec["pattern"]), str(value)):
            raise Violation(f"{connector}: {name}={value!r} does not match {spec['pattern']}")
        values = value if isinstance(value, list) and spec.get("repeated") else [value]
        for item in values:
            FIRESTORE.check(item, {"type": spec.get("type", "string")}, f"{connector}.{name}")
    for name, spec in declared.items():
        if spec.get("required") and name not in args:
            raise Violation(f"{connector}: required argument {name!r} missing")
    if "request" in method.spec and "body" not in args:
        raise Violation(f"{connector}: required argument 'body' missing")
    return method


class FirestoreRest:
    """Performs connector calls against the emulator, as Workflows would against Firestore."""

    def __init__(self, emulator_host: str):
        self.base = f"http://{emulator_host}/"
        self.calls: list[tuple[str, int]] = []

    def __call__(self, connector: str, args: dict[str, Any]) -> Any:
        method = check_args(connector, args)
        declared = method.spec.get("parameters", {})
        path = re.sub(r"\{\+?([A-Za-z0-9_]+)\}", lambda m: str(args[m.group(1)]), method.spec["path"])
        query = {k: v for k, v in args.items() if declared.get(k, {}).get("location") == "query"}
        response = httpx.request(
            method.http_method,
            self.base + path,
            params=query,
            json=args.get("body"),
            headers={"Authorization": "Bearer owner"},
            timeout=10,
        )
        self.calls.append((method.id.rsplit(".", 1)[1], response.status_code))
        if response.status_code >= 400:
            raise WorkflowError(
                {"code": response.status_code, "message": response.text, "body": response.json(), "tags": ["HttpError"]}
            )
        return response.json()
