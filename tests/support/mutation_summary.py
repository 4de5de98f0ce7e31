"""The figures of a `mutmut run` (make mutate): per module, mutants killed and survived, with the
survivors split into message-only and behaviour-changing.

A survivor is *message-only* when it changes nothing but text a person reads: the message of an
exception or refusal, a log call, or a variable that only feeds one (`message`, `note`, ...).
It is found by rewriting every such place to one placeholder in both the original function and the
mutant: if the two are then the same, the mutant could only change a message. Everything else counts
as behaviour; those are the survivors to kill with a test (or mark `# pragma: no mutate` with a reason).

    .venv/bin/python -m tests.support.mutation_summary [--list]   # from the repository root, after mutmut run
"""

from __future__ import annotations

import ast
import json
import sys
import tomllib
from collections import Counter
from fnmatch import fnmatch
from pathlib import Path

EXIT_STATUS = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    None: "not checked",
    34: "skipped",
    36: "timeout",
    -24: "timeout",
    24: "timeout",
    152: "timeout",
    255: "timeout",
    37: "caught by type check",
}
"""mutmut 3's exit codes (mutmut.stats.status_by_exit_code); anything else is "suspicious"."""

MESSAGE_ARG = {
    # callable name -> index of the positional argument that is the human-readable message
    "InvalidDelivery": 1,
    "ForcedRunRefused": 1,
    "RangeRefused": 1,  # missed/audit.py: InvalidDelivery's (field, reason)
    "NotDue": 1,  # missed/backfill.py: the same
    "_rejected": 0,
    "ConfigError": 0,
    "config_error": 0,  # a route's refusal (runonce/targets/presets.py)
    "ValueError": 0,
    "TargetOutcomeUnknown": 0,
    "TargetFailed": 0,
    "TargetThrottled": 0,
    "StoreUnavailable": 0,
    "CertsUnavailable": 0,
    "RuntimeError": 0,
    "__init__": 0,  # super().__init__(message) of our exceptions
    "Invalid": 0,
    "PayloadTooLarge": 0,
    "Unauthenticated": 0,
    "Forbidden": 0,
    "NotFound": 0,
    "InProgress": 0,
    "PayloadMismatch": 0,
    "Throttled": 0,
    "Failed": 0,
    "Unavailable": 0,
    "OutcomeUnknown": 0,
    "reconciling": 0,  # targets/google.py: the action named in the outcome's message
    "reading": 0,
    "_error": 1,  # targets/google_api.py: the message of a route's mistake
}
MESSAGE_KEYWORDS = {"message", "reason"}
LOG_OBJECTS = {"logger", "logging"}
MESSAGE_VARIABLES = {
    "message",
    "note",
    "store_note",
    "claim_note",
    "hint",
    "display",
    "step",
    "limit",
    "holder",
    "reason",
    "fields",
    "action",  # targets: the call named in an outcome's message
}
"""Local variables that only ever feed a message (checked by reading each module's uses)."""

PLACEHOLDER = ast.Constant("<message>")


class _Messages(ast.NodeTransformer):
    """Replace every message-position subtree by the placeholder."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in LOG_OBJECTS:
            return PLACEHOLDER  # a log call is text only
        self.generic_visit(node)
        index = MESSAGE_ARG.get(name or "")
        if index is not None and index < len(node.args):
            node.args[index] = PLACEHOLDER
        for keyword in node.keywords:
            if keyword.arg in MESSAGE_KEYWORDS:
                keyword.value = PLACEHOLDER
        return node

    def visit_If(self, node: ast.If) -> ast.AST:
        """A branch that only logs (a warning when some setting is on) is text too, test and all."""
        if not node.orelse and all(_is_log_call(statement) for statement in node.body):
            return ast.Expr(PLACEHOLDER)
        return self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        if all(isinstance(t, ast.Name) and t.id in MESSAGE_VARIABLES for t in node.targets):
            node.value = PLACEHOLDER
            return node
        return self.generic_visit(node)


def _is_log_call(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Call)
        and isinstance(statement.value.func, ast.Attribute)
        and isinstance(statement.value.func.value, ast.Name)
        and statement.value.func.value.id in LOG_OBJECTS
    )


def _normalised(function: ast.FunctionDef) -> str:
    copy = ast.parse(ast.unparse(function)).body[0]
    assert isinstance(copy, ast.FunctionDef | ast.AsyncFunctionDef)
    copy.name = "f"
    copy.body = [s for s in copy.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return ast.dump(_Messages().visit(copy))


def _functions(path: Path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text())
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def classify(mutants_file: Path, names: list[str]) -> dict[str, str]:
    """mutant key -> 'message' or 'behaviour'."""
    functions = _functions(mutants_file)
    kinds = {}
    for key in names:
        local = key.rsplit(".", 1)[-1]  # x_parse__mutmut_3 / xǁClassǁmethod__mutmut_3
        original = functions.get(local.rsplit("__mutmut_", 1)[0] + "__mutmut_orig")
        mutant = functions.get(local)
        if original is None or mutant is None:
            kinds[key] = "behaviour"
            continue
        kinds[key] = "message" if _normalised(original) == _normalised(mutant) else "behaviour"
    return kinds


def main(argv: list[str]) -> int:
    config = tomllib.loads(Path("pyproject.toml").read_text())["tool"]["mutmut"]
    patterns = config.get("only_mutate", [])
    rows, survivors = [], []
    totals: Counter[str] = Counter()
    for meta in sorted(Path("mutants").rglob("*.py.meta")):
        source = meta.with_suffix("")  # mutants/runonce/x.py
        relative = str(source.relative_to("mutants"))
        if patterns and not any(fnmatch(relative, p) for p in patterns):
            continue
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        status = {key: EXIT_STATUS.get(code, "suspicious") for key, code in codes.items()}
        survived = sorted(k for k, s in status.items() if s == "survived")
        kinds = classify(source, sorted(codes))
        counts = Counter(status.values())
        killed = [k for k, s in status.items() if s in ("killed", "timeout")]
        row = {
            "module": relative,
            "mutants": len(codes),
            "killed": len(killed),
            "killed msg": sum(1 for k in killed if kinds[k] == "message"),
            "survived": len(survived),
            "survived msg": sum(1 for k in survived if kinds[k] == "message"),
            "no tests": counts["no tests"],
            "not checked": counts["not checked"],
        }
        rows.append(row)
        totals.update({k: v for k, v in row.items() if k != "module"})
        survivors += [(key, kinds[key]) for key in survived]

    header = ["module", "mutants", "killed", "killed msg", "survived", "survived msg", "no tests", "not checked"]
    print("  ".join(f"{h:>12}" if i else f"{h:<26}" for i, h in enumerate(header)))
    for row in [*rows, {"module": "total", **totals}]:
        print("  ".join(f"{row[h]:>12}" if i else f"{row[h]:<26}" for i, h in enumerate(header)))
    killed = totals["killed"] - totals["killed msg"]
    survived = totals["survived"] - totals["survived msg"]
    if killed + survived:
        print(
            f"\nbehaviour-changing mutants killed by in-process tests: {killed}/{killed + survived} = "
            f"{100 * killed / (killed + survived):.1f}%; message-only mutants apart: {totals['killed msg']} killed, "
            f"{totals['survived msg']} survived; 'no tests': code no in-process test reaches"
        )
    if "--list" in argv:
        for key, kind in survivors:
            if kind == "behaviour":
                print(f"  behaviour  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
