"""Google's API descriptions (discovery documents) for `google_api` routes: where they come from,
what is kept of them, and the checks a route is held to at start-up.

Where they come from, in this order:

1. the documents runonce carries: `discovery/*.json.gz` next to this module, reduced (below) from
   the discovery cache of google-api-python-client at the version `discovery/SOURCE.json` names
   (`make discovery` regenerates them; a test fails when they no longer match that client);
2. any other API: the whole discovery cache of an installed google-api-python-client, which the
   optional extra `runonce[google-api]` brings (~100 MB, so the image does not carry it).

A document is reduced to what validation and calls need: root URL, service path, locational
endpoints, each method's HTTP method, path and parameters (location, type, pattern, enum), its
request and response schema names, and the schemas' types, formats, enums and output-only marks.
Descriptions are dropped; a field that a description calls "Output only" keeps `readOnly`.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from runonce.errors import RunonceError

VENDORED = Path(__file__).with_name("discovery")

_DURATION = re.compile(r"^-?[0-9]+(\.[0-9]{1,9})?s$")
_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$")
_DIGITS = re.compile(r"^-?[0-9]+$")
_PARAMETER_KEYS = ("location", "type", "format", "pattern", "enum", "repeated", "required")
_SCHEMA_KEYS = ("type", "format", "enum", "$ref")


class DocumentNotFound(RunonceError):
    """No description of the API named: the message says which ones there are."""


# --- reduction ------------------------------------------------------------------------------------


def _reduce_schema(schema: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {key: schema[key] for key in _SCHEMA_KEYS if key in schema}
    description = schema.get("description")
    output_only = isinstance(description, str) and description.lstrip().startswith("Output only")
    if schema.get("readOnly") or output_only:
        out["readOnly"] = True
    if "properties" in schema:
        out["properties"] = {name: _reduce_schema(field) for name, field in schema["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            out[key] = _reduce_schema(schema[key])
    return out


def _walk_methods(resource: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from resource.get("methods", {}).values()
    for child in resource.get("resources", {}).values():
        yield from _walk_methods(child)


def reduce_document(doc: dict[str, Any]) -> dict[str, Any]:
    """The part of a discovery document runonce uses (see the module's docstring)."""
    methods = {}
    for spec in _walk_methods(doc):
        parameters = {
            name: {key: param[key] for key in _PARAMETER_KEYS if key in param}
            for name, param in spec.get("parameters", {}).items()
        }
        methods[spec["id"]] = {
            "httpMethod": spec["httpMethod"],
            "path": spec["path"],
            "parameters": parameters,
            "request": spec.get("request", {}).get("$ref"),
            "response": spec.get("response", {}).get("$ref"),
        }
    locational: dict[str, str] = {}
    for endpoint in doc.get("endpoints", []):
        location, url = endpoint.get("location"), endpoint.get("endpointUrl")
        if location and isinstance(url, str) and url.startswith(f"https://{location}-"):
            locational[location] = url
    return {
        "name": doc["name"],
        "version": doc["version"],
        "rootUrl": doc["rootUrl"],
        "servicePath": doc.get("servicePath", ""),
        "locational": locational,
        "methods": methods,
        "schemas": {name: _reduce_schema(schema) for name, schema in doc.get("schemas", {}).items()},
    }


# --- loading --------------------------------------------------------------------------------------


def vendored_names() -> list[str]:
    """The APIs runonce carries (`batch.v1`, …)."""
    return sorted(path.name.removesuffix(".json.gz") for path in VENDORED.glob("*.json.gz"))


def _client_cache() -> Path | None:
    """google-api-python-client's discovery cache, when the `google-api` extra is installed."""
    try:
        import googleapiclient  # type: ignore[import-untyped]  # deferred: an optional extra, only for an API runonce does not carry
    except ImportError:
        return None
    return Path(googleapiclient.__file__).parent / "discovery_cache" / "documents"


@cache
def load(api: str) -> ApiDocument:
    """The description of `api` (`name.version`), or `DocumentNotFound` saying what there is."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*\.[a-z0-9_.]+", api):
        raise DocumentNotFound(f"{api!r} is not an API as name.version (e.g. batch.v1)")
    vendored = VENDORED / f"{api}.json.gz"
    if vendored.is_file():
        return ApiDocument(json.loads(gzip.decompress(vendored.read_bytes())))
    cache_dir = _client_cache()
    if cache_dir is not None and (cache_dir / f"{api}.json").is_file():
        return ApiDocument(reduce_document(json.loads((cache_dir / f"{api}.json").read_text(encoding="utf-8"))))
    where = (
        "nor in google-api-python-client's discovery cache"
        if cache_dir
        else "(install runonce[google-api] for any other)"
    )
    raise DocumentNotFound(
        f"no discovery document {api!r} among those runonce carries ({', '.join(vendored_names())}) {where}"
    )


# --- the document ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApiMethod:
    """One method of a document, by its full id (`batch.projects.locations.jobs.create`)."""

    id: str
    http_method: str
    path: str
    parameters: dict[str, dict[str, Any]]
    request: str | None
    response: str | None

    def path_parameters(self) -> list[str]:
        return [name for name, spec in self.parameters.items() if spec.get("location") == "path"]


class ApiDocument:
    def __init__(self, data: dict[str, Any]):
        self.name: str = data["name"]
        self.version: str = data["version"]
        self.root_url: str = data["rootUrl"]
        self.service_path: str = data["servicePath"]
        self.locational: dict[str, str] = data["locational"]
        self.schemas: dict[str, Any] = data["schemas"]
        self._methods: dict[str, Any] = data["methods"]

    @property
    def api(self) -> str:
        return f"{self.name}.{self.version}"

    def method(self, method_id: str) -> ApiMethod | None:
        """The method `method_id`, as the document names it with or without the API's name in front."""
        full = method_id if method_id.startswith(f"{self.name}.") else f"{self.name}.{method_id}"
        spec = self._methods.get(full)
        if spec is None:
            return None
        return ApiMethod(
            full, spec["httpMethod"], spec["path"], spec["parameters"], spec.get("request"), spec.get("response")
        )

    def similar_methods(self, method_id: str, limit: int = 6) -> list[str]:
        """Method ids (without the API's name) sharing the most trailing parts with `method_id`."""
        wanted = method_id.removeprefix(f"{self.name}.").split(".")
        short = [full.removeprefix(f"{self.name}.") for full in self._methods]

        def shared(candidate: str) -> int:
            parts = candidate.split(".")
            return sum(a == b for a, b in zip(reversed(parts), reversed(wanted), strict=False))

        ranked = sorted((c for c in short if shared(c) > 0), key=lambda c: (-shared(c), c))
        return ranked[:limit]

    def default_endpoint(self, location: str | None) -> str:
        """The locational host (`https://us-central1-aiplatform.googleapis.com`) for `location`
        when the document lists one, else the document's root URL; without the trailing `/`."""
        url = self.locational.get(location or "") or self.root_url
        return url.rstrip("/")

    def field(self, schema_name: str, dotted: str) -> dict[str, Any] | None:
        """The schema of the field `a.b` of `schema_name`, or None when there is no such field."""
        schema: dict[str, Any] = {"$ref": schema_name}
        for part in dotted.split("."):
            schema = self.resolve(schema)
            properties = schema.get("properties") or {}
            if part not in properties:
                return None
            schema = properties[part]
        return self.resolve(schema)

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            schema = self.schemas[schema["$ref"]]
        return schema

    def value_problem(self, value: Any, schema: dict[str, Any], where: str) -> str | None:
        """What is wrong with `value` as a request field of `schema`, naming where and what the
        document allows; None when it fits. Nulls are proto3's "absent" and fit anywhere."""
        kind_name = schema.get("$ref")
        schema = self.resolve(schema)
        kind = schema.get("type")
        if kind == "object" or "properties" in schema:
            return self._object_problem(value, schema, where, kind_name or "object")
        if kind == "array":
            if not isinstance(value, list):
                return f"{where}: expected an array, got {_shown(value)}"
            for index, item in enumerate(value):
                problem = self.value_problem(item, schema.get("items", {}), f"{where}[{index}]")
                if problem:
                    return problem
            return None
        return scalar_problem(value, schema, where)

    def _object_problem(self, value: Any, schema: dict[str, Any], where: str, kind_name: str) -> str | None:
        if not isinstance(value, dict):
            return f"{where}: expected an object ({kind_name}), got {_shown(value)}"
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if item is None:
                continue
            if properties is not None and key in properties:
                field = properties[key]
                if field.get("readOnly"):
                    return f"{where}.{key}: output only in {kind_name}; a request cannot set it"
                problem = self.value_problem(item, field, f"{where}.{key}")
            elif extra is not None:
                problem = None if key == "@type" else self.value_problem(item, extra, f"{where}.{key}")
            else:
                allowed = ", ".join(sorted(k for k, f in (properties or {}).items() if not f.get("readOnly")))
                return f"{where}: {kind_name} has no field {key!r} (it has: {allowed or 'none'})"
            if problem:
                return problem
        return None


def scalar_problem(value: Any, schema: dict[str, Any], where: str) -> str | None:
    """A string, integer, number or boolean field (or parameter), as proto3 JSON takes it."""
    kind, fmt = schema.get("type"), schema.get("format")
    if kind == "string" and fmt in ("int64", "uint64"):
        if _is_int(value) or (isinstance(value, str) and _DIGITS.match(value)):
            return None
        return f"{where}: expected an {fmt} (an integer, or a string of digits), got {_shown(value)}"
    if kind == "string":
        if not isinstance(value, str):
            return f"{where}: expected a string, got {_shown(value)}"
        if fmt == "google-duration" and not _DURATION.match(value):
            return f"{where}: {value!r} is not a duration like '3.5s'"
        if fmt == "google-datetime" and not _DATETIME.match(value):
            return f"{where}: {value!r} is not an RFC 3339 timestamp like 2026-01-31T12:00:00Z"
        if "enum" in schema and value not in schema["enum"]:
            return f"{where}: {value!r} is not one of {', '.join(schema['enum'])}"
        return None
    if kind == "integer":
        if _is_int(value) or (isinstance(value, str) and _DIGITS.match(value)):
            return None
        return f"{where}: expected an integer, got {_shown(value)}"
    if kind == "number":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return None
        return f"{where}: expected a number, got {_shown(value)}"
    if kind == "boolean":
        return None if isinstance(value, bool) else f"{where}: expected a boolean, got {_shown(value)}"
    return None  # "any" and untyped fields take anything


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"
