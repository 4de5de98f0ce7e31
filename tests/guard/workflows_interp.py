"""A small interpreter for the subset of Workflows syntax the guard's YAML uses, so the tests run
the YAML itself (not a Python transliteration) against the Firestore emulator's REST endpoint.

Supported: subworkflows with params (and defaults), steps of kind assign (dotted targets), call
(subworkflows, and connectors/http through callbacks), switch (condition + steps/assign/return/raise),
try/except (as), raise, return, nested steps. Expressions `${...}` are Workflows' Python-like syntax,
evaluated with Python over maps that allow `a.b` access, and the standard-library functions the YAML
uses. Anything else raises `Unsupported`, so the YAML cannot quietly outgrow the interpreter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

EXPR = re.compile(r"^\$\{(.*)\}$", re.S)
STEP_KINDS = {"assign", "call", "args", "result", "switch", "try", "except", "raise", "return", "steps", "next"}


class Unsupported(Exception):
    """The YAML uses something this interpreter does not implement."""


class WorkflowError(Exception):
    """A Workflows error (`raise`, or a failed call): `value` is what `except: as:` binds."""

    def __init__(self, value: Any):
        super().__init__(value)
        self.value = value


class _Return(Exception):
    def __init__(self, value: Any):
        self.value = value


class Map(dict):
    """A Workflows map: `m.key` reads a key (KeyError if missing, as in Workflows)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise WorkflowError({"message": f"KeyError: key not found: {name}", "tags": ["KeyError"]}) from None


def to_map(value: Any) -> Any:
    if isinstance(value, dict):
        return Map({k: to_map(v) for k, v in value.items()})
    if isinstance(value, list):
        return [to_map(v) for v in value]
    return value


def _time_format(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _time_parse(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _map_get(m: Any, keys: Any) -> Any:
    for key in keys if isinstance(keys, list) else [keys]:
        if not isinstance(m, dict) or key not in m:
            return None
        m = m[key]
    return m


class Interpreter:
    def __init__(
        self,
        source: dict[str, Any],
        calls: Callable[[str, dict[str, Any]], Any],
        env: dict[str, str],
        now: Callable[[], float],
    ):
        self.source, self.calls, self.env = source, calls, env
        self.functions = {
            "true": True,
            "false": False,
            "null": None,
            "int": int,
            "string": str,
            "default": lambda v, d: d if v is None else v,
            "_if": lambda c, a, b: a if c else b,
            "sys": SimpleNamespace(now=now, get_env=lambda name: env.get(name)),
            "time": SimpleNamespace(format=_time_format, parse=_time_parse),
            "json": SimpleNamespace(encode_to_string=lambda v: json.dumps(v, separators=(",", ":"))),
            "map": SimpleNamespace(get=_map_get),
        }

    def run(self, name: str, args: dict[str, Any]) -> Any:
        spec = self.source[name]
        scope: dict[str, Any] = {}
        for param in spec.get("params", []):
            if isinstance(param, dict):
                ((key, default),) = param.items()
                scope[key] = to_map(args.get(key, default))
            else:
                if param not in args and name != "main":
                    raise WorkflowError({"message": f"{name}: missing argument {param}", "tags": ["TypeError"]})
                scope[param] = to_map(args.get(param))
        unknown = set(args) - {p if isinstance(p, str) else next(iter(p)) for p in spec.get("params", [])}
        if unknown:
            raise WorkflowError({"message": f"{name}: unexpected arguments {sorted(unknown)}", "tags": ["TypeError"]})
        try:
            self._steps(spec["steps"], scope)
        except _Return as returned:
            return returned.value
        return None

    # -- expressions ----------------------------------------------------------------------------

    def value(self, raw: Any, scope: dict[str, Any]) -> Any:
        if isinstance(raw, str):
            match = EXPR.match(raw)
            if match is None:
                return raw
            expression = re.sub(r"\bif\(", "_if(", match.group(1))
            try:
                return to_map(eval(expression, {"__builtins__": {}}, {**self.functions, **scope}))
            except WorkflowError:
                raise
            except Exception as exc:
                raise WorkflowError({"message": f"{raw}: {type(exc).__name__}: {exc}", "tags": ["ValueError"]}) from exc
        if isinstance(raw, dict):
            return Map({k: self.value(v, scope) for k, v in raw.items()})
        if isinstance(raw, list):
            return [self.value(v, scope) for v in raw]
        return raw

    # -- steps ----------------------------------------------------------------------------------

    def _steps(self, steps: list[dict[str, Any]], scope: dict[str, Any]) -> None:
        for step in steps:
            ((_name, body),) = step.items()
            self._body(body, scope)

    def _body(self, body: dict[str, Any], scope: dict[str, Any]) -> None:
        kinds = set(body) - {"args", "result", "except", "as"}
        if not kinds <= STEP_KINDS or "next" in kinds:
            raise Unsupported(f"step kinds {sorted(kinds)}")
        if "try" in body:
            self._try(body, scope)
        elif "assign" in body:
            for item in body["assign"]:
                ((target, raw),) = item.items()
                self._assign(scope, target, self.value(raw, scope))
        elif "call" in body:
            result = self._call(body["call"], self.value(body.get("args", {}), scope))
            if "result" in body:
                scope[body["result"]] = to_map(result)
        elif "switch" in body:
            for condition in body["switch"]:
                if self.value(condition["condition"], scope):
                    self._body({k: v for k, v in condition.items() if k != "condition"}, scope)
                    break
        elif "steps" in body:
            self._steps(body["steps"], scope)
        elif "raise" in body:
            raise WorkflowError(self.value(body["raise"], scope))
        elif "return" in body:
            raise _Return(self.value(body["return"], scope))

    def _try(self, body: dict[str, Any], scope: dict[str, Any]) -> None:
        try:
            attempt = body["try"]
            self._body(attempt, scope)
        except WorkflowError as error:
            handler = body.get("except")
            if handler is None:
                raise
            scope[handler["as"]] = to_map(error.value)
            self._steps(handler["steps"], scope)

    def _call(self, name: str, args: dict[str, Any]) -> Any:
        if name in self.source:
            return self.run(name, args)
        return self.calls(name, args)

    @staticmethod
    def _assign(scope: dict[str, Any], target: str, value: Any) -> None:
        *path, last = target.split(".")
        holder: Any = scope
        for key in path:
            holder = holder[key]
        holder[last] = value
