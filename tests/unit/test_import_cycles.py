"""No import cycles between r9700ctl's modules and packages.

Issue 20 item 5: validate <-> history, provision <-> report and preflight <-> envlist imported
each other (and through them twelve units formed one knot), so no one of them could be read,
tested or moved alone. Every import counts here, wherever it stands: at the top, inside a
function (a lazy import is still a dependency) or under TYPE_CHECKING (a type is one too).
Units are r9700ctl's top-level modules and packages (r9700ctl.history, r9700ctl.validate):
between units the graph must be a tree of layers. Inside a package its modules may lean on each
other, but not in a ring either: preflight/model.py imported preflight/release.py back in a function
(the node's known issues), which a module-level test now finds.
"""

from __future__ import annotations

import ast
from pathlib import Path

import r9700ctl

PACKAGE = Path(r9700ctl.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, name: str) -> list[tuple[str, list[str]]]:
    """Every import of one file as (module, names): `import X` is (X, []), `from X import a, b`
    (relative ones resolved) is (X, [a, b])."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.append((base, [alias.name for alias in node.names]))
    return found


def imported(path: Path, name: str, known: set[str]) -> set[str]:
    """The r9700ctl modules one file imports (`from X import Y` counts X and X.Y where they exist)."""
    found = {
        target for base, names in imports(path, name) for target in [base, *(f"{base}.{n}" for n in names)]
    }
    return {target for target in found if target in known and target != name}


def imported_modules(path: Path, name: str, known: set[str]) -> set[str]:
    """The r9700ctl modules one file imports, `from pkg import mod` counting mod alone (pkg's
    __init__ has run by then, so it is no edge of its own); `from mod import name` counts mod."""
    found: set[str] = set()
    for base, names in imports(path, name):
        modules = {f"{base}.{n}" for n in names} & known
        found.update(modules if names and len(modules) == len(names) else {*modules, base})
    return {target for target in found if target in known and target != name}


def unit(name: str) -> str:
    """r9700ctl.history.store -> r9700ctl.history; r9700ctl itself stays r9700ctl."""
    return ".".join(name.split(".")[:2])


def unit_graph() -> dict[str, set[str]]:
    files = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        for target in imported(path, name, set(files)):
            if unit(target) != unit(name):
                graph.setdefault(unit(name), set()).add(unit(target))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one unit (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_two_units_of_r9700ctl_import_each_other_directly_or_around_a_ring():
    graph = unit_graph()
    assert "r9700ctl.cli" in graph  # the graph was read: the CLI imports the use cases
    assert cycles(graph) == []


def test_no_two_modules_of_r9700ctl_import_each_other_directly_or_around_a_ring():
    """Module by module, inside a package too: a lazy import back is a ring all the same."""
    files = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {name: imported_modules(path, name, set(files)) for name, path in files.items()}
    assert "r9700ctl.preflight.model" in graph["r9700ctl.preflight.release"]  # the graph was read
    assert cycles(graph) == []


def test_the_cycle_finder_sees_a_ring_through_three_units():
    """The finder itself: a ring a -> b -> c -> a is one group, a tail into it is not part of it."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
