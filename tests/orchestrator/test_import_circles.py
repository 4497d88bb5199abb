"""No import circle anywhere in nestor's packages, within a subpackage or across two.

The layer contracts (``lint-imports``) forbid upward imports between layers, but two
packages in one layer, or two modules of one package, could still import each other:
then neither can be read, tested or moved without the other (the spec and the planner
were such a pair; inside the projections, the MLflow writers and the projector's
cursor, and the kinds' reports with the tables and products that dispatched to them).
grimp is the graph import-linter itself builds, so function-local and TYPE_CHECKING
imports count here too.
"""

from __future__ import annotations

import grimp


def _subpackage(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:3])  # nestor.orchestrator.<subpackage>


def _circles(graph: grimp.ImportGraph, modules: list[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    edges = {m: [i for i in graph.find_modules_directly_imported_by(m) if i in modules]
             for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
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
    return found


def test_no_import_circle_crosses_two_subpackages() -> None:
    graph = grimp.build_graph("nestor")
    modules = sorted(m for m in graph.modules if m.startswith("nestor.orchestrator."))
    crossing = [c for c in _circles(graph, modules) if len({_subpackage(m) for m in c}) > 1]
    assert not crossing, f"import circles across subpackages: {crossing}"


def test_no_import_circle_at_all() -> None:
    graph = grimp.build_graph("nestor")
    for package in ("nestor.orchestrator.", "nestor.search.", "nestor.trainers."):
        modules = sorted(m for m in graph.modules if m.startswith(package))
        assert not _circles(graph, modules), f"import circles in {package[:-1]}"
