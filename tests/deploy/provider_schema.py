"""The Google provider's configuration schema, read from the npm package @cdktf/provider-google.

The package is generated from the provider's own schema (version 6.50 here): for every resource and
data source, `lib/<name>/index.js` has a `synthesizeHclAttributes()` listing each HCL argument with
`isBlock: true|false`, and one `<struct>ToHclTerraform(struct)` function per nested block. This reads
those generated tables, so a misspelt argument or block name fails a test instead of a real
`terraform plan`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

_ENTRY = re.compile(r"\n\s+(\w+): \{\s*\n\s+value: ([^\n]*),\s*\n\s+isBlock: (true|false),")
_BLOCK_FUNCTION = re.compile(r"(?<![\w.])([a-z][A-Za-z0-9]*)ToHclTerraform\b")


@dataclass
class Block:
    attributes: set[str] = field(default_factory=set)
    blocks: dict[str, Block] = field(default_factory=dict)


def _attrs_object(source: str, start: int) -> str:
    """The text of the `{...}` object literal that opens at or after `start`."""
    open_at = source.index("{", start)
    depth = 0
    for index in range(open_at, len(source)):
        if source[index] == "{":
            depth += 1
        elif source[index] == "}":
            depth -= 1
            if depth == 0:
                return source[open_at : index + 1]
    raise ValueError("unbalanced braces")


def _parse_attrs(source: str, attrs: str, functions: dict[str, int]) -> Block:
    block = Block()
    for name, value, is_block in _ENTRY.findall(attrs):
        if is_block == "false":
            block.attributes.add(name)
            continue
        nested = [fn for fn in _BLOCK_FUNCTION.findall(value) if fn in functions]
        if len(nested) != 1:
            raise ValueError(f"cannot tell the nested block of {name!r} from {value!r}")
        start = functions[nested[0]]
        block.blocks[name] = _parse_attrs(
            source, _attrs_object(source, source.index("const attrs = ", start)), functions
        )
    return block


@cache
def schema(lib: Path, kind: str, type_name: str) -> Block:
    """Schema of `resource "type_name"` (kind "resource") or `data "type_name"` (kind "data")."""
    if not type_name.startswith("google_"):
        raise KeyError(f"{type_name} is not a Google provider type")
    directory = ("data-" + type_name if kind == "data" else type_name.removeprefix("google_")).replace("_", "-")
    path = lib / directory / "index.js"
    if not path.exists():
        raise KeyError(f"{kind} {type_name!r} does not exist in the Google provider ({path} not found)")
    source = path.read_text(encoding="utf-8")
    functions = {m.group(1): m.start() for m in re.finditer(r"\nfunction (\w+)ToHclTerraform\(struct\)", source)}
    top = source.index("synthesizeHclAttributes() {")
    return _parse_attrs(source, _attrs_object(source, source.index("const attrs = ", top)), functions)


@cache
def provider_schema(lib: Path) -> Block:
    """Arguments of the `provider "google"` block."""
    source = (lib / "provider" / "index.js").read_text(encoding="utf-8")
    functions = {m.group(1): m.start() for m in re.finditer(r"\nfunction (\w+)ToHclTerraform\(struct\)", source)}
    top = source.index("synthesizeHclAttributes() {")
    return _parse_attrs(source, _attrs_object(source, source.index("const attrs = ", top)), functions)
