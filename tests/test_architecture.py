"""What docs/architecture.md asks of the code beyond the import contract that `lint-imports` holds
(pyproject.toml, [tool.importlinter]: the rooms' order, no cycles, the stores' registry, the guard
apart). Checked from the code with `ast` (nothing is imported or run): an import inside a function
says why it is deferred, tests share helpers through tests/support only, one exception root, short
functions, a target type in its own module. A failure names the module, the function or the import
at fault."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "runonce"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def python_files(*roots: Path) -> dict[str, Path]:
    return {module_name(path): path for root in roots for path in sorted(root.rglob("*.py"))}


APP_MODULES = python_files(APP)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(body: list[ast.stmt], module_level: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements in `body`. `module_level`: only those that run when the module is
    imported (not inside functions or classes, not under `if TYPE_CHECKING:`)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not (module_level and _is_type_checking(node.test)):
                yield from _imports(node.body, module_level)
            yield from _imports(node.orelse, module_level)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _imports(block, module_level)
        elif (
            isinstance(node, (ast.ClassDef, ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While))
            or not module_level
        ):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    yield from _imports([child], module_level)


def imported_modules(name: str, path: Path, *, module_level: bool) -> set[str]:
    """The dotted names `name` imports: `from . import x` gives `pkg.x` when x is a module, else `pkg`."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8")).body, module_level):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
            continue
        if node.level:
            base = name.split(".") if is_package else name.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        found.add(source)
        found.update(f"{source}.{alias.name}" for alias in node.names)
    found.discard(name)  # a package's `from . import submodule` names the package itself
    return found


# -- (a) an import inside a function says why ------------------------------------------------------

DEFERRED_BY_OTHERS = {  # function-level imports that are not a cold-start deferral, and when they go
    ("runonce.missed.backfill", "runonce.api.answers"): "removed when backfill stops importing the web layer",
}


def function_level_imports() -> Iterator[tuple[str, Path, ast.Import | ast.ImportFrom]]:
    for name, path in APP_MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for child in ast.walk(node):
                    if isinstance(child, (ast.Import, ast.ImportFrom)):
                        yield name, path, child


def test_an_import_inside_a_function_says_on_its_line_that_it_is_deferred() -> None:
    """lint-imports counts these imports like the others; what it cannot see is why one is not at the
    top. Only a deferral measured for cold start (tests/test_cold_start.py,
    tests/test_store_new_backends.py) may be, and its line says `deferred`."""
    silent = sorted(
        f"{path.relative_to(REPO)}:{node.lineno}: {lines[node.lineno - 1].strip()}"
        for name, path, node in function_level_imports()
        for lines in [path.read_text(encoding="utf-8").splitlines()]
        if "# deferred" not in lines[node.lineno - 1]
        and (name, getattr(node, "module", None)) not in DEFERRED_BY_OTHERS
    )
    assert not silent, "an import inside a function, not marked `# deferred` (say why):\n" + "\n".join(silent)


# -- (f) tests share helpers through tests/support ------------------------------------------------


