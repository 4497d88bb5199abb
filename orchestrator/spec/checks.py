"""Checks that span fields or stages, each pointing at the field to fix.

Pydantic validates one value at a time; these run on the validated workflow
and yield ``(location, message)`` pairs so the error names the exact line
(the reference to a missing stage, not the whole stage).
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nestor.trainers.catalog import TRAINERS
from nestor.trainers.launch import PLACEHOLDERS, unknown_placeholders

from .errors import allowed, did_you_mean, option_mismatch, short
from .leaks import check_splits
from .model import Finding, Workflow, default_slots
from .needs import unmet_needs


def check_workflow(workflow: Workflow) -> list[Finding]:
    findings = list(_names_and_references(workflow))
    if findings:
        return findings  # the rest assumes a well-formed stage graph
    for index, stage in enumerate(workflow.stages):
        findings.extend(_stage(workflow, index, stage))
    findings.extend(check_splits(workflow))  # the test split never leaks into tuning
    return findings


def _names_and_references(workflow: Workflow) -> Iterator[Finding]:
    names = [s.name for s in workflow.stages]
    first: dict[str, int] = {}
    for index, name in enumerate(names):
        if name in first:
            yield ("stages", index, "name"), (
                f"stage name {name!r} is already used by stages[{first[name]}]"
            )
        first.setdefault(name, index)
    for index, stage in enumerate(workflow.stages):
        for ref_index, ref in enumerate(stage.from_):
            loc = ("stages", index, "from", ref_index)
            if ref == stage.name:
                yield loc, f"stage {ref!r} cannot consume itself"
            elif ref not in first:
                hint = did_you_mean(ref, names)
                yield loc, f"no stage is named {short(ref)}{hint} ({allowed(names)})"
        if len(set(stage.from_)) != len(stage.from_):
            yield ("stages", index, "from"), f"lists a stage twice: {stage.from_}"
    edges = {s.name: [r for r in s.from_ if r in first and r != s.name] for s in workflow.stages}
    cycle = _find_cycle(edges)
    if cycle:
        yield ("stages", first[cycle[0]], "from"), (
            "stages depend on each other in a cycle: " + " -> ".join([*cycle, cycle[0]])
        )


def _find_cycle(edges: dict[str, list[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: finished

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in edges.get(node, []):
            if state.get(nxt) == 1:
                return path[path.index(nxt):]
            if nxt not in state:
                found = visit(nxt, path)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in edges:
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


def _stage(workflow: Workflow, index: int, stage: Any) -> Iterator[Finding]:
    here = ("stages", index)
    if stage.trainer is None and not stage.from_:
        yield (*here, "trainer"), (
            "missing required field 'trainer' (a stage with no from: has nothing to inherit)"
        )
    if stage.trainer is not None:
        yield from _trainer(here, stage)
    slots = workflow.resources.slots
    declared = workflow.declared_parallel(stage.name)
    if declared.is_auto or workflow.batch_of(stage.name) is not None:
        yield from _planned(workflow, here, stage)
    ranks = 0 if declared.is_auto else declared.ranks  # a plan keeps within the slots
    if slots is not None and ranks > slots and not workflow.resources.oversubscribe:
        yield (*here, "parallel"), (
            f"a trial needs {ranks} slots (data x model) but resources.slots is {slots};"
            " lower parallel or raise resources.slots (or set resources.oversubscribe: true)"
        )
    yield from _gpu_share(workflow, here, stage, declared)
    yield from stage.check(workflow, here)
    yield from unmet_needs(workflow, index, stage)


def _gpu_share(workflow: Workflow, here: tuple[Any, ...], stage: Any,
               declared: Any) -> Iterator[Finding]:
    """A GPU shared between trials (``gpus_per_trial`` below 1) holds one rank of each:
    two ranks of one gang would land on one GPU, and NCCL refuses a communicator
    with the same GPU twice ("Duplicate GPU detected")."""
    share = workflow.resources.gpus_per_trial
    if share >= 1 or (not declared.is_auto and declared.ranks == 1):
        return
    shape = "auto" if declared.is_auto else f"{declared.ranks} ranks (data x model)"
    where = (*here, "parallel") if "parallel" in stage.model_fields_set \
        else ("resources", "gpus_per_trial")
    yield where, (
        f"parallel must be 1 x 1 when resources.gpus_per_trial is below 1 ({share:g}), but"
        f" stage {stage.name!r} has {shape}: ranks of one trial packed onto a shared GPU"
        " would share it, which NCCL refuses; use gpus_per_trial: 1 for multi-rank trials")


def _planned(workflow: Workflow, here: tuple[Any, ...], stage: Any) -> Iterator[Finding]:
    """A stage whose shape is planned (``parallel: auto``) or whose global batch is
    capped (``batch:``): the planner must find a shape within the cap, memory and
    slots, or the spec is wrong; the error says what would fit."""
    declared = workflow.declared_parallel(stage.name)
    batch = workflow.batch_of(stage.name)
    try:
        trainer = workflow.trainer_of(stage.name)
    except (KeyError, IndexError, ValueError):
        return  # a missing or cyclic from: is reported on its own
    where = (*here, "parallel") if declared.is_auto else (*here, "batch")
    if trainer.name is None:
        yield where, (
            f"planning needs a built-in trainer (name:), but got a {trainer.kind} trainer"
            f" ({allowed(TRAINERS)})"
        )
        return
    if declared.is_auto and batch is None:
        yield (*here, "parallel"), (
            "parallel: auto needs batch: {global_max: N}, the cap on the global minibatch,"
            " but got none"
        )
        return
    if stage.trainer is not None and batch is not None:
        wanted = {"batch_per_rank": True, "lr_scaling": batch.lr_rule}
        for key, value in wanted.items():
            if stage.trainer.settings.get(key, value) != value:
                yield (*here, "trainer", "settings", key), (
                    f"{key} is set by batch: (batch_size is per rank, lr follows"
                    f" batch.lr_rule), so it must be {short(value)}, but got"
                    f" {short(stage.trainer.settings[key])}; remove it"
                )
    if trainer.name not in TRAINERS:
        return  # reported by _trainer
    from nestor.orchestrator.planning import NoFeasibleShape, plan_stage

    slots = workflow.resources.slots or default_slots()
    try:
        plan_stage(workflow, stage.name, slots)
    except NoFeasibleShape as exc:
        at = (*here, "batch", "global_max") if "cap" in str(exc) else (*here, "parallel")
        yield at, f"the plan cannot be met: {exc}"
    except ValueError:
        return  # an unknown option or value: _trainer and _config report it


def _trainer(here: tuple[Any, ...], stage: Any) -> Iterator[Finding]:
    trainer = stage.trainer
    if trainer.command is not None:
        yield from _placeholders(here, trainer)
    if trainer.name is None:
        return
    if trainer.name not in TRAINERS:
        yield (*here, "trainer", "name"), (
            f"unknown built-in trainer {short(trainer.name)}{did_you_mean(trainer.name, TRAINERS)}"
            f" ({allowed(TRAINERS)}; or use function: or command:)"
        )
        return
    info = TRAINERS[trainer.name]
    for key, value in trainer.settings.items():
        loc = (*here, "trainer", "settings", key)
        option = info.settings.get(key)
        if option is None:
            yield loc, (
                f"{trainer.name} has no setting {key!r}{did_you_mean(key, info.settings)}"
                f" ({allowed(info.settings)})"
            )
        else:
            message = option_mismatch(option, value)
            if message:
                yield loc, message


def _placeholders(here: tuple[Any, ...], trainer: Any) -> Iterator[Finding]:
    """Every ``{name}`` in a command must be a placeholder nestor fills: a typo such
    as ``{nprocs}`` would otherwise reach the launcher as text (or fail each trial).
    A list command is pointed at the word; a string command at the command."""
    words = trainer.argv
    for index, name in unknown_placeholders(words):
        loc = (*here, "trainer", "command")
        if isinstance(trainer.command, list):
            loc = (*loc, index)
        yield loc, (
            f"unknown placeholder {{{name}}} in {short(words[index])}"
            f"{did_you_mean(name, PLACEHOLDERS)}"
            f" (allowed: {', '.join('{' + p + '}' for p in PLACEHOLDERS)};"
            f" write {{{{{name}}}}} for a literal {{{name}}})"
        )


def check_imports(workflow: Workflow) -> list[Finding]:
    """Each ``module:function`` trainer must name a module on this Python's import
    path that defines that function, so a typo fails before any trial starts.

    Nothing is executed: the module is found the way ``import`` would find it
    (a parent package's ``__init__`` is not run either) and its source is parsed
    for a top-level ``def``, ``class``, assignment or import of the name. A
    module that is not Python source (an extension), or that builds names at run
    time (``from x import *``, a module ``__getattr__``), is given the benefit
    of the doubt: the trial's own import reports it.
    """
    findings: list[Finding] = []
    for index, stage in enumerate(workflow.stages):
        trainer = stage.trainer
        function = getattr(trainer, "function", None) if trainer is not None else None
        if function:
            message = function_problem(function)
            if message:
                findings.append((("stages", index, "trainer", "function"), message))
        search = getattr(stage, "search", None)
        for rule_index, rule in enumerate(getattr(search, "constraints", None) or []):
            if not isinstance(rule, str) and not rule.function.startswith("__main__:"):
                message = function_problem(rule.function)  # __main__: shipped by value
                if message:
                    findings.append((("stages", index, "search", "constraints", rule_index,
                                      "function"), message))
    return findings


def function_problem(path: str) -> str | None:
    """Why ``package.module:function`` cannot be imported here, or None if it can."""
    module_name, _, attr = path.partition(":")
    origin = _find_module(module_name)
    if isinstance(origin, _Missing):
        return (
            f"cannot import {short(path)}: no module named {origin.name!r} on the import path"
            " (set PYTHONPATH to the folder that holds it, or install its package)"
        )
    if origin is None or not origin.endswith(".py"):
        return None
    try:
        tree = ast.parse(Path(origin).read_bytes(), filename=origin)
    except (OSError, SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        where = f"{origin}:{line}" if line else origin
        return f"cannot import {short(path)}: {where} is not valid Python ({exc})"
    names = _top_level_names(tree)
    if attr in names or "*" in names or "__getattr__" in names:
        return None
    return (
        f"cannot import {short(path)}: module {module_name!r} ({origin}) defines no"
        f" {attr!r}{did_you_mean(attr, sorted(n for n in names if not n.startswith('_')))}"
    )


class _Missing:
    def __init__(self, name: str) -> None:
        self.name = name


def _find_module(dotted: str) -> str | _Missing | None:
    """The source file of a module, found without running any package's code."""
    if dotted in sys.modules:
        return getattr(sys.modules[dotted], "__file__", None)
    parts = dotted.split(".")
    search: list[str] | None = None  # None: sys.path
    spec = None
    for depth in range(len(parts)):
        name = ".".join(parts[: depth + 1])
        if search is None and depth == 0:
            try:
                spec = importlib.util.find_spec(name) if "." not in name else None
            except (ImportError, ValueError):
                spec = None
        else:
            spec = _find_in(name, search or [])
        if spec is None:
            return _Missing(name)
        if depth < len(parts) - 1:
            search = list(spec.submodule_search_locations or [])
            if not search:
                return _Missing(".".join(parts[: depth + 2]))
    assert spec is not None
    return spec.origin if spec.has_location else None


def _find_in(name: str, search: list[str]) -> importlib.machinery.ModuleSpec | None:
    """The spec of ``name`` in the folders ``search`` (its parent package's), or None.

    A namespace package (a folder without ``__init__.py``) inside another is found by
    hand: ``PathFinder`` would look its parent up in ``sys.modules`` (a KeyError),
    and nothing is imported here."""
    try:
        return importlib.machinery.PathFinder.find_spec(name, search)
    except KeyError:
        tail = name.rpartition(".")[2]
        portions = [str(Path(folder) / tail) for folder in search
                    if (Path(folder) / tail).is_dir()]
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = portions
        return spec


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.If | ast.Try):  # guarded definitions: look one level in
            inner = ast.Module(body=[*getattr(node, "body", []), *getattr(node, "orelse", []),
                                     *[s for h in getattr(node, "handlers", []) for s in h.body]],
                               type_ignores=[])
            names |= _top_level_names(inner)
    return names
