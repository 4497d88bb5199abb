#!/usr/bin/env python3
"""Regroup nestor's flat orchestrator/ package into subpackages by role (issue 27,
items 1 and 7), rewriting every reference in the checkout, and add import-linter
contracts that check the layers.

    python scripts/restructure_layout.py /path/to/checkout [--dry-run] [--ruff PATH]
        [--also /work/shared/DESIGN.md ...]

Afterwards: `ruff check .` and `lint-imports` in the checkout (the script runs both when
it finds them), `make setup` (the `nestor` entry point moved to orchestrator.commands.cli,
so an installed .venv needs its console script rewritten), then the tests.

Re-runnable: a move whose source file is gone (already moved) is skipped, and so
are the rewrites that belong to it, so a second run changes nothing. It works on
whatever the checkout holds (files other branches added included): references are
found by regex and AST over every tracked text file, not from a fixed list of edits.

What it does, in order:
 1. resolves relative imports (``from .x import y``) that cross a moved module to
    absolute ones (relative imports inside an unmoved package, planning/, stay);
 2. splits ``from orchestrator import a, b`` style imports whose names go to
    different packages (keeping the local names with ``as``);
 3. ``git mv`` each mapped file or folder and writes the new packages' __init__.py;
 4. rewrites dotted names (``orchestrator.gangs`` in imports, strings, mock and
    monkeypatch targets, ``-m`` arguments, ``module:function`` references) and
    file paths (``orchestrator/gangs.py``) in every tracked text file;
 5. sorts the touched files' imports with ``ruff check --select I --fix``;
 6. adds import-linter (pinned) to pyproject's test extras and requirements.lock,
    its contracts to pyproject.toml, and ``lint-imports`` to ``make lint``;
 7. prints what it could not place: new top-level modules under orchestrator/.

What it cannot do: place a new top-level module (it says "unplaced" and leaves it, its
imports rewritten); fix an import that a new branch adds across the layers (lint-imports
names it: move it, or add it to ignore_imports with why); wrap a line the rewrite made
too long inside a docstring or a multi-line string (it names them; code lines get
``# noqa: E501``); find a module named by pieces (``"orchestrator." + name``) or
written with a slash in a string it cannot tell from a path; rewrite user files outside
the repository. So the two modules users name in their own files stay where they are:
``orchestrator.simulate`` (specs name ``orchestrator.simulate:simulated_trial``) and
``orchestrator.predict`` (the README's ``load_predictor``).
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

# --- the mapping -------------------------------------------------------------------
# old dotted module (a file, or a package moved whole) -> new dotted module.
MOVES: dict[str, str] = {
    # commands: what each `nestor` command parses and prints (the top layer).
    "orchestrator.cli": "orchestrator.commands.cli",
    "orchestrator.console": "orchestrator.commands.console",
    "orchestrator.doctor": "orchestrator.commands.doctor",
    "orchestrator.sweep": "orchestrator.commands.sweep",
    "orchestrator.summary": "orchestrator.commands.summary",
    "orchestrator.progress": "orchestrator.commands.progress",
    "orchestrator.ui": "orchestrator.commands.ui",
    # projections: read models of a run (MLflow, results, status, reports, the model).
    "orchestrator.projector": "orchestrator.projections.projector",
    "orchestrator.tracking": "orchestrator.projections.tracking",
    "orchestrator.artifacts": "orchestrator.projections.artifacts",
    "orchestrator.plots": "orchestrator.projections.plots",
    "orchestrator.tables": "orchestrator.projections.tables",
    "orchestrator.products": "orchestrator.projections.products",
    "orchestrator.results": "orchestrator.projections.results",
    "orchestrator.status": "orchestrator.projections.status",
    # engine: the scheduling loop, the trial runner, stage kinds.
    "orchestrator.workflow": "orchestrator.engine.workflow",
    "orchestrator.trials": "orchestrator.engine.trials",
    "orchestrator.plan": "orchestrator.engine.plan",
    "orchestrator.stopping": "orchestrator.engine.stopping",
    "orchestrator.combine": "orchestrator.engine.kinds.combine",
    "orchestrator.kinds": "orchestrator.engine.kinds",  # the package, whole
    # journal: the append-only truth and its event types.
    "orchestrator.events": "orchestrator.journal.events",
    "orchestrator.journal": "orchestrator.journal.journal",
    # backends: the Backend interface stays in backends/_base.py.
    "orchestrator.gangs": "orchestrator.backends.ray.gangs",
    "orchestrator.backends._ray": "orchestrator.backends.ray.backend",
    "orchestrator.heartbeat": "orchestrator.backends.ray.heartbeat",
    "orchestrator.pruning": "orchestrator.backends.ray.pruning",
    "orchestrator.visibility": "orchestrator.backends.ray.visibility",
    "orchestrator.backends._simulated": "orchestrator.backends.simulated.backend",
}

# Packages that stay where they are, and the new ones (their __init__ docstrings).
KEPT = {"spec", "planning", "slurm", "backends",
        # modules users name in their own files (specs, scripts): they stay put
        "simulate", "predict"}
NEW_PACKAGES: dict[str, str] = {
    "orchestrator/commands": (
        "The `nestor` commands: parsing flags and printing. The top layer: it may import\n"
        "every other part of the orchestrator; nothing imports it (but slurm's command group,\n"
        "which prints with its console)."),
    "orchestrator/projections": (
        "Read models of a run, each derived from the journal and the run directory:\n"
        "MLflow (projector, tracking), results, status, summary tables, plots, artifacts\n"
        "and artifacts. Above the engine: they never drive a run."),
    "orchestrator/engine": (
        "The scheduling loop (`workflow`), the trial runner (`trials`), fixed plans,\n"
        "stopping and the stage kinds (`kinds/`). It writes the\n"
        "journal and runs attempts on a backend; it knows nothing of commands."),
    "orchestrator/journal": (
        "The run's journal (`journal`: the append-only, fsynced truth) and the events it\n"
        "holds (`events`). The bottom of the orchestrator's layers: imports none of them."),
    "orchestrator/backends/ray": (
        "The Ray backend: warm Horovod gangs (`gangs`), the backend on them (`backend`),\n"
        "and the Ray actors and tasks the driver uses (progress heartbeats, early stopping,\n"
        "the run directory's visibility check). The one place that may import Ray."),
    "orchestrator/backends/simulated": (
        "The simulated backend: a cluster on a virtual clock for the same scheduler code."),
}

IMPORT_LINTER = ("import-linter==2.17", "grimp==3.20")

SKIP_DIRS = ("bench/results/", ".venv/")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".tmpl", ".txt", ".cfg",
                 ".ini", ".rst", ""}


# The entries of MOVES that are packages moved whole (every other entry is one file).
PACKAGE_MOVES = {"orchestrator.kinds"}


def is_package_move(dotted: str) -> bool:
    return dotted in PACKAGE_MOVES or dotted in {MOVES[p] for p in PACKAGE_MOVES}


def mod_path(root: Path, dotted: str) -> Path:
    """The file or folder of a dotted name in MOVES: a/b.py, or a/b/ for a package."""
    base = root.joinpath(*dotted.split("."))
    return base if is_package_move(dotted) else base.with_suffix(".py")


def rel(p: Path, root: Path) -> str:
    return p.relative_to(root).as_posix()


def map_name(name: str, active: dict[str, str]) -> str:
    """The new dotted name of ``name`` (a module, or something inside one)."""
    for old in sorted(active, key=len, reverse=True):
        if name == old or name.startswith(old + "."):
            return active[old] + name[len(old):]
    return name


def module_of(path: Path, root: Path) -> tuple[str, bool]:
    """(dotted module of a .py file, whether it is a package's __init__)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    init = parts[-1] == "__init__"
    if init:
        parts = parts[:-1]
    return ".".join(parts), init


def absolute(module: str | None, level: int, here: str, init: bool) -> str:
    pkg = here.split(".") if init else here.split(".")[:-1]
    base = pkg[: len(pkg) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def affected(name: str, active: dict[str, str]) -> bool:
    return map_name(name, active) != name


# --- import statements that a plain text substitution cannot fix ---------------------

def fix_import_statements(path: Path, root: Path, active: dict[str, str],
                          moving: set[str]) -> bool:
    """Make relative imports that cross a move absolute, and split ``from P import a, b``
    whose names end up in different packages. Rewrites the file in place."""
    src = path.read_text()
    try:
        tree = ast.parse(src)
    except SyntaxError:
        print(f"warning: cannot parse {rel(path, root)}; its imports were not checked")
        return False
    here, init = module_of(path, root)
    file_moves = affected(here, active) or here in moving
    lines = src.splitlines(keepends=True)
    edits: list[tuple[int, int, int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        target = (absolute(node.module, node.level, here, init) if node.level
                  else node.module or "")
        if not target.startswith("orchestrator"):
            continue
        subs = [f"{target}.{a.name}" for a in node.names]
        touches = affected(target, active) or any(affected(s, active) for s in subs)
        if node.level and not (touches or file_moves):
            continue  # a relative import inside a package that stays together
        if not touches and not node.level:
            continue
        # Group the names by the module they will be imported from.
        groups: dict[str, list[str]] = {}
        for a, sub in zip(node.names, subs, strict=True):
            local = a.asname or a.name
            if affected(sub, active) and sub in _modules(active):
                new = map_name(sub, active)
                parent, leaf = new.rsplit(".", 1)
                parent = NEW_MARK + parent  # already new: the text rewrite must skip it
                alias = leaf if leaf == local else f"{leaf} as {local}"
                groups.setdefault(parent, []).append(alias)
            else:
                groups.setdefault(target, []).append(
                    a.name if a.asname is None else f"{a.name} as {a.asname}")
        if not node.level and len(groups) == 1 and next(iter(groups)) == target:
            continue  # plain text substitution handles it
        indent = re.match(r"\s*", lines[node.lineno - 1]).group(0)
        stmts = [f"from {mod} import {', '.join(names)}" for mod, names in groups.items()]
        edits.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset,
                      ("\n" + indent).join(stmts)))
    if not edits:
        return False
    for l0, c0, l1, c1, text in sorted(edits, reverse=True):
        head = lines[l0 - 1][:c0]
        tail = lines[l1 - 1][c1:]
        lines[l0 - 1: l1] = [head + text + tail]
    path.write_text("".join(lines))
    return True


# Marks a name written in the new namespace before the text rewrite runs (a word
# character before it keeps the dotted-name regex off it); removed by that rewrite.
NEW_MARK = "RSNEW_"
_MODULE_CACHE: dict[int, set[str]] = {}


def _modules(active: dict[str, str]) -> set[str]:
    """Every module name under the active moves (files of moved packages included)."""
    return _MODULE_CACHE.get(id(active), set())


def index_modules(root: Path, active: dict[str, str]) -> None:
    names = set(active)
    for old in active:
        p = mod_path(root, old)
        if p.is_dir():
            for f in p.rglob("*.py"):
                m, _ = module_of(f, root)
                names.add(m)
    _MODULE_CACHE[id(active)] = names


# --- text rewriting --------------------------------------------------------------------

def build_rewriter(active: dict[str, str], root: Path):
    olds = sorted(active, key=len, reverse=True)
    dotted = re.compile(r"(?<![\w.])(" + "|".join(re.escape(o) for o in olds) + r")(?![\w])")
    path_map: dict[str, str] = {}
    for old, new in active.items():
        o, n = old.replace(".", "/"), new.replace(".", "/")
        if is_package_move(old):
            path_map[o + "/"] = n + "/"
            path_map[o] = n  # a folder named without its slash
        else:
            path_map[o + ".py"] = n + ".py"
    keys = sorted(path_map, key=len, reverse=True)
    slashed = re.compile(r"(?<![\w/.-])(" + "|".join(
        re.escape(k) + ("" if k.endswith("/") else r"(?![\w])") for k in keys) + ")")

    def rewrite(text: str) -> str:
        text = dotted.sub(lambda m: active[m.group(1)], text)
        text = slashed.sub(lambda m: path_map[m.group(1)], text)
        return text.replace(NEW_MARK, "")
    return rewrite


def tracked_text_files(root: Path) -> list[Path]:
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard"],
                         check=True, capture_output=True, text=True).stdout.split("\n")
    files = []
    for name in out:
        if not name or name.startswith(SKIP_DIRS):
            continue
        p = root / name
        if not p.is_file() or p.suffix not in TEXT_SUFFIXES:
            continue
        try:
            p.read_text()
        except UnicodeDecodeError:
            continue
        files.append(p)
    return files


def mark_long_lines(path: Path, root: Path, long: list[int]) -> list[str]:
    """A line the rewrite made longer than ruff allows gets ``# noqa: E501`` where a
    comment can go (the line ends in code); the others (inside a docstring or string
    spanning lines, or with a comment already) are returned for a person to wrap."""
    src = path.read_text()
    lines = src.splitlines(keepends=True)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(src).readline))
    except (tokenize.TokenError, SyntaxError):
        return [f"{rel(path, root)}:{i}" for i in long]
    inside: set[int] = set()  # lines whose end lies inside a string token
    commented: set[int] = set()
    for tok in tokens:
        if tok.type == tokenize.STRING or tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            inside.update(range(tok.start[0], tok.end[0]))
        elif tok.type == tokenize.COMMENT:
            commented.add(tok.start[0])
    left = []
    for i in long:
        if i in inside or i in commented:
            left.append(f"{rel(path, root)}:{i}")
        else:
            body = lines[i - 1].rstrip("\n")
            lines[i - 1] = body + "  # noqa: E501" + lines[i - 1][len(body):]
    path.write_text("".join(lines))
    return left


