"""Every search, with two objectives, either runs or is refused by `nestor validate`.

ASHA, Hyperband and PBT rank trials by one number to decide which continue, and
CMA-ES (Optuna's, and lq-CMA-ES) models one; each refuses several objectives when
the searcher is made, which used to be as the stage started: a traceback after
the stages before it had run. The table below makes each search as its stage
would, for a function trainer and a command trainer as users write them: where
the searcher refuses, validation must refuse first, at the objective's line.
"""

from __future__ import annotations

import textwrap

import pytest
import yaml

from nestor.orchestrator.spec import SpecError, load_spec_text
from nestor.orchestrator.spec.model import ALGORITHMS, SEARCH_MODELS
from nestor.search import make_searcher
from nestor.search.space import FloatParam, SearchSpace

SEARCHES = [(a, {}) for a in ALGORITHMS] + [
    ("bayesian", {"sampler": sampler}) for sampler in ("cmaes", "lq-cmaes", "gp")]
# Both save checkpoints (PBT, ASHA and Hyperband need them: spec/needs.py), so that
# what is refused here is the second objective alone.
TRAINERS = {"function": {"function": "fit_mlp:train", "settings": {"epochs": 4},
                         "checkpoints": True},
            "command": {"command": "python3 train_mlp.py", "settings": {"epochs": 4},
                        "checkpoints": True}}
OBJECTIVES = [{"metric": "val_accuracy", "mode": "max"}, {"metric": "wall_time", "mode": "min"}]


def spec_text(algorithm: str, settings: dict, trainer: dict) -> str:
    search = {"algorithm": algorithm, **settings}
    if algorithm == "auto":
        search["budget"] = 8
    stage = {"name": "tune", "kind": "hpo", "trainer": trainer, "search": search,
             "space": {"lr": {"type": "float", "low": 0.001, "high": 0.1, "log": True}},
             "objective": OBJECTIVES}
    return yaml.safe_dump({"name": "digits", "stages": [stage]}, sort_keys=False)


def searcher_refuses(algorithm: str, settings: dict) -> str | None:
    """What making the search with two objectives says, as the stage would make it."""
    model = SEARCH_MODELS[algorithm](algorithm=algorithm, **settings)
    space = SearchSpace([FloatParam("lr", 0.001, 0.1, log=True)])
    try:
        make_searcher(algorithm, space, [(o["metric"], o["mode"]) for o in OBJECTIVES],
                      **model.settings())
    except ValueError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("trainer", TRAINERS)
@pytest.mark.parametrize(("algorithm", "settings"), SEARCHES,
                         ids=[f"{a}-{s.get('sampler', '')}" for a, s in SEARCHES])
def test_a_search_of_one_objective_is_refused_two_before_anything_runs(
        algorithm: str, settings: dict, trainer: str) -> None:
    text = spec_text(algorithm, settings, TRAINERS[trainer])
    refused = searcher_refuses(algorithm, settings)
    if refused is None:
        load_spec_text(text, "spec.yaml")  # runs: nothing to refuse
        return
    assert "one" in refused  # the searcher's own reason
    with pytest.raises(SpecError) as caught:
        load_spec_text(text, "spec.yaml")
    (problem,) = [p for p in caught.value.problems if "objective" in str(p)]
    line = text.splitlines().index("  objective:") + 1
    assert problem.mark is not None and problem.mark.line == line, str(problem)
    assert "optimizes exactly one objective" in str(problem)
    assert "val_accuracy, wall_time" in str(problem) and "keep one" in str(problem)


def test_the_searches_that_refuse_two_are_the_ones_named() -> None:
    """The table is not empty: these are the searches a user meets it with."""
    refusing = {f"{a} {s.get('sampler', '')}".strip() for a, s in SEARCHES
                if searcher_refuses(a, s) is not None}
    assert refusing == {"pbt", "asha", "hyperband", "bayesian cmaes", "bayesian lq-cmaes"}


def test_one_objective_still_passes() -> None:
    text = textwrap.dedent("""
        name: digits
        stages:
          - name: tune
            kind: hpo
            trainer: {function: "fit_mlp:train", settings: {epochs: 4}, checkpoints: true}
            search: {algorithm: asha, min_budget: 1, max_budget: 4}
            space: {lr: {type: float, low: 0.001, high: 0.1, log: true}}
        """)
    assert load_spec_text(text).stage("tune").search.algorithm == "asha"
