#!/usr/bin/env python3
"""Exit 0 when the JSON resource on stdin (from `gcloud ... describe --format=json`) already has
every field of the JSON in argv[1], else 1 and print the differing fields. Fields the API adds are
ignored; an absent 0, "" or false counts as equal (the API omits proto3 defaults), so an unchanged
resource is never rewritten."""

from __future__ import annotations

import json
import sys


def differences(wanted: object, current: object, path: str = "") -> list[str]:
    if isinstance(wanted, dict):
        current = current if isinstance(current, dict) else {}
        return [d for key, value in wanted.items() for d in differences(value, current.get(key), f"{path}.{key}")]
    if isinstance(wanted, list) and isinstance(current, list) and len(wanted) == len(current):
        return [
            d for i, (w, c) in enumerate(zip(wanted, current, strict=False)) for d in differences(w, c, f"{path}[{i}]")
        ]
    if wanted == current or (current is None and wanted in (0, "", False, [], {})):
        return []
    return [f"{path.lstrip('.')}: {current!r} -> {wanted!r}"]


def main() -> None:
    differing = differences(json.loads(sys.argv[1]), json.load(sys.stdin))
    for line in differing:
        print(line, file=sys.stderr)
    sys.exit(1 if differing else 0)


if __name__ == "__main__":
    main()