# --- import-linter ---------------------------------------------------------------------

CONTRACTS = '''
# The layers of the code, checked by `lint-imports` (import-linter; `make lint` runs it).
# Function-local and TYPE_CHECKING imports count: import-linter reads every import
# statement. An import that breaks a contract today is listed in its ignore_imports with
# why; each is work left for issue 27 (items 2, 3 and 5) and should go as that lands.
[tool.importlinter]
root_packages = ["orchestrator", "search", "trainers"]
include_external_packages = true

[[tool.importlinter.contracts]]
name = "orchestrator's layers, top to bottom"
type = "layers"
containers = ["orchestrator"]
# "a : b" are siblings in one layer that may import each other.
layers = ["commands : slurm", "projections", "engine", "spec : planning", "backends", "journal"]
unmatched_ignore_imports_alerting = "warn"
ignore_imports = [
    # Item 2 (one run path): the driver starts the MLflow projector itself.
    "orchestrator.engine.workflow -> orchestrator.projections.projector",
    # Item 3 (reporting per kind with the projections): a kind draws its own tables and
    # plots, names its product and loads its model, while the projections ask the kind
    # (the circle {kinds, predict, products, tables}).
    "orchestrator.engine.kinds -> orchestrator.projections.products",
    "orchestrator.engine.kinds -> orchestrator.projections.tables",
    "orchestrator.engine.kinds.* -> orchestrator.projections.plots",
    "orchestrator.engine.kinds.* -> orchestrator.projections.products",
    "orchestrator.engine.kinds.* -> orchestrator.projections.tables",
    # Item 5 (settings declared once): the spec validates a stage through its kind
    # (KINDS, stage_kind), and the plan report names each stage's kind.
    "orchestrator.spec.model -> orchestrator.engine.kinds",
    "orchestrator.spec.checks -> orchestrator.engine.kinds",
    "orchestrator.spec.leaks -> orchestrator.engine.kinds",
    "orchestrator.planning._report -> orchestrator.engine.kinds",
    # Item 2: the simulated cluster raises the engine's stop request at a time limit.
    "orchestrator.backends.simulated.backend -> orchestrator.engine.stopping",
    # Issue 30 (on its way to main): run/resume refuse a GPU node whose torch or Horovod
    # build cannot use its GPUs, with `nestor doctor`'s probe; the probe belongs with
    # the Ray backend (item 2).
    "orchestrator.engine.workflow -> orchestrator.commands.doctor",
]

[[tool.importlinter.contracts]]
name = "only the Ray backend imports Ray"
type = "forbidden"
source_modules = ["orchestrator", "search", "trainers"]
forbidden_modules = ["ray"]
allow_indirect_imports = true
unmatched_ignore_imports_alerting = "warn"
ignore_imports = [
    "orchestrator.backends.ray.** -> ray",
    # Item 2: run_workflow wires Ray itself (ray.init, the cluster's slots).
    "orchestrator.engine.workflow -> ray",
    # `nestor doctor` asks each node of a running cluster for its torch and Horovod
    # builds (issue 30, on its way to main; item 2 moves the probe to backends/ray/).
    "orchestrator.commands.doctor -> ray",
    # Inside a Slurm job, each node's helper waits for the Ray cluster it started.
    "orchestrator.slurm.node -> ray",
    # A gang's ranks are Ray actors, and their side of it runs the trainer's code:
    # trainers/rank_actor.py (the node id, the GPU ids Ray gave the rank) and
    # trainers/_launch.py (the gang's rendezvous through Ray's internal key-value store).
    "trainers.rank_actor -> ray",
    "trainers._launch -> ray",
]

[[tool.importlinter.contracts]]
name = "only the projections import MLflow"
type = "forbidden"
source_modules = ["orchestrator.commands", "orchestrator.engine", "orchestrator.journal",
                  "orchestrator.backends", "orchestrator.spec", "orchestrator.planning",
                  "orchestrator.slurm", "search", "trainers"]
forbidden_modules = ["mlflow"]
allow_indirect_imports = true

[[tool.importlinter.contracts]]
name = "search is pure: no Ray, MLflow, torch, Horovod, orchestrator or trainers"
type = "forbidden"
source_modules = ["search"]
forbidden_modules = ["ray", "mlflow", "torch", "horovod", "orchestrator", "trainers"]

[[tool.importlinter.contracts]]
name = "trainers import neither search nor MLflow nor the orchestrator"
type = "forbidden"
source_modules = ["trainers"]
forbidden_modules = ["search", "mlflow", "orchestrator"]

[[tool.importlinter.contracts]]
name = "the projections never reach into a backend"
type = "forbidden"
source_modules = ["orchestrator.projections"]
forbidden_modules = ["orchestrator.backends", "ray"]
allow_indirect_imports = true
unmatched_ignore_imports_alerting = "warn"
ignore_imports = [
    # gangs.first_line (the first line of an error message) is a text helper.
    "orchestrator.projections.projector -> orchestrator.backends.ray.gangs",
]

[[tool.importlinter.contracts]]
name = "the two backends know nothing of each other"
type = "independence"
modules = ["orchestrator.backends.ray", "orchestrator.backends.simulated"]
unmatched_ignore_imports_alerting = "warn"
ignore_imports = [
    # Item 2: the Backend interface and the simulated cluster use the Ray module's
    # Shape (and its place()); Shape belongs in backends/_base.py.
    "orchestrator.backends._base -> orchestrator.backends.ray.gangs",
    "orchestrator.backends.simulated.backend -> orchestrator.backends.ray.gangs",
]
'''


