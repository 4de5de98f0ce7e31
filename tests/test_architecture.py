"""The shape docs/architecture.md draws, held from the code with `ast` (nothing is imported or run):
imports go one way, the schedule engine stands alone, and tests share helpers through tests/support
only. A failure names the module, the function or the import at fault."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "app"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def python_files(*roots: Path) -> dict[str, Path]:
    return {module_name(path): path for root in roots for path in sorted(root.rglob("*.py"))}


APP_MODULES = python_files(APP)


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


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
        elif isinstance(node, (ast.ClassDef, ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)) or not module_level:
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
    return found


def app_import_graph(*, module_level: bool) -> dict[str, set[str]]:
    return {name: imported_modules(name, path, module_level=module_level) & set(APP_MODULES)
            for name, path in APP_MODULES.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (a, b, ..., a), or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for child in sorted(graph.get(node, ())):
            if state.get(child) == "open":
                return stack[stack.index(child):] + [child]
            if child not in state and (cycle := visit(child)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


# -- (a) import direction ---------------------------------------------------------------------------


def test_the_app_package_has_no_import_cycle() -> None:
    """Module-level imports only: an import inside a function or under TYPE_CHECKING runs after both
    modules exist, so it cannot deadlock start-up (it is still a smell; the rules below catch the
    ones that matter)."""
    cycle = find_cycle(app_import_graph(module_level=True))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_schedule_engine_imports_nothing_else_of_runonce() -> None:
    """app/schedules is Cloud Scheduler's formats and nothing more; lint and the routes use it, not
    the other way round. Imports inside functions count here too."""
    graph = app_import_graph(module_level=False)
    outside = {(name, dep) for name, deps in graph.items() if name.startswith("app.schedules")
               for dep in deps if dep != "app" and not dep.startswith("app.schedules")}
    assert not outside, f"app/schedules imports from the rest of runonce: {sorted(outside)}"


WEB_LAYER = ("app.main", "app.api", "app.server", "app.access", "app.cli")


def test_stores_and_targets_never_import_the_web_layer_or_the_command_line() -> None:
    graph = app_import_graph(module_level=False)
    upward = {(name, dep) for name, deps in graph.items() if name.startswith(("app.stores", "app.targets"))
              for dep in deps if dep.startswith(WEB_LAYER)}
    assert not upward, f"stores/targets import the web layer or the CLI: {sorted(upward)}"


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
    """The project ID, location and route name rules are written in app/names.py only; every other
    module builds its patterns from those (a second copy would drift)."""
    from app import names

    rules = {"PROJECT_ID": names.PROJECT_ID, "LOCATION": names.LOCATION, "ROUTE_NAME": names.ROUTE_NAME}
    copies = sorted(
        f"{path.relative_to(REPO)}:{node.lineno} repeats names.{rule}"
        for name, path in APP_MODULES.items() if name != "app.names"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        for rule, text in rules.items() if text in node.value
    )
    assert not copies, "\n".join(copies)
