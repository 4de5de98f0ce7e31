"""Helpers over python-hcl2's tree: labels come quoted, blocks are lists of dicts marked `__is_block__`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

META_ARGUMENTS = {"count", "for_each", "provider", "depends_on", "lifecycle", "provisioner", "connection"}


def unquote(label: str) -> str:
    return label[1:-1] if len(label) >= 2 and label[0] == label[-1] == '"' else label


def string(value: Any) -> str:
    """A literal string attribute as written: `"POST"` -> POST; expressions stay `${...}`."""
    return unquote(value) if isinstance(value, str) else value


def blocks(tree: dict, kind: str) -> Iterator[tuple[str, str, dict]]:
    """(type, name, body) of every `resource` / `data` block; (name, "", body) for `module` etc."""
    for entry in tree.get(kind, []):
        for first, rest in entry.items():
            if kind in ("resource", "data"):
                for name, body in rest.items():
                    yield unquote(first), unquote(name), body
            else:
                yield unquote(first), "", rest


def items(body: dict) -> Iterator[tuple[str, Any]]:
    """Arguments and nested blocks of a body, without the parser's markers."""
    for key, value in body.items():
        if not key.startswith("__"):
            yield key, value


def is_block(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) and v.get("__is_block__") for v in value)