def add_import_linter(root: Path) -> None:
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    m = re.search(r"^test = \[(.*?)\]", text, re.MULTILINE)
    if m and "import-linter" not in m.group(1):
        text = text[: m.end(1)] + f', "{IMPORT_LINTER[0]}"' + text[m.end(1):]
    if "[tool.importlinter]" not in text:
        text = text.rstrip("\n") + "\n" + CONTRACTS
    pyproject.write_text(text)

    lock = root / "requirements.lock"
    if lock.exists():
        lines = lock.read_text().splitlines()

        def key(line: str) -> str:
            return line.split("==")[0].lower().replace("_", "-")
        for pin in IMPORT_LINTER:
            if any(key(line) == key(pin) for line in lines):
                continue
            # Before the first pin that sorts after it; the others keep their order.
            at = next((i for i, line in enumerate(lines) if line and not line.startswith("#")
                       and key(line) > key(pin)), len(lines))
            lines.insert(at, pin)
        lock.write_text("\n".join(lines) + "\n")

    ignore = root / ".gitignore"
    if ignore.exists() and ".import_linter_cache" not in ignore.read_text():
        ignore.write_text(ignore.read_text().rstrip("\n") + "\n.import_linter_cache/\n")

    makefile = root / "Makefile"
    mk = makefile.read_text()
    if "lint-imports" not in mk:
        mk = mk.replace("\t$(VENV)/bin/ruff check .\n",
                        "\t$(VENV)/bin/ruff check .\n\t$(VENV)/bin/lint-imports\n", 1)
        makefile.write_text(mk)


