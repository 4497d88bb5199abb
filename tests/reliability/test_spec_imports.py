"""A `module:function` trainer that cannot be imported is a spec error before any trial."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nestor.orchestrator.spec import SpecError, load_spec, load_spec_text
from nestor.orchestrator.spec.checks import function_problem

NESTOR = str(Path(sys.executable).parent / "nestor")

SPEC = """\
name: imports
resources: {{slots: 1}}
stages:
  - name: tune
    kind: hpo
    trainer: {{function: "{function}"}}
    search: {{algorithm: random, budget: 2}}
    space: {{q: {{type: float, low: 0.1, high: 0.9}}}}
"""

MODULE = textwrap.dedent("""
    import os
    open(os.environ["IMPORTED_MARKER"], "w").close()  # must never run at validation

    def train(config, ctx):
        return {"val_accuracy": config["q"]}
    """)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import os\nopen(os.environ['IMPORTED_MARKER'], 'w').close()\n")
    (package / "fit.py").write_text(MODULE)
    (tmp_path / "flat.py").write_text(MODULE)
    return tmp_path


def _env(project: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(project),
                IMPORTED_MARKER=str(project / "imported"))


@pytest.mark.parametrize(("function", "words"), [
    ("nosuchmodule_xyz:train", ["no module named 'nosuchmodule_xyz'", "PYTHONPATH"]),
    ("mypkg.nosuch:train", ["no module named 'mypkg.nosuch'"]),
    ("mypkg.fit:trian", ["defines no 'trian'", "did you mean 'train'"]),
    ("flat.sub:train", ["no module named 'flat.sub'"]),
])
def test_validate_and_run_name_the_line_and_start_nothing(project: Path, function: str,
                                                          words: list[str]) -> None:
    spec = project / "bad.yaml"
    spec.write_text(SPEC.format(function=function))
    env = _env(project)
    for args in (["validate", str(spec)], ["run", str(spec), "--run-dir", str(project / "run")]):
        result = subprocess.run([NESTOR, *args], capture_output=True, text=True, env=env,
                                timeout=120, check=False)
        assert result.returncode == 2, result.stderr
        assert f"{spec}:6:" in result.stderr and "stages[0].trainer.function" in result.stderr
        for word in words:
            assert word in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert not (project / "run" / "journal.jsonl").exists()  # no trial, not even a start
    assert not (project / "imported").exists()  # validation ran none of the user's code


def test_an_importable_function_passes_without_running_the_module(project: Path,
                                                                 monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(project))
    spec = project / "good.yaml"
    for function in ("mypkg.fit:train", "flat:train", "os.path:join"):
        spec.write_text(SPEC.format(function=function))
        load_spec(spec)
    assert not (project / "imported").exists()
    result = subprocess.run([NESTOR, "validate", "-q", str(spec)], capture_output=True,
                            text=True, env=_env(project), timeout=120, check=False)
    assert result.returncode == 0, result.stderr


def test_a_spec_in_memory_is_not_checked_against_this_python() -> None:
    load_spec_text(SPEC.format(function="elsewhere.pkg:train"))  # meant for another machine
    with pytest.raises(SpecError, match="no module named 'elsewhere'"):
        load_spec_text(SPEC.format(function="elsewhere.pkg:train"), imports=True)


def test_names_defined_under_guards_and_imports_count(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "guarded.py").write_text(textwrap.dedent("""
        try:
            from math import sqrt as train
        except ImportError:
            def train(config, ctx): ...
        if True:
            other = lambda config, ctx: None
        """))
    (tmp_path / "broken.py").write_text("def train(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert function_problem("guarded:train") is None
    assert function_problem("guarded:other") is None
    assert "defines no 'missing'" in function_problem("guarded:missing")
    assert "not valid Python" in function_problem("broken:train")


def test_a_function_in_folders_without_init_files_is_found(tmp_path: Path, monkeypatch) -> None:
    """Folders without ``__init__.py`` (namespace packages) nest as users' projects do:
    found, and a typo in them named, where a nested one once raised a bare KeyError."""
    (tmp_path / "project" / "models").mkdir(parents=True)
    (tmp_path / "project" / "models" / "fit.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("IMPORTED_MARKER", str(tmp_path / "imported"))
    load_spec_text(SPEC.format(function="project.models.fit:train"), imports=True)
    with pytest.raises(SpecError, match="defines no 'trian'; did you mean 'train'"):
        load_spec_text(SPEC.format(function="project.models.fit:trian"), imports=True)
    with pytest.raises(SpecError, match=r"no module named 'project\.models\.nofit'"):
        load_spec_text(SPEC.format(function="project.models.nofit:train"), imports=True)
    assert not (tmp_path / "imported").exists()
