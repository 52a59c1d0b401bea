"""The layer rules of docs/architecture.md, read from the code's own imports.

Imports inside functions and under TYPE_CHECKING count: a late import is still a
dependency. What the later pass of the layering work still changes is listed in
`LATER_SQLITE`; nothing else may break a rule.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "ledger", "adapters", "policies")
# Modules that do I/O or read a clock: never in the core.
IMPURE = frozenset(
    {"asyncio", "anyio", "trio", "sqlite3", "socket", "subprocess", "threading", "time"}
    | {"select", "selectors", "os", "uvloop", "httpx", "openai"}
)
LATER_SQLITE: set[str] = set()


@cache
def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imported_names(module: str, path: Path) -> Iterator[str]:
    """Every dotted name the module imports, relative imports made absolute."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            stem = ".".join([*base, *([node.module] if node.module else [])])
            yield stem
            yield from (f"{stem}.{alias.name}" for alias in node.names)


@cache
def project_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (the longest module a name names)."""
    mods = modules()
    graph: dict[str, set[str]] = {}
    for module, path in mods.items():
        deps = set()
        for name in imported_names(module, path):
            parts = name.split(".")
            for k in range(len(parts), 0, -1):
                candidate = ".".join(parts[:k])
                if candidate in mods:
                    if candidate != module:
                        deps.add(candidate)
                    break
        graph[module] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module, less a package and
    one of its own modules (an `__init__` that re-exports)."""
    reach = {m: _reachable(graph, m) for m in graph}
    seen: set[str] = set()
    out = []
    for m in sorted(graph):
        if m in seen:
            continue
        component = {m} | {n for n in reach[m] if m in reach[n]}
        seen |= component
        if len(component) > 1 and not _package_and_module(component):
            out.append(component)
    return out


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    todo, seen = [start], set()
    while todo:
        for n in graph[todo.pop()]:
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def _package_and_module(component: set[str]) -> bool:
    a, b = sorted(component) if len(component) == 2 else ("", "-")
    return b.startswith(a + ".")


def test_the_core_imports_no_io_no_clock_and_nothing_of_the_shell() -> None:
    mods = modules()
    core = {m: p for m, p in mods.items() if m == "broker.core" or m.startswith("broker.core.")}
    assert core, "broker/core/ is missing"
    bad = set()
    for module, path in core.items():
        for name in imported_names(module, path):
            if name.split(".")[0] in IMPURE:
                bad.add(f"{module} -> {name}")
    graph = project_graph()
    for module in core:
        bad |= {f"{module} -> {d}" for d in graph[module] if d not in core}
    assert not bad, sorted(bad)


def test_the_ledger_imports_only_itself_and_the_core() -> None:
    up = {
        f"{module} -> {dep}"
        for module, deps in project_graph().items()
        if module.split(".")[0] == "ledger"
        for dep in deps
        if dep.split(".")[0] != "ledger" and not dep.startswith("broker.core")
    }
    assert not up, sorted(up)


def test_no_import_cycles() -> None:
    assert cycles(project_graph()) == []


def test_sqlite3_only_in_the_ledger() -> None:
    users = {
        module
        for module, path in modules().items()
        if module.split(".")[0] != "ledger"
        and any(n.split(".")[0] == "sqlite3" for n in imported_names(module, path))
    }
    assert users - LATER_SQLITE == set()


def test_one_queue_mode_type() -> None:
    definitions = []
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            target = None
            if isinstance(node, ast.ClassDef):
                target = node.name
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                target = node.target.id
            elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                target = node.targets[0].id
            if target == "QueueMode":
                definitions.append(module)
    assert definitions == ["broker.core.queue_machine"]
