"""A user's own modules called ``search``, ``trainers`` and ``orchestrator`` run beside nestor.

nestor's code is installed under the ``nestor`` namespace (``nestor.search``,
``nestor.trainers``, ``nestor.orchestrator``), so a training script that sits
beside its own ``search.py`` or ``trainers/`` package (common names in ML code)
runs: nestor's driver and its Ray workers import nestor's modules, the user's
function imports the user's. Before the namespace, the user's folder on
PYTHONPATH shadowed nestor's packages and ``nestor run`` failed on import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

USER_FILES = {
    # the user's own modules, named like nestor's packages
    "search.py": "WEIGHT = 2.0\n",
    "trainers/__init__.py": "def peak(x):\n    return 1.0 - (x - 0.3) ** 2\n",
    "orchestrator.py": "NAME = 'my own orchestrator'\n",
    "objective.py": textwrap.dedent("""\
        import orchestrator
        import search
        from trainers import peak


        def train(config, ctx):
            assert orchestrator.NAME == "my own orchestrator"
            return {"score": search.WEIGHT * peak(config["x"])}
        """),
    "spec.yaml": textwrap.dedent("""\
        name: clash
        resources: {slots: 1}
        stages:
          - name: tune
            kind: hpo
            trainer: {function: "objective:train"}
            space:
              x: {type: float, low: 0.0, high: 1.0}
            search: {algorithm: random, budget: 3, seed: 0}
            objective: {metric: score, mode: max}
        """),
}


@pytest.mark.slow
def test_a_function_trainer_beside_its_own_search_and_trainers_modules_runs(
        tmp_path: Path) -> None:
    user = tmp_path / "project"
    for name, text in USER_FILES.items():
        (user / name).parent.mkdir(parents=True, exist_ok=True)
        (user / name).write_text(text)
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PYTHONPATH=str(user), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run([str(bin_dir / "nestor"), "run", "spec.yaml", "--run-dir",
                           str(tmp_path / "run")], cwd=user, env=env, capture_output=True,
                          text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    stage = json.loads((tmp_path / "run" / "results.json").read_text())["stages"][0]
    trials = [t for t in stage["trials"] if t["status"] == "completed"]
    assert len(trials) == 3
    for trial in trials:  # the user's search.WEIGHT and trainers.peak made every score
        x = trial["config"]["x"]
        assert trial["value"] == pytest.approx(2.0 * (1.0 - (x - 0.3) ** 2))


def test_importing_nestor_binds_no_top_level_name_a_user_might_own(tmp_path: Path) -> None:
    """Importing nestor's CLI, searches and trainers leaves ``search``, ``trainers`` and
    ``orchestrator`` free in ``sys.modules`` (a user's own modules by those names import)."""
    code = ("import sys, nestor, nestor.orchestrator.commands.cli, nestor.search,"
            " nestor.trainers.function\n"
            "print(sorted(m for m in sys.modules"
            " if m.split('.')[0] in ('search', 'trainers', 'orchestrator')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_nestor_code_imports_its_packages_by_the_namespace_only() -> None:
    """No module of the repository imports ``search``, ``trainers`` or ``orchestrator``
    by its bare name: such an import would load a second copy of nestor's module (or
    the user's) beside ``nestor.<name>``."""
    import ast

    root = Path(__file__).resolve().parents[2]
    bare = []
    for folder in ("orchestrator", "search", "trainers", "tests", "bench", "scripts", "examples"):
        for path in (root / folder).rglob("*.py"):
            if path == Path(__file__).resolve():
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module] if isinstance(node, ast.ImportFrom) and node.module
                         and node.level == 0 else [])
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    names = _imported_in_code(node.value)  # code run by python -c, say
                bare += [f"{path.relative_to(root)}:{node.lineno} {name}" for name in names
                         if name.split(".")[0] in ("search", "trainers", "orchestrator")]
    assert not bare, bare


def _imported_in_code(text: str) -> list[str]:
    """The modules a string that holds Python code imports (``import a, b.c`` and
    ``from a import b`` statements at a line's or a statement's start)."""
    import re

    names = []
    item = r"[\w.]+(?:\s+as\s+\w+)?"
    for match in re.finditer(rf"(?:^|;|\n)\s*import ({item}(?:\s*,\s*{item})*)", text, re.M):
        names += [n.split()[0] for n in match.group(1).split(",")]
    names += re.findall(r"(?:^|;|\n)\s*from ([\w.]+) import ", text, re.M)
    return names