def is_test_module(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last.startswith("test_") or last == "conftest"


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    """Fixtures live in conftest.py; shared functions and classes in tests/support. A test module
    that imports another couples the two suites' names and runs the other's module-level code."""
    files = python_files(REPO / "tests", REPO / "bench")
    offending = sorted(
        f"{files[name].relative_to(REPO)} imports {dep}"
        for name in files
        for dep in imported_modules(name, files[name], module_level=False)
        if dep.startswith(("tests", "bench")) and is_test_module(dep)
    )
    assert not offending, "\n".join(offending)


def test_the_shared_name_rules_are_declared_once() -> None:
    """The project ID, location and route name rules are written in runonce/names.py only; every other
    module builds its patterns from those (a second copy would drift)."""
    from runonce import names

    rules = {"PROJECT_ID": names.PROJECT_ID, "LOCATION": names.LOCATION, "ROUTE_NAME": names.ROUTE_NAME}
    copies = sorted(
        f"{path.relative_to(REPO)}:{node.lineno} repeats names.{rule}"
        for name, path in APP_MODULES.items()
        if name != "runonce.names"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        for rule, text in rules.items()
        if text in node.value
    )
    assert not copies, "\n".join(copies)


COPIES = {  # files that cannot import runonce/names.py, and the rules they repeat (anchored)
    "ROUTE_NAME": ["deploy/scheduler-job.sh", "deploy/smoke.sh", "terraform/variables.tf"],
    "PROJECT_ID": ["deploy/lib/common.sh", "terraform/variables.tf", "guard/runonce_store_url/__init__.py"],
    "SCOPED_PROJECT_ID": ["guard/runonce_guard/settings.py"],  # the guard is a distribution of its own
}


def test_the_deploy_scripts_and_terraform_repeat_the_name_rules_exactly() -> None:
    from runonce import names

    drift = sorted(
        f"{file} does not say names.{rule} as ^{getattr(names, rule)}$"
        for rule, files in COPIES.items()
        for file in files
        if f"^{getattr(names, rule)}$" not in (REPO / file).read_text(encoding="utf-8")
    )
    assert not drift, "\n".join(drift)


# -- (b) (c) short functions, a thin create_app ----------------------------------------------------

MAX_FUNCTION_LINES = 80
MAX_CREATE_APP_LINES = 60


def functions() -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for name, path in APP_MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield name, node


def length(node: ast.AST) -> int:
    """Lines from `def` to the last line of the body (decorators not counted)."""
    return node.end_lineno - node.lineno + 1  # type: ignore[attr-defined,operator]


def test_no_function_in_app_is_over_80_lines() -> None:
    long = sorted(
        f"{name}.{node.name} ({length(node)} lines)" for name, node in functions() if length(node) > MAX_FUNCTION_LINES
    )
    assert not long, f"over {MAX_FUNCTION_LINES} lines: {long}"


def test_create_app_is_wiring_only() -> None:
    [create_app] = [node for name, node in functions() if name == "runonce.api.main" and node.name == "create_app"]
    assert length(create_app) < MAX_CREATE_APP_LINES, f"create_app is {length(create_app)} lines"


# -- (d) one exception root --------------------------------------------------------------------------


def _resolved_bases() -> dict[str, list[str]]:
    """`module.Class` -> its bases as dotted names, resolved through the module's imports."""
    classes: dict[str, list[str]] = {}
    for name, path in APP_MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        aliases: dict[str, str] = {}
        for node in _imports(tree.body, module_level=False):
            if isinstance(node, ast.Import):
                aliases.update(
                    {
                        (a.asname or a.name).split(".")[0]: (a.name if a.asname else a.name.split(".")[0])
                        for a in node.names
                    }
                )
                continue
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                source = ".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            aliases.update({a.asname or a.name: f"{source}.{a.name}" for a in node.names})
        local = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = []
                for base in node.bases:
                    text = ast.unparse(base)
                    head, _, rest = text.partition(".")
                    if head in local:
                        bases.append(f"{name}.{text}")
                    elif head in aliases:
                        bases.append(aliases[head] + (f".{rest}" if rest else ""))
                    else:
                        bases.append(f"builtins.{text}")
                classes[f"{name}.{node.name}"] = bases
    return classes


def _external_is_exception(dotted: str) -> bool:
    import importlib

    module, _, attr = dotted.rpartition(".")
    try:
        value = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return False
    return isinstance(value, type) and issubclass(value, BaseException)


ROOT = "runonce.errors.RunonceError"


def test_every_exception_in_app_derives_from_the_one_root() -> None:
    """One hierarchy (runonce/errors.py): the web layer maps it to statuses in one place, and nothing a
    module raises escapes as a bare ValueError or a library's exception."""
    classes = _resolved_bases()

    def roots(cls: str, seen: frozenset[str] = frozenset()) -> set[str]:
        """The outermost bases `cls` reaches without passing through ROOT: ROOT itself, or external classes."""
        if cls == ROOT:
            return {ROOT}
        if cls not in classes or cls in seen:
            return {cls}
        return set().union(*(roots(base, seen | {cls}) for base in classes[cls])) if classes[cls] else set()

    stray = sorted(
        f"{cls} derives from {', '.join(sorted(found))}, not {ROOT}"
        for cls in classes
        if cls != ROOT
        for found in [roots(cls)]
        if ROOT not in found and any(_external_is_exception(r) for r in found)
    )
    assert not stray, "\n".join(stray)


# -- (e) a target type lives in its own module ---------------------------------------------------

NOT_A_TARGET = {  # the same word, another meaning
    ("runonce.api.access_log", "http"): "the ASGI scope type",
    ("runonce.lint", "http"): "a URL scheme",
    ("runonce.targets.cloud_tasks_task", "http"): "a URL scheme",
}


def target_types() -> dict[str, str]:
    """Each target module's type string (`type: Literal["workflows"]` on its config model) -> module."""
    found = {}
    for name, path in APP_MODULES.items():
        if name.startswith("runonce.targets."):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (
                    isinstance(node, ast.AnnAssign)
                    and isinstance(node.target, ast.Name)
                    and node.target.id == "type"
                    and ast.unparse(node.annotation).startswith("Literal[")
                ):
                    found[ast.literal_eval(node.annotation.slice)] = name  # type: ignore[attr-defined]
    return found


def test_a_target_type_name_appears_only_in_its_own_module() -> None:
    """Adding a target is one module (plus its fake, tests and docs): nothing else in runonce/ lists the
    types; the registry finds them."""
    types = target_types()
    assert {"workflows", "cloud_run_job", "cloud_build_trigger", "http", "log"} <= set(types)
    elsewhere = sorted(
        f"{path.relative_to(REPO)}:{node.lineno} names target type {node.value!r} (defined in {types[node.value]})"
        for name, path in APP_MODULES.items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in types
        and types[node.value] != name
        and (name, node.value) not in NOT_A_TARGET
    )
    assert not elsewhere, "\n".join(elsewhere)
