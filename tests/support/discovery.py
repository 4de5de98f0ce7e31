"""Hold a fake's requests to Google's published contract: the discovery documents that ship in
google-api-python-client (`googleapiclient/discovery_cache/documents/*.json`). The one checker every
fake uses: the target fakes (tests/fakes), the deploy scripts' fake (tests/deploy/fake_gcp.py) and
the guard's Firestore connector calls (tests/guard).

`Discovery("run.v2").match(method, path, query, body)` finds the API method (HTTP method + path
template), checks every path parameter against its pattern, every query parameter against its
declaration (or the API's standard parameters, like `alt`), and the body against the request schema
(unknown fields, wrong types, output-only fields; a JSON null is proto3's "absent"). Any mismatch
raises `Violation`, which the fakes answer with 400 and record so the test fails.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any


class Violation(Exception):
    """A request that Google's API description does not allow."""


def _documents_dir() -> Path:
    try:
        import googleapiclient
    except ImportError as exc:  # pragma: no cover - a setup problem, not a test outcome
        raise RuntimeError(
            "The fakes check requests against Google's discovery documents shipped in "
            "google-api-python-client: pip install -e '.[test]'"
        ) from exc
    return Path(googleapiclient.__file__).parent / "discovery_cache" / "documents"


@cache
def load_document(name: str) -> dict[str, Any]:
    return json.loads((_documents_dir() / f"{name}.json").read_text())


@dataclass(frozen=True)
class Method:
    id: str
    http_method: str
    flat: re.Pattern[str]
    path: re.Pattern[str]
    spec: dict[str, Any]


_DURATION = re.compile(r"^-?[0-9]+(\.[0-9]{1,9})?s$")
_DATETIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d{1,9})?(?:Z|[+-](\d{2}):(\d{2}))$")
_BASE64 = re.compile(r"^[A-Za-z0-9+/_-]*={0,2}$")


def output_only(field: dict[str, Any]) -> bool:
    """Discovery documents mark output-only fields with `readOnly`, or only in the description."""
    return bool(field.get("readOnly")) or field.get("description", "").lstrip().startswith("Output only")


def rfc3339(value: str) -> bool:
    """`google-datetime`: RFC 3339 with a real date and time (no month 13, no 25:00), and an offset,
    as protobuf's `ParseTime` reads a Timestamp: no leap second (`:60`), which RFC 3339 allows but a
    Timestamp smears away."""
    match = _DATETIME.match(value)
    if match is None:
        return False
    year, month, day, hour, minute, second, off_hours, off_minutes = (int(g) if g else 0 for g in match.groups())
    try:
        datetime(year, month, day, hour, minute, second)
    except ValueError:
        return False
    return off_hours <= 23 and off_minutes <= 59


