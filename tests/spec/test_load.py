"""Valid specs load into the typed objects they describe."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nestor.orchestrator.commands.cli import cli
from nestor.orchestrator.spec import HpoStage, SpecError, load_spec, load_spec_text
from nestor.orchestrator.spec.model import GeneticSearch
from nestor.search.space import CategoricalParam, ConstantParam, FloatParam, IntParam

CONFIGS = sorted((Path(__file__).parents[2] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_config_validates(path: Path) -> None:
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    workflow = load_spec(path)
    for stage in workflow.stages:
        assert stage.name in result.output


def test_issue_example_means_what_it_says() -> None:
    workflow = load_spec(Path(__file__).parents[2] / "configs" / "mnist-combined-full.yaml")
    assert workflow.name == "mnist-combined"
    assert workflow.tracking.experiment == "mnist-combined" and workflow.tracking.uri is None
    assert workflow.resources.slots == 2
    assert workflow.order() == ["tune", "members", "finetune"]
    tune = workflow.stage("tune")
    assert isinstance(tune, HpoStage)
    assert (tune.parallel.data, tune.parallel.model) == (2, 1)
    assert isinstance(tune.search, GeneticSearch)
    assert tune.search.schedule == "async" and tune.search.demes == 2
    assert tune.planned_trials() == 8 * 5
    space = tune.search_space()
    assert space["lr"] == FloatParam("lr", 1e-4, 0.3, log=True)
    assert space["batch_size"] == IntParam("batch_size", 16, 256, log=True)
    assert space["activation"] == CategoricalParam("activation", ("relu", "tanh", "gelu"))
    assert space["momentum"] == ConstantParam("momentum", 0.9)
    (objective,) = tune.objectives
    assert (objective.metric, objective.mode, objective.threshold) == ("val_accuracy", "max", 0.97)
    assert (tune.trial.timeout, tune.trial.retries) == (600, 1)
    members = workflow.stage("members")
    assert members.from_ == ["tune"] and members.combine == "greedy"
    # Stages without a trainer inherit it, and the shape of their trials, from `from:`.
    assert workflow.trainer_of("members").name == "cnn"
    assert workflow.parallel_of("finetune").ranks == 2
    finetune = workflow.stage("finetune")
    assert finetune.source.classes == [0, 1, 2, 3, 4] and finetune.freeze == []
    # A target with little data: the case transfer is for (README, "When transfer helps").
    assert finetune.target.settings == {"max_train_samples": 100, "epochs": 3}
    assert finetune.lr_scale == 0.5 and finetune.config == {"batch_size": 16}


def test_validate_prints_the_plan() -> None:
    path = Path(__file__).parents[2] / "configs" / "mnist-combined-full.yaml"
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0
    rows = {line.split()[1]: line.split() for line in result.output.splitlines()
            if line.strip()[:1].isdigit()}
    # trials planned (population 8 x 5 generations), ranks per trial, trials at once
    assert rows["tune"][-4:] == ["40", "2", "(2x1)", "1"]
    assert rows["members"][-4:] == ["3", "2", "(2x1)", "1"]
    assert "slots: 2 (resources.slots)" in result.output


SINE_FIT = """
name: sinefit
stages:
  - name: fit
    kind: hpo
    trainer: {command: "python3 fit.py"}
    search: {algorithm: auto, budget: BUDGET PARALLEL}
    objective: {metric: fom, mode: min}
    space:
      -a: {type: float, low: -1, high: 1}
      -b: {type: float, low: -1, high: 1}
      -c: {type: float, low: -1, high: 1}
      -d: {type: float, low: -1, high: 1}
      -e: {type: float, low: -1, high: 1}
"""


def sine_fit(budget: int, parallel: int | None = None) -> str:
    extra = f", parallel: {parallel}" if parallel else ""
    return SINE_FIT.replace("BUDGET", str(budget)).replace(" PARALLEL", extra)


def test_auto_search_loads_and_plans_what_it_picks() -> None:
    from nestor.orchestrator.spec.model import AutoSearch

    stage = load_spec_text(sine_fit(300)).stage("fit")
    assert isinstance(stage.search, AutoSearch)
    assert stage.auto_choice().label() == "bayesian lq-cmaes"
    assert stage.planned_trials() == 300
    stage = load_spec_text(sine_fit(300, parallel=8)).stage("fit")
    assert stage.auto_choice().label() == "bayesian cmaes"
    stage = load_spec_text(sine_fit(300, parallel=32)).stage("fit")
    assert stage.auto_choice().label() == "bayesian lq-cmaes, async"
    stage = load_spec_text(sine_fit(300, parallel=64)).stage("fit")
    assert stage.auto_choice().label() == "genetic async 16"
    grid = load_spec_text(
        sine_fit(50).replace("-a: {type: float, low: -1, high: 1}", "-a: [1, 2, 3]")
    ).stage("fit")
    assert grid.auto_choice().label() == "bayesian tpe"  # the floats are still searched


def test_validate_prints_what_auto_picked_and_why(tmp_path: Path) -> None:
    path = tmp_path / "sinefit.yaml"
    path.write_text(sine_fit(130))
    result = CliRunner().invoke(cli, ["validate", "--slots", "8", str(path)])
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    # no search.parallel: auto plans for the 8 trials 8 slots run at once (issue 44)
    assert "auto: genetic async 10" in output
    assert "fit: auto picked genetic async 10: 5 numeric parameters and a budget of 130" in output
    assert "planned for 8 trials at once (8 slots (--slots) / 1 rank a trial)" in output
    path.write_text(sine_fit(130, parallel=2))
    result = CliRunner().invoke(cli, ["validate", "--slots", "8", str(path)])
    output = " ".join(result.output.split())
    assert ("fit: auto picked bayesian lq-cmaes: 5 numeric parameters, one objective and 2"
            " trial(s) at once") in output
    assert "planned for 2 trials at once (search.parallel)" in output


def test_auto_search_takes_only_its_settings(tmp_path: Path) -> None:
    path = tmp_path / "sinefit.yaml"
    path.write_text(sine_fit(130).replace("budget: 130", "budget: 130, population: 8"))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2
    assert "population" in result.output


MINIMAL = """
name: demo
defaults: &defaults {name: mlp, settings: {dataset: digits, epochs: 1}}
stages:
  - name: sweep
    kind: hpo
    trainer: *defaults
    search: {algorithm: grid, points: {lr: 4}}
    space:
      lr: {type: float, low: 1e-4, high: 1e-1, log: true}
      width: {type: int, low: 16, high: 18}
      activation: [relu, tanh]
      momentum: 0.9