# --- main ------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", type=Path)
    ap.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    ap.add_argument("--ruff", default=None, help="ruff to sort imports with (default: PATH)")
    ap.add_argument("--also", type=Path, nargs="*", default=[],
                    help="text files outside the checkout to rewrite too (e.g. shared/DESIGN.md)")
    args = ap.parse_args()
    root = args.checkout.resolve()
    orch = root / "orchestrator"
    if not orch.is_dir():
        print(f"checkout must hold orchestrator/, but {root} does not")
        return 2

    active = {old: new for old, new in MOVES.items() if mod_path(root, old).exists()}
    done = {old for old in MOVES if old not in active and mod_path(root, MOVES[old]).exists()}
    missing = set(MOVES) - set(active) - done
    print(f"moves to make: {len(active)}; already made: {len(done)}")
    for old in sorted(missing):
        print(f"note: {old} is neither at its old nor its new place; skipped")
    for old, new in sorted(active.items()):
        print(f"  {rel(mod_path(root, old), root):40s} -> {new}")

    # New top-level modules and packages that no rule places.
    known_top = {m.split(".")[1] for m in MOVES} | KEPT | {
        p.split("/")[1] for p in NEW_PACKAGES} | {"__init__", "__pycache__"}
    unplaced = sorted(p.name for p in orch.iterdir()
                      if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))
                      and p.stem not in known_top)
    if args.dry_run:
        for u in unplaced:
            print(f"unplaced: orchestrator/{u}")
        return 0

    if active:
        index_modules(root, active)
        moving = _modules(active)
        # 1-2: import statements, before any file moves (paths are the old ones).
        for p in orch.rglob("*.py"):
            if fix_import_statements(p, root, active, moving):
                print(f"  imports restated in {rel(p, root)}")
        for p in tracked_text_files(root):
            if p.suffix == ".py" and not p.is_relative_to(orch):
                fix_import_statements(p, root, active, moving)
        # 3: git mv, then the new packages' __init__ files.
        # Packages first: a file may move into a package's new folder (combine -> kinds/).
        for old, new in sorted(active.items(), key=lambda kv: not is_package_move(kv[0])):
            src = mod_path(root, old)
            dst = mod_path(root, new)
            dst.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "-C", str(root), "mv", rel(src, root), rel(dst, root)],
                           check=True)
        for pkg, doc in NEW_PACKAGES.items():
            init = root / pkg / "__init__.py"
            if (root / pkg).is_dir() and not init.exists():
                init.write_text(f'"""{doc}\n"""\n')
                subprocess.run(["git", "-C", str(root), "add", rel(init, root)], check=True)
        # 4: names and paths everywhere.
        rewrite = build_rewriter(active, root)
        changed = []
        for p in [*tracked_text_files(root), *(a.resolve() for a in args.also)]:
            text = p.read_text()
            new = rewrite(text)
            if new != text:
                p.write_text(new)
                changed.append(p)
        print(f"rewrote references in {len(changed)} files")
        # Files that compute paths from where they are.
        for new in active.values():
            for f in ([mod_path(root, new)] if not mod_path(root, new).is_dir()
                      else list(mod_path(root, new).rglob("*.py"))):
                if f.exists() and "__file__" in f.read_text():
                    print(f"check: {rel(f, root)} uses __file__ and moved one level deeper")
        # 5: import order.
        local = root / ".venv" / "bin" / "ruff"
        ruff = args.ruff or shutil.which("ruff") or (str(local) if local.exists() else None)
        py = [str(p) for p in changed if p.suffix == ".py" and p.is_relative_to(root)] + [
            str(p) for p in orch.rglob("*.py")]
        if ruff:
            subprocess.run([ruff, "check", "--select", "I", "--fix", "--quiet", *py],
                           cwd=root, check=False)
            # Lines that ruff finds too long now (ruff itself says which: it lets a few
            # long lines pass, e.g. one long word).
            report = subprocess.run([ruff, "check", "--select", "E501", "--output-format",
                                     "concise", "--quiet", *py], check=False, cwd=root,
                                    capture_output=True, text=True).stdout
            long: dict[str, list[int]] = {}
            for m in re.finditer(r"^(.+?):(\d+):\d+: E501", report, re.MULTILINE):
                long.setdefault(m.group(1), []).append(int(m.group(2)))
            for name, numbers in long.items():
                for where in mark_long_lines((root / name).resolve(), root, numbers):
                    print(f"too long after the rewrite, wrap by hand: {where}")
        else:
            print("warning: no ruff found; import order not fixed (ruff check --select I --fix)")

    # 6: import-linter.
    add_import_linter(root)
    # The checks a person would run next, where the tools are at hand.
    for tool, argv in (("ruff", ["check", "."]), ("lint-imports", [])):
        local = root / ".venv" / "bin" / tool
        exe = (args.ruff if tool == "ruff" else None) or shutil.which(tool) or (
            str(local) if local.exists() else None)
        if exe:
            result = subprocess.run([exe, *argv], cwd=root, capture_output=True, text=True,
                                   check=False, env={**os.environ, "PYTHONPATH": str(root)})
            tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
            print(f"{tool}: exit {result.returncode}: " + " | ".join(tail))
    # 7: what a person must place.
    for u in unplaced:
        print(f"unplaced: orchestrator/{u} (left where it is; its imports were rewritten; "
              "add it to MOVES and run again)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

