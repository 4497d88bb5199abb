"""User text is printed as it is, never read as rich markup.

A spec file ``[/bold]x.yaml``, a run directory ``runs/[/x]`` or a categorical value
``[/a]`` crashed the command with rich's MarkupError after the run had finished
(exit 1 after ``workflow_finished``), and `results`/`status` crashed from then on;
``[red]x`` silently printed as ``x``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

NESTOR = str(Path(sys.executable).parent / "nestor")
FIT = """\
import sys
flags = dict(arg[2:].split("=", 1) for arg in sys.argv[1:])
print("FoM:", 0.0 if flags["c"] == "[/a]" else 1.0)
"""
SPEC = """\
name: brackets
stages:
  - name: tune
    kind: hpo
    trainer: {{command: ["{python}", "{fit}"]}}
    search: {{algorithm: grid, budget: 2}}
    space:
      c: {{type: categorical, values: ["[/a]", "b"]}}
      note: "[red]x"
    objective: {{metric: fom, mode: min}}
"""


def nestor(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NESTOR, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          check=False, timeout=600, env=dict(os.environ, COLUMNS="200"))


def literal(done: subprocess.CompletedProcess[str]) -> str:
    assert "MarkupError" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    return " ".join((done.stdout + done.stderr).split())  # a table may wrap a long cell


def spec_in(tmp_path: Path, name: str) -> Path:
    (tmp_path / "fit.py").write_text(FIT)
    spec = tmp_path / name
    spec.parent.mkdir(parents=True, exist_ok=True)  # "[/bold]x.yaml" is x.yaml in "[/bold]"
    spec.write_text(SPEC.format(python=sys.executable, fit=tmp_path / "fit.py"))
    return spec


def test_validate_prints_a_spec_path_with_brackets_literally(tmp_path: Path) -> None:
    spec_in(tmp_path, "[/bold]x.yaml")
    done = nestor("validate", "[/bold]x.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "ok [/bold]x.yaml: workflow brackets" in literal(done)


def test_an_error_about_a_bracketed_file_names_it_literally(tmp_path: Path) -> None:
    (tmp_path / "[red]bad.yaml").write_text("name: brackets\nstages: 3\n")
    done = nestor("validate", "[red]bad.yaml", cwd=tmp_path)
    assert done.returncode == 2
    assert "error: [red]bad.yaml:2" in literal(done)


@pytest.mark.slow
def test_a_run_with_brackets_in_its_path_and_values_prints_them_literally(tmp_path: Path) -> None:
    spec_in(tmp_path, "[/bold]x.yaml")
    run = Path("runs/[/x]")
    done = nestor("run", "[/bold]x.yaml", "--run-dir", run, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = literal(done)
    assert "best of tune" in out and "c=[/a]" in out and "note=[red]x" in out, out
    assert "run directory: runs/[/x]" in out
    results = nestor("results", run, cwd=tmp_path)
    assert results.returncode == 0, results.stderr
    assert "c=[/a]" in literal(results) and "note=[red]x" in literal(results)
    status = nestor("status", run, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert "runs/[/x]: finished" in literal(status)