"""


def test_shorthand_exponents_and_anchors() -> None:
    workflow = load_spec_text(MINIMAL.replace("defaults: &defaults", "x-defaults: &defaults"))
    stage = workflow.stage("sweep")
    space = stage.search_space()
    assert space["lr"] == FloatParam("lr", 1e-4, 1e-1, log=True)  # 1e-4 is a float, not a string
    assert space["activation"] == CategoricalParam("activation", ("relu", "tanh"))
    assert space["momentum"] == ConstantParam("momentum", 0.9)
    assert stage.trainer.name == "mlp" and stage.trainer.settings["dataset"] == "digits"
    # grid: 4 lr points x 3 widths (16..18) x 2 activations
    assert stage.planned_trials() == 24


def test_unknown_top_level_key_even_for_anchors() -> None:
    with pytest.raises(SpecError, match="unknown field 'defaults'"):
        load_spec_text(MINIMAL)


def test_command_trainer_is_an_argument_vector() -> None:
    workflow = load_spec_text(
        """
name: demo
stages:
  - name: sweep
    kind: hpo
    trainer: {command: "python3 'my fit.py' --fixed=1", result_pattern: "acc=(\\\\S+)",
              flag_prefix: "-"}
    search: {algorithm: random, budget: 5}
    space: {"-a": {type: float, low: 0, high: 1}}
"""
    )
    trainer = workflow.stage("sweep").trainer
    assert trainer.kind == "command"
    assert trainer.argv == ["python3", "my fit.py", "--fixed=1"]
    assert trainer.result_pattern == "acc=(\\S+)"


def test_a_torchrun_command_launched_per_node_validates(tmp_path: Path) -> None:
    """``{node_rank}`` is a placeholder, and the one that runs a command once per node."""
    spec = tmp_path / "per-node.yaml"
    spec.write_text("""
name: per-node
stages:
  - name: tune
    kind: hpo
    parallel: {data: 4}
    trainer:
      command: [torchrun, --nnodes, "{nnodes}", --node_rank, "{node_rank}", --nproc_per_node,
                "{nproc_per_node}", --master_addr, "{master_addr}", --master_port,
                "{master_port}", fit.py, "--tag={{node_rank}}"]
    search: {algorithm: random, budget: 2}
    space: {lr: {type: float, low: 0.001, high: 0.1}}
    objective: {metric: fom, mode: min}
""")
    result = CliRunner().invoke(cli, ["validate", str(spec)])
    assert result.exit_code == 0, result.output
    from nestor.trainers.launch import per_node

    argv = load_spec(spec).stage("tune").trainer.argv
    assert per_node(argv) and not per_node([w for w in argv if w != "{node_rank}"])


def test_independent_stages_keep_written_order() -> None:
    workflow = load_spec_text(
        """
name: dag
stages:
  - {name: c, kind: train, from: [a, b]}
  - {name: a, kind: train, trainer: {name: cnn}}
  - {name: b, kind: train, trainer: {name: mlp}}
"""
    )
    assert workflow.order() == ["a", "b", "c"]
    assert workflow.trainer_of("c").name == "cnn"


def test_multi_objective_and_early_stopping() -> None:
    workflow = load_spec_text(
        """
name: mo
stages:
  - name: sweep
    kind: hpo
    trainer: {function: "mypkg.fit:train"}
    search: {algorithm: genetic, population: 6, generations: 2}
    space: {lr: {type: float, low: 0.001, high: 0.1}}
    objective:
      - {metric: val_accuracy, mode: max}
      - {metric: train_time, mode: min}
    early_stopping: {rule: asha, reduction_factor: 2}
"""
    )
    stage = workflow.stage("sweep")
    assert [(o.metric, o.mode) for o in stage.objectives] == [
        ("val_accuracy", "max"), ("train_time", "min")
    ]
    assert stage.early_stopping.rule == "asha"


def test_a_train_stage_replaying_a_pbt_schedule_plans_a_trial_per_interval() -> None:
    spec = Path(__file__).parents[2] / "configs" / "mnist-pbt.yaml"
    workflow = load_spec(spec)
    assert workflow.planned_trials("population") == 16  # 4 members x 4 intervals
    assert workflow.planned_trials("replayed") == 4  # the winner's 4 intervals, chained
    assert workflow.planned_trials("halving") == 12
    plan = CliRunner().invoke(cli, ["validate", str(spec)])
    row = next(line for line in plan.output.splitlines() if " replayed " in line)
    assert row.split()[-4] == "4", row
