"""The layer rules of docs/architecture.md, read from the code's own imports.

The top-level packages form layers, each importing only those below it:

    core  <-  plumbing  <-  wire, policies  <-  ledger  <-  broker  <-  adapters  <-  brokerctl

Inside the ledger, the port (`ledger.port`) imports nothing of the ledger but
itself, and the daemon's shell imports only the port, but for the composition
root (`broker.daemon`), which opens the chosen implementation. Imports inside
functions and under TYPE_CHECKING count: a late import is still a dependency.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Bottom first: a package may import those on an earlier line, and its own.
LAYERS = (
    ("core",),
    ("plumbing",),
    ("wire", "policies"),
    ("ledger",),
    ("broker",),
    ("adapters",),
    ("brokerctl",),
)
PACKAGES = tuple(p for layer in LAYERS for p in layer)
# Modules that do I/O or read a clock: never in the core.
IMPURE = frozenset(
    {"asyncio", "anyio", "trio", "sqlite3", "socket", "subprocess", "threading", "time"}
    | {"select", "selectors", "os", "uvloop", "httpx", "openai", "random"}
)
# The one module of the shell that picks and opens a ledger implementation.
COMPOSITION_ROOT = "broker.daemon"


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
    core = {m: p for m, p in mods.items() if m == "core" or m.startswith("core.")}
    assert core, "core/ is missing"
    bad = set()
    for module, path in core.items():
        for name in imported_names(module, path):
            if name.split(".")[0] in IMPURE:
                bad.add(f"{module} -> {name}")
    graph = project_graph()
    for module in core:
        bad |= {f"{module} -> {d}" for d in graph[module] if d not in core}
    assert not bad, sorted(bad)


def _layer(module: str) -> int:
    top = module.split(".")[0]
    return next(i for i, layer in enumerate(LAYERS) if top in layer)


def test_each_package_imports_only_the_layers_below_it() -> None:
    up = {
        f"{module} -> {dep}"
        for module, deps in project_graph().items()
        for dep in deps
        if dep.split(".")[0] != module.split(".")[0] and _layer(dep) >= _layer(module)
    }
    assert not up, sorted(up)


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_port_imports_nothing_of_the_ledger_but_itself() -> None:
    out = {
        f"{module} -> {dep}"
        for module, deps in project_graph().items()
        if _within(module, "ledger.port")
        for dep in deps
        if _within(dep, "ledger") and not _within(dep, "ledger.port")
    }
    assert not out, sorted(out)


def test_the_shell_reaches_the_ledger_only_through_its_port() -> None:
    past = {
        f"{module} -> {dep}"
        for module, deps in project_graph().items()
        if _within(module, "broker") and module != COMPOSITION_ROOT
        for dep in deps
        if _within(dep, "ledger") and dep != "ledger" and not _within(dep, "ledger.port")
    }
    assert not past, sorted(past)


def test_no_cycles_between_packages_at_any_depth() -> None:
    """Fold every module into its package at each depth: the packages stay acyclic."""
    graph = project_graph()
    packages = {m for m, p in modules().items() if p.name == "__init__.py"}
    depth = max(len(m.split(".")) for m in graph)
    found = []
    for d in range(1, depth):
        folded: dict[str, set[str]] = {}
        for module, deps in graph.items():
            a = ".".join(module.split(".")[:d])
            folded.setdefault(a, set())
            for dep in deps:
                b = ".".join(dep.split(".")[:d])
                folded.setdefault(b, set())
                if a != b and not (a.startswith(b + ".") or b.startswith(a + ".")):
                    folded[a].add(b)
        found += [c for c in cycles(folded) if c & packages]
    assert found == []


def test_every_package_says_what_it_is_for_and_what_it_offers() -> None:
    bare = []
    for module, path in modules().items():
        if path.name != "__init__.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        targets = [t for n in tree.body if isinstance(n, ast.Assign) for t in n.targets]
        targets += [n.target for n in tree.body if isinstance(n, ast.AnnAssign)]
        has_all = any(getattr(t, "id", "") == "__all__" for t in targets)
        if not ast.get_docstring(tree) or not has_all:
            bare.append(module)
    assert bare == []


def test_no_import_cycles() -> None:
    assert cycles(project_graph()) == []


def test_sqlite3_only_in_the_ledger() -> None:
    users = {
        module
        for module, path in modules().items()
        if module.split(".")[0] != "ledger"
        and any(n.split(".")[0] == "sqlite3" for n in imported_names(module, path))
    }
    assert users == set()


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
    assert definitions == ["core.queue_machine"]
