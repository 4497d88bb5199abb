"""A stage's needs of its trainer (orchestrator/spec/needs.py): a function or command
trainer that declares checkpoints and predictions may run every stage a built-in
one may; one that does not is refused (the refusals are in bad/, with their lines)."""

from __future__ import annotations

import textwrap

import pytest

from nestor.orchestrator.spec import SpecError, load_spec_text

TRAINERS = {
    "builtin": "{name: mlp, settings: {epochs: 3}}",
    "function": '{function: "mypkg.fit:train", settings: {epochs: 3}, checkpoints: true,'
                ' predictions: true}',
    "command": '{command: "python3 fit.py", settings: {epochs: 3}, checkpoints: true,'
               ' predictions: true}',
}
SEARCHES = {
    "pbt": "{algorithm: pbt, population: 2, interval: 1, intervals: 3}",
    "pb2": "{algorithm: pbt, population: 2, interval: 1, intervals: 3, explore: pb2}",
    "asha": "{algorithm: asha, min_budget: 1, max_budget: 3}",
    "bohb": "{algorithm: hyperband, min_budget: 1, max_budget: 3, sampler: tpe}",
}
LATER = """
  - {name: final, kind: train, from: [tune], data: train+val}
  - {name: members, kind: ensemble, from: [tune], members: 2}
  - name: moved
    kind: transfer
    from: [tune]
    source: {dataset: digits, classes: [0, 1, 2]}
    target: {dataset: digits, classes: [3, 4, 5]}
"""


def spec(trainer: str, search: str) -> str:
    return textwrap.dedent(f"""
        name: needs
        stages:
          - name: tune
            kind: hpo
            trainer: {trainer}
            search: {search}
            space: {{lr: {{type: float, low: 0.01, high: 0.1}}}}
            objective: {{metric: val_accuracy, mode: max}}
        """) + LATER


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("kind", TRAINERS)
def test_a_trainer_that_gives_checkpoints_and_predictions_runs_every_stage(kind, search):
    workflow = load_spec_text(spec(TRAINERS[kind], SEARCHES[search]))
    assert [s.name for s in workflow.stages] == ["tune", "final", "members", "moved"]


@pytest.mark.parametrize("kind", ["function", "command"])
@pytest.mark.parametrize("search", SEARCHES)
def test_an_undeclared_user_trainer_is_refused_for_each_stage_that_needs_more(kind, search):
    trainer = TRAINERS[kind].replace(", checkpoints: true", "").replace(
        ", predictions: true", "")
    with pytest.raises(SpecError) as caught:
        load_spec_text(spec(trainer, SEARCHES[search]))
    found = {p.path: p.message for p in caught.value.problems}
    name = {"pbt": "PBT", "pb2": "PB2", "asha": "ASHA", "bohb": "BOHB"}[search]
    assert f"{name} needs checkpoints" in found["stages[0].search.algorithm"]
    if search in ("pbt", "pb2"):  # the train stage replays its schedule
        assert "replaying a PBT schedule needs checkpoints" in found["stages[1].from"]
    else:
        assert "stages[1].from" not in found
    assert "an ensemble needs predictions" in found["stages[2].kind"]
    assert "transfer needs checkpoints" in found["stages[3].kind"]
    assert all(p.mark is not None for p in caught.value.problems)


def test_a_random_search_needs_nothing_of_a_user_trainer():
    load_spec_text(spec('{command: "python3 fit.py"}', "{algorithm: random, budget: 4}")
                   .split("\n  - {name: members")[0])


def test_a_sweep_of_a_command_says_it_saves_checkpoints_with_a_flag():
    from nestor.orchestrator.commands.sweep import build_spec, spec_yaml

    def sweep(**options: object) -> dict:
        return build_spec(trainer=None, command="python3 fit.py", params=["x=float:0:1"],
                          settings=[], algorithm="pbt", budget=None, metric=None, mode="max",
                          result_pattern=None, dp=1, mp=1, parallel=None, slots=None, seed=0,
                          **options)

    with pytest.raises(ValueError, match=r"--algorithm pbt continues trials from their checkpoints"
                                         r".*give --checkpoints to say it does"):
        sweep()
    spec = sweep(checkpoints=True)
    assert spec["stages"][0]["trainer"]["checkpoints"] is True
    load_spec_text(spec_yaml(spec))
