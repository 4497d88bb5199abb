"""A module whose name starts with ``_`` is its package's own business.

Only modules of the same package (or below it) import it; everyone else goes through
the package's public names. Otherwise a package cannot reorganise its insides without
breaking a layer above it (the CLI reached into ``planning._report`` and
``search._budget``, the spec into ``search._auto``, ``search._genetic`` and
``search._lq_cmaes``). grimp's graph counts function-local imports too.
"""

from __future__ import annotations

import grimp


def _owner(private: str) -> str:
    """The package a private module belongs to: the part before its first ``_`` name."""
    parts = private.split(".")
    first = next(i for i, part in enumerate(parts) if part.startswith("_"))
    return ".".join(parts[:first])


def reaching_in(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    """(importer, private module) pairs where the importer is outside the owner."""
    found = []
    for module in sorted(graph.modules):
        if not any(part.startswith("_") and part != "__init__" for part in module.split(".")):
            continue
        owner = _owner(module)
        for importer in graph.find_modules_that_directly_import(module):
            if importer != owner and not importer.startswith(owner + "."):
                found.append((importer, module))
    return sorted(found)


def test_no_module_imports_another_package_s_private_module() -> None:
    graph = grimp.build_graph("nestor")
    leaks = reaching_in(graph)
    assert not leaks, "private modules imported from outside their package:\n" + "\n".join(
        f"  {importer} -> {module}" for importer, module in leaks)
