"""attnedu's modules import one another one way: the graph of their imports has no cycle.

The graph is built from the source (``ast``), not by importing: every ``import`` and ``from ... import`` of an
attnedu module, at module level and inside functions (a lazy import is still a dependency; hiding a cycle in a
function is how one starts). ``from . import x`` counts as importing the module ``x`` when ``x`` is a module of the
package, else the package itself. A package's ``__init__`` is not counted as imported by its own submodules'
``from . import name`` of a non-module name (that reads a name the package re-exports, which is how a registry such
as ``attnedu.checks`` works; such an edge would make every package a cycle with its members).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "attnedu"


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package is its ``__init__``)."""
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a ``from`` import reads from (relative imports resolved against ``module``)."""
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    here = parts if is_package else parts[:-1]
    here = here[: len(here) - (node.level - 1)]
    return ".".join(here + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, anywhere in its source."""
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _base(name, is_package, node)
                for alias in node.names:
                    if f"{base}.{alias.name}" in known:
                        targets.append(f"{base}.{alias.name}")  # from . import bench: the module bench
                    elif not (name.startswith(base + ".") and base in known and known[base].name == "__init__.py"):
                        targets.append(base)  # from .masks import causal_mask; not a member reading its package
            for target in targets:
                while target and target not in known:  # import attnedu.checks.lesson08 -> that module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_graph_sees_lazy_and_relative_imports():
    """The builder itself, on the package as it is: a lazy import inside a function is an edge, relative imports
    resolve, and the walk finds a cycle in a graph that has one."""
    graph = import_graph()
    assert "attnedu.measurements" in graph["attnedu.bench"]  # module level, relative
    assert "attnedu.bench_gpu" in graph["attnedu.bench"]  # from . import bench_gpu: the module
    assert "attnedu.bench" not in graph["attnedu.bench_gpu"]
    assert "attnedu.triton_attention" in graph["attnedu.measurements"]  # inside a function
    assert "attnedu.checks.exercise" in graph["attnedu.checks.lesson08"]  # from .exercise import ...
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_attnedu():
    found = cycles(import_graph())
    assert not found, "modules of attnedu that import one another (directly or around a loop): " + "; ".join(
        " <-> ".join(component) for component in found
    )