def decodable_base64(value: str) -> bool:
    """`byte`: base64, standard or URL-safe alphabet (Google accepts both), padding optional."""
    if not _BASE64.match(value) or len(value.rstrip("=")) % 4 == 1:
        return False
    try:
        base64.urlsafe_b64decode(value.replace("+", "-").replace("/", "_") + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        return False
    return True


def _walk_methods(resource: dict[str, Any]) -> list[dict[str, Any]]:
    methods = list(resource.get("methods", {}).values())
    for child in resource.get("resources", {}).values():
        methods += _walk_methods(child)
    return methods


def _template_regex(template: str, plus: bool) -> re.Pattern[str]:
    """`v2/{+name}:run` -> a regex with one named group per parameter."""
    out, pos = "", 0
    for match in re.finditer(r"\{(\+?)([A-Za-z0-9_]+)\}", template):
        out += re.escape(template[pos : match.start()])
        reserved = match.group(1) == "+"
        out += f"(?P<{match.group(2)}>{'.+?' if reserved else '[^/]+'})"
        pos = match.end()
    out += re.escape(template[pos:])
    return re.compile(f"^{out}$")


class Discovery:
    def __init__(self, name: str):
        self.name = name
        self.doc = load_document(name)
        self.schemas: dict[str, Any] = self.doc["schemas"]
        self.standard_query = set(self.doc.get("parameters", {}))  # alt, fields, prettyPrint, ...
        self.methods: list[Method] = []
        for spec in _walk_methods(self.doc):
            self.methods.append(
                Method(
                    id=spec["id"],
                    http_method=spec["httpMethod"],
                    flat=_template_regex(
                        self.doc.get("servicePath", "") + spec.get("flatPath", spec["path"]), plus=False
                    ),
                    path=_template_regex(self.doc.get("servicePath", "") + spec["path"], plus=True),
                    spec=spec,
                )
            )
        # `.../jobs/{id}` would also match `.../jobs/x:run`: methods with a custom verb are tried first.
        self.methods.sort(key=lambda m: ":" not in m.flat.pattern)

    def method(self, method_id: str) -> Method:
        return next(m for m in self.methods if m.id == method_id)

    def match(self, http_method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[str, dict[str, str]]:
        """The method id and path parameters of a request, or `Violation`."""
        path = path.lstrip("/")
        candidates = [m for m in self.methods if m.flat.match(path)]
        if not candidates:
            raise Violation(f"{http_method} /{path}: no such method in {self.name} (no method has this path)")
        chosen = [m for m in candidates if m.http_method == http_method]
        if not chosen:
            allowed = sorted({m.http_method for m in candidates})
            raise Violation(
                f"{http_method} /{path}: no such method in {self.name} (wrong HTTP method: the API allows {allowed})"
            )
        method = chosen[0]
        params = method.path.match(path).groupdict()  # type: ignore[union-attr]
        declared = method.spec.get("parameters", {})
        for name, value in params.items():
            pattern = declared.get(name, {}).get("pattern")
            if pattern and not re.match(pattern, value):
                raise Violation(f"{method.id}: path parameter {name}={value!r} does not match {pattern}")
        for name, values in query.items():
            spec = declared.get(name)
            if spec is None and name in self.standard_query:
                continue
            if spec is None or spec.get("location") != "query":
                raise Violation(f"{method.id}: query parameter {name!r} is not one the method lists")
            if len(values) > 1 and not spec.get("repeated"):
                raise Violation(f"{method.id}: query parameter {name!r} given {len(values)} times; it is not repeated")
            for value in values:
                self._check_query_value(method.id, name, value, spec)
        request_ref = method.spec.get("request", {}).get("$ref")
        if request_ref is None:
            if body not in (None, b"", {}):
                raise Violation(f"{method.id}: takes no request body")
        else:
            if not isinstance(body, dict):
                raise Violation(f"{method.id}: the body must be a JSON object ({request_ref})")
            self.check(body, {"$ref": request_ref}, request_ref, request=True)
        return method.id, params

    @staticmethod
    def _check_query_value(method_id: str, name: str, value: str, spec: dict[str, Any]) -> None:
        kind = spec.get("type")
        if kind == "integer" and not re.fullmatch(r"-?[0-9]+", value):
            raise Violation(f"{method_id}: query {name}={value!r} is not an integer")
        # Google's front end reads a query boolean in any case: gcloud's own dashboards create sends
        # validateOnly=False.
        if kind == "boolean" and value.lower() not in ("true", "false"):
            raise Violation(f"{method_id}: query {name}={value!r} is not a boolean")
        if "enum" in spec and value not in spec["enum"]:
            raise Violation(f"{method_id}: query {name}={value!r} is not one of {spec['enum']}")

    def check(self, value: Any, schema: dict[str, Any], where: str, request: bool = False) -> None:
        """Check `value` against a schema; `request` also rejects output-only fields."""
        if "$ref" in schema:
            schema = self.schemas[schema["$ref"]]
        kind = schema.get("type")
        if kind == "object" or "properties" in schema:
            if not isinstance(value, dict):
                raise Violation(f"{where}: expected an object, got {type(value).__name__}")
            properties = schema.get("properties")
            extra = schema.get("additionalProperties")
            for key, item in value.items():
                if item is None:  # proto3 JSON: null is the field's default, as if absent
                    continue
                if properties is not None and key in properties:
                    field = properties[key]
                    if request and output_only(field):
                        raise Violation(f"{where}.{key}: output-only field in a request")
                    self.check(item, field, f"{where}.{key}", request)
                elif extra is not None:
                    if key == "@type" and extra.get("type") == "any":
                        continue
                    self.check(item, extra, f"{where}.{key}", request)
                else:
                    raise Violation(f"{where}: unknown field {key!r}")
        elif kind == "array":
            if not isinstance(value, list):
                raise Violation(f"{where}: expected an array, got {type(value).__name__}")
            for index, item in enumerate(value):
                self.check(item, schema.get("items", {}), f"{where}[{index}]", request)
        elif kind == "string":
            fmt = schema.get("format")
            if fmt in ("int64", "uint64"):
                if not (isinstance(value, int) and not isinstance(value, bool)) and not (
                    isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value)
                ):
                    raise Violation(f"{where}: expected an {fmt} (string of digits), got {value!r}")
                return
            if not isinstance(value, str):
                raise Violation(f"{where}: expected a string, got {type(value).__name__} {value!r}")
            if fmt == "google-duration" and not _DURATION.match(value):
                raise Violation(f"{where}: {value!r} is not a duration like '3.5s'")
            if fmt == "google-datetime" and not rfc3339(value):
                raise Violation(f"{where}: {value!r} is not an RFC 3339 timestamp")
            if fmt == "byte" and not decodable_base64(value):
                raise Violation(f"{where}: {value!r} is not base64")
            if "enum" in schema and value not in schema["enum"]:
                raise Violation(f"{where}: {value!r} is not one of {schema['enum']}")
        elif kind == "integer":  # proto3 JSON also accepts an integer as a string of digits
            if isinstance(value, bool) or not (
                isinstance(value, int) or (isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value))
            ):
                raise Violation(f"{where}: expected an integer, got {value!r}")
        elif kind == "number":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise Violation(f"{where}: expected a number, got {value!r}")
        elif kind == "boolean":
            if not isinstance(value, bool):
                raise Violation(f"{where}: expected a boolean, got {value!r}")
        elif kind in ("any", None):
            return
        else:  # pragma: no cover - a discovery type this checker does not know
            raise Violation(f"{where}: schema type {kind!r} not understood by the fake")
