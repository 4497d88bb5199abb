"""`when:` and `search.constraints` in a spec: the space they build, a constraint
written as a Python function, and a function that cannot be imported refused at its
line before anything runs."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from nestor.orchestrator.spec import SpecError, load_spec
from nestor.search import make_searcher

SPEC = textwrap.dedent("""
    name: cond
    stages:
      - name: hpo
        kind: hpo
        trainer: {function: "condmod:train"}
        search:
          algorithm: genetic
          population: 6
          generations: 3
          constraints:
            - "lr * layers <= 0.5"
            - {function: "condmod:FUNCTION"}
        space:
          optimizer: [adam, sgd]
          lr: {type: float, low: 0.001, high: 0.5, log: true}
          momentum: {type: float, low: 0.0, high: 0.99, when: {optimizer: sgd}}
          nesterov: {type: categorical, values: [true, false], when: {optimizer: sgd}}
          dampening: {type: float, low: 0.0, high: 0.5, when: {nesterov: false}}
          layers: {type: int, low: 1, high: 4}
        objective: {metric: loss, mode: min}
    """)
MODULE = textwrap.dedent("""
    def train(config, ctx):
        return {"loss": 0.0}

    def momentum_small(config):
        return config.get("momentum", 0.0) <= 0.5
    """)


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "condmod.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("condmod", None)


def test_a_spec_builds_a_nested_conditional_space_with_both_kinds_of_constraint(
        module_dir: Path) -> None:
    path = module_dir / "spec.yaml"
    path.write_text(SPEC.replace("FUNCTION", "momentum_small"))
    stage = load_spec(path).stages[0]
    space = stage.search_space()
    assert space.condition("dampening") == (("nesterov", (False,)),)
    assert [c.text for c in space.constraints] == ["lr * layers <= 0.5",
                                                   "condmod:momentum_small"]
    searcher = make_searcher("genetic", space, [("loss", "min")], **stage.search.settings())
    seen = []
    while not searcher.done():
        for trial in searcher.ask(3):
            seen.append(trial.config)
            searcher.tell(trial.id, trial.config["lr"])
    assert seen and all(space.contains(c) for c in seen)
    assert all(c.get("momentum", 0.0) <= 0.5 and c["lr"] * c["layers"] <= 0.5 for c in seen)
    assert {frozenset(c) for c in seen} != {frozenset(space.names)}  # projected


def test_a_constraint_function_that_cannot_be_imported_is_refused_at_its_line(
        module_dir: Path) -> None:
    path = module_dir / "spec.yaml"
    path.write_text(SPEC.replace("FUNCTION", "momentum_smal"))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    problem = next(p for p in caught.value.problems if "momentum_smal" in str(p))
    assert "did you mean 'momentum_small'" in str(problem)
    line = next(i for i, text in enumerate(SPEC.splitlines(), start=1)
                if '{function: "condmod:FUNCTION"}' in text)
    assert problem.mark is not None and problem.mark.line == line
