"""`nestor sweep`: flags become a valid spec; a command sweep runs for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nestor.orchestrator.commands.sweep import build_spec, parse_param, spec_yaml
from nestor.orchestrator.spec import load_spec_text

NESTOR = str(Path(sys.executable).parent / "nestor")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("lr=float:1e-4:0.1:log", ("lr", {"type": "float", "low": 1e-4, "high": 0.1, "log": True})),
        ("n=int:1:8", ("n", {"type": "int", "low": 1, "high": 8, "log": False})),
        ("-a=float:-1:1", ("-a", {"type": "float", "low": -1.0, "high": 1.0, "log": False})),
        ("act=categorical:relu,tanh,1",
         ("act", {"type": "categorical", "values": ["relu", "tanh", 1]})),
    ],
)
def test_param_forms(text: str, expected: tuple) -> None:
    assert parse_param(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lr", "--param must look like"),
        ("lr=flot:1:2", "the type must be float, int or categorical, but got 'flot'"),
        ("n=int:1.5:3", "--param n low must be an integer, but got '1.5'"),
        ("lr=float:1:2:linear", "LOW:HIGH or LOW:HIGH:log"),
        ("c=categorical:", "categorical needs values"),
    ],
)
def test_bad_params_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_param(text)


def sweep_spec(**overrides: object) -> dict:
    args: dict = dict(trainer="cnn", command=None, params=["lr=float:0.01:0.1:log"],
                      settings=["dataset=digits", "epochs=2"], algorithm="genetic",
                      budget=None, population=6, generations=2, metric=None, mode=None,
                      result_pattern=None, dp=2, mp=1, parallel=None, slots=None, seed=4)
    args.update(overrides)
    return build_spec(**args)


def test_cmaes_population_and_keep_checkpoints_reach_the_spec() -> None:
    stage = load_spec_text(spec_yaml(sweep_spec(
        algorithm="bayesian", sampler="cmaes", population=12, generations=None,
        params=["lr=float:0.01:0.1:log", "momentum=float:0.5:0.99"], parallel=12,
        keep_checkpoints=2))).stage("sweep")
    assert (stage.search.sampler, stage.search.population, stage.keep_checkpoints) == (
        "cmaes", 12, 2)


def test_flags_make_a_spec_that_validates() -> None:
    workflow = load_spec_text(spec_yaml(sweep_spec(parallel=1)))
    stage = workflow.stage("sweep")
    assert stage.trainer.settings == {"dataset": "digits", "epochs": 2}
    assert stage.search.population == 6 and stage.search.seed == 4
    assert (stage.parallel.data, workflow.resources.slots) == (2, 2)
    assert stage.objectives[0].metric == "val_accuracy" and stage.objectives[0].mode == "max"


def test_backend_flag_reaches_the_stage() -> None:
    assert load_spec_text(spec_yaml(sweep_spec(parallel=1))).stage("sweep").backend == "horovod"
    workflow = load_spec_text(spec_yaml(sweep_spec(parallel=1, backend="torch")))
    assert workflow.backend_of("sweep") == "torch"


@pytest.mark.parametrize("mode", ["min", "max"])
def test_a_command_sweep_optimizes_its_figure_of_merit_the_way_mode_says(mode: str) -> None:
    spec = sweep_spec(trainer=None, command="python3 fit.py", settings=[], mode=mode)
    stage = load_spec_text(spec_yaml(spec)).stage("sweep")
    assert (stage.objectives[0].metric, stage.objectives[0].mode) == ("fom", mode)


@pytest.mark.parametrize(("overrides", "what"), [
    ({"trainer": None, "command": "python3 fit.py", "settings": []},
     "the number the command prints (fom)"),
    ({"metric": "val_loss"}, "--metric val_loss"),
    ({"trainer": None, "command": "python3 fit.py", "settings": [], "metric": "acc"},
     "--metric acc"),
])
def test_no_direction_but_val_accuracys_is_guessed(overrides: dict, what: str) -> None:
    """The rule of a spec's objective, in a sweep too: a command's figure of merit (once
    minimised silently, an accuracy included) and any metric but val_accuracy need
    --mode."""
    with pytest.raises(ValueError, match="--mode is required") as caught:
        sweep_spec(**overrides)
    assert what in str(caught.value) and "--mode max" in str(caught.value)


def test_the_cli_asks_a_command_sweep_for_its_direction(tmp_path: Path) -> None:
    result = subprocess.run(
        [NESTOR, "sweep", "--command", "/bin/echo FoM: 0.5", "--param", "x=float:0:1",
         "--budget", "2", "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--mode is required" in result.stderr and not (tmp_path / "run").exists()
    help_text = " ".join(subprocess.run([NESTOR, "sweep", "--help"], capture_output=True,
                                        text=True, check=True, timeout=60).stdout.split())
    assert "Required for every metric but val_accuracy (max)" in help_text


def test_conflicting_flags_are_refused() -> None:
    with pytest.raises(ValueError, match="exactly one of --trainer NAME or --command"):
        sweep_spec(command="python3 fit.py", mode="min")
    message = ("--population applies to --algorithm genetic or pbt or bayesian, --generations"
               " applies to --algorithm genetic, not random")
    with pytest.raises(ValueError, match=message):
        sweep_spec(algorithm="random")


def test_sampler_schedule_and_demes_reach_the_search() -> None:
    stage = load_spec_text(spec_yaml(sweep_spec(
        algorithm="bayesian", population=None, generations=None, sampler="cmaes",
    ))).stage("sweep")
    assert (stage.search.algorithm, stage.search.sampler) == ("bayesian", "cmaes")
    stage = load_spec_text(spec_yaml(sweep_spec(schedule="async", demes=2, population=8)))
    search = stage.stage("sweep").search
    assert (search.schedule, search.demes, search.population) == ("async", 2, 8)


def test_algorithm_options_must_belong_to_the_algorithm() -> None:
    with pytest.raises(ValueError, match="--sampler applies to --algorithm asha or bayesian or"
                                         " hyperband, not genetic"):
        sweep_spec(sampler="gp")
    message = ("--schedule applies to --algorithm bayesian or genetic, --demes applies to"
               " --algorithm genetic, not auto")
    with pytest.raises(ValueError, match=message):
        sweep_spec(algorithm="auto", population=None, generations=None, schedule="async", demes=2)


def test_auto_plans_for_the_trials_the_sweep_runs_at_once() -> None:
    auto = dict(algorithm="auto", population=None, generations=None, budget=130,
                trainer=None, command="python3 fit.py", settings=[], mode="min",
                params=[f"c{i}=float:-1:1" for i in range(7)])
    stage = load_spec_text(spec_yaml(sweep_spec(**auto, parallel=2))).stage("sweep")
    assert stage.search.parallel == 2
    assert stage.auto_choice().label() == "bayesian lq-cmaes"
    stage = load_spec_text(spec_yaml(sweep_spec(**auto, parallel=8))).stage("sweep")
    assert stage.auto_choice().label() == "genetic async 10"
    stage = load_spec_text(spec_yaml(sweep_spec(**auto, slots=64))).stage("sweep")
    assert stage.search.parallel == 32  # 64 slots, 2 ranks a trial
    assert stage.auto_choice().label() == "bayesian lq-cmaes, async"
    assert "32 trials at once" in stage.auto_choice().reason
    stage = load_spec_text(spec_yaml(sweep_spec(**auto))).stage("sweep")
    assert stage.search.parallel is None


def continuing(algorithm: str, **overrides: object) -> dict:
    """A sweep spec for a search that continues trials, without genetic's flags."""
    return sweep_spec(**{"algorithm": algorithm, "population": None, "generations": None,
                         **overrides})


def test_pbt_flags_reach_the_search() -> None:
    stage = load_spec_text(spec_yaml(continuing(
        "pbt", population=4, interval=2, intervals=3, fidelity="epochs", parallel=2,
    ))).stage("sweep")
    search = stage.search
    assert (search.algorithm, search.population, search.interval, search.intervals) == (
        "pbt", 4, 2, 3)
    assert search.fidelity == "epochs"
    assert stage.planned_trials() == 12  # 4 members x 3 intervals
    assert stage.search_label() == "pbt 4 members, exploit every 2 epochs"


def test_auto_with_a_fidelity_picks_asha_over_the_trainers_epochs() -> None:
    auto = dict(algorithm="auto", population=None, generations=None, budget=20, parallel=2)
    stage = load_spec_text(spec_yaml(sweep_spec(
        **auto, fidelity="epochs", settings=["dataset=digits", "epochs=27"],
    ))).stage("sweep")
    assert stage.search.fidelity == "epochs"
    assert stage.auto_choice().label() == "asha tpe, rungs 1-27, eta 3, budget 540 epochs"
    plain = load_spec_text(spec_yaml(sweep_spec(**auto))).stage("sweep")  # epochs=2
    assert plain.auto_choice().algorithm == "bayesian"


def test_explore_pb2_reaches_the_pbt_search_and_its_label() -> None:
    stage = load_spec_text(spec_yaml(continuing(
        "pbt", population=4, intervals=3, explore="pb2",
    ))).stage("sweep")
    assert stage.search.explore == "pb2"
    assert stage.search_label() == "pb2 4 members, exploit every 1 epochs"
    assert stage.planned_trials() == 12
    with pytest.raises(ValueError, match="--explore applies to --algorithm pbt, not asha"):
        continuing("asha", explore="pb2")


@pytest.mark.parametrize("algorithm", ["asha", "hyperband"])
def test_halving_flags_reach_the_search(algorithm: str) -> None:
    stage = load_spec_text(spec_yaml(continuing(
        algorithm, min_budget=1, max_budget=9, reduction_factor=3, budget=20,
    ))).stage("sweep")
    search = stage.search
    assert (search.min_budget, search.max_budget, search.reduction_factor) == (1, 9, 3)
    assert search.sampler == "random"
    assert stage.search_label() == f"{algorithm} 1-9 epochs, eta 3"


def test_sampler_tpe_makes_hyperband_bohb() -> None:
    stage = load_spec_text(spec_yaml(continuing(
        "hyperband", sampler="tpe", min_budget=1, max_budget=4, reduction_factor=2,
    ))).stage("sweep")
    assert stage.search.sampler == "tpe"
    assert stage.search_label() == "hyperband 1-4 epochs, eta 2, TPE"


@pytest.mark.parametrize(
    ("algorithm", "overrides", "message"),
    [
        ("random", {"reduction_factor": 3},
         "--reduction-factor applies to --algorithm asha or hyperband, not random"),
        ("bayesian", {"interval": 1.0}, "--interval applies to --algorithm pbt, not bayesian"),
        ("asha", {"intervals": 4}, "--intervals applies to --algorithm pbt, not asha"),
        ("pbt", {"min_budget": 1.0, "max_budget": 9.0},
         "--min-budget and --max-budget apply to --algorithm asha or hyperband, not pbt"),
        ("pbt", {"generations": 3}, "--generations applies to --algorithm genetic, not pbt"),
        ("genetic", {"fidelity": "epochs"},
         "--fidelity applies to --algorithm asha or hyperband or pbt or auto, not genetic"),
        ("hyperband", {"sampler": "cmaes"}, "--sampler for --algorithm hyperband must be tpe"),
        ("pbt", {"sampler": "tpe"}, "--sampler applies to --algorithm asha or bayesian or"
                                    " hyperband, not pbt"),
    ],
)
def test_options_of_another_search_are_refused(algorithm: str, overrides: dict,
                                               message: str) -> None:
    with pytest.raises(ValueError, match=message):
        continuing(algorithm, **overrides)


def test_rungs_that_do_not_fit_are_a_spec_error() -> None:
    from nestor.orchestrator.spec import SpecError

    with pytest.raises(SpecError, match="at least min_budget x reduction_factor"):
        load_spec_text(spec_yaml(continuing("asha", min_budget=1, max_budget=2,
                                            reduction_factor=3)))


def test_cli_refuses_a_wrong_combination_with_exit_2() -> None:
    result = subprocess.run([NESTOR, "sweep", "--trainer", "cnn", "--param", "lr=float:0.01:0.1",
                             "--algorithm", "random", "--interval", "2"],
                            capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 2
    assert "--interval applies to --algorithm pbt, not random" in result.stderr
    assert "Traceback" not in result.stderr
    result = subprocess.run([NESTOR, "sweep", "--trainer", "cnn", "--param", "lr=float:0.01:0.1",
                             "--algorithm", "hyperband", "--max-budget", "2"],
                            capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "max_budget must be at least min_budget x reduction_factor" in result.stderr


def test_help_explains_the_continuing_searches() -> None:
    result = subprocess.run([NESTOR, "sweep", "--help"], capture_output=True, text=True,
                            check=False, timeout=60)
    text = " ".join(result.stdout.split())
    assert result.returncode == 0
    for flag in ("--interval", "--intervals", "--min-budget", "--max-budget", "--reduction-factor",
                 "--fidelity"):
        assert flag in text
    assert "BOHB" in text and "checkpoints" in text


def test_cli_errors_exit_2_without_traceback() -> None:
    result = subprocess.run([NESTOR, "sweep", "--trainer", "cnn", "--param", "lr=float:1:0"],
                            capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 2
    assert "low must be less than high" in result.stderr and "Traceback" not in result.stderr


FIT = """
import os, sys
with open(os.environ["FIT_LOG"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
a = float(sys.argv[1].split("=", 1)[1])
print(f"FoM: {(a - 0.25) ** 2}")
"""


def fit_sweep(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``nestor sweep`` of FIT over its one dashed parameter ``-a``, with ``flags``, into
    ``tmp_path/run``; FIT logs each trial's argv to ``tmp_path/argv.log``."""
    fit = tmp_path / "fit.py"
    fit.write_text(FIT)
    env = dict(os.environ, FIT_LOG=str(tmp_path / "argv.log"))
    return subprocess.run(
        [NESTOR, "sweep", "--command", f"{sys.executable} {fit}", "--mode", "min",
         "--param=-a=float:-1:1", *flags, "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, env=env, check=False, timeout=300,
    )


@pytest.mark.slow
def test_a_command_sweep_passes_dashed_names_literally(tmp_path: Path) -> None:
    log = tmp_path / "argv.log"
    result = fit_sweep(tmp_path, "--algorithm", "bayesian", "--budget", "6", "--parallel", "2")
    assert result.returncode == 0, result.stderr
    lines = log.read_text().splitlines()
    assert len(lines) == 6 and all(line.startswith("-a=") for line in lines)
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    (stage,) = data["stages"]
    assert stage["n_trials"] == 6 and stage["n_failed"] == 0
    best = stage["best"]
    assert best["value"] == min(t["value"] for t in stage["trials"])
    assert (tmp_path / "run" / "spec.yaml").read_text().startswith("# written by `nestor sweep`")


@pytest.mark.slow
def test_an_auto_sweep_runs_what_it_picked(tmp_path: Path) -> None:
    result = fit_sweep(tmp_path, "--algorithm", "auto", "--budget", "12", "--parallel", "2")
    assert result.returncode == 0, result.stderr
    spec = (tmp_path / "run" / "spec.yaml").read_text()
    assert "algorithm: auto" in spec and "parallel: 2" in spec
    stage = json.loads((tmp_path / "run" / "results.json").read_text())["stages"][0]
    assert stage["n_trials"] == 12
    validate = subprocess.run([NESTOR, "validate", str(tmp_path / "run" / "spec.yaml")],
                              capture_output=True, text=True, check=False, timeout=60)
    assert "auto picked bayesian tpe: one parameter" in " ".join(validate.stdout.split())


@pytest.mark.slow
def test_a_sweep_whose_every_trial_fails_exits_non_zero_and_says_why(tmp_path: Path) -> None:
    fit = tmp_path / "broken.py"
    fit.write_text("import sys\nsys.exit('no licence for the solver')\n")
    result = subprocess.run(
        [NESTOR, "sweep", "--command", f"{sys.executable} {fit}", "--mode", "min",
         "--param=a=float:-1:1", "--budget", "2", "--parallel", "1",
         "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, check=False, timeout=300,
    )
    assert result.returncode == 1, result.stderr
    assert "stage sweep: all 2 trials failed; the first said:" in result.stderr
    assert "no licence for the solver" in result.stderr and "Traceback" not in result.stderr
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    assert data["stages"][0]["n_failed"] == 2  # the run is still recorded in full


@pytest.mark.slow
def test_an_asha_sweep_continues_promoted_trials_from_their_checkpoints(tmp_path: Path) -> None:
    """The flags reach the engine: rungs of 1 and 2 epochs, promoted trials carry on."""
    result = subprocess.run(
        [NESTOR, "sweep", "--trainer", "mlp", "--set", "dataset=digits",
         "--set", "max_train_samples=300", "--param", "lr=float:0.005:0.2:log",
         "--algorithm", "asha", "--min-budget", "1", "--max-budget", "2", "--reduction-factor", "2",
         "--budget", "5", "--parallel", "2", "--seed", "1", "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, check=False, timeout=600,
    )
    assert result.returncode == 0, result.stderr
    spec = (tmp_path / "run" / "spec.yaml").read_text()
    assert "algorithm: asha" in spec and "reduction_factor: 2" in spec
    finished = [json.loads(line) for line in (tmp_path / "run" / "journal.jsonl").open()]
    finished = [e for e in finished if e["event"] == "trial_finished"]
    assert len(finished) == 5
    promoted = [e for e in finished if e["trial"].get("continue_from")]
    assert promoted and all(e["trial"]["budget"] == 2 for e in promoted)
    assert all(len(e["history"]) == 2 for e in promoted)  # 1 epoch carried, 1 trained


@pytest.mark.slow
def test_a_pb2_sweep_trains_a_population_and_reports_it_as_pbt_does(tmp_path: Path) -> None:
    """--explore pb2 reaches the engine; the PBT summary, schedule and population plot
    come out as for PBT. (Only optimizer settings are searched: an exploit loads the
    donor's weights, so a searched width would not fit them.)"""
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [NESTOR, "sweep", "--trainer", "mlp", "--set", "dataset=digits",
         "--set", "max_train_samples=300", "--param", "lr=float:0.005:0.2:log",
         "--param", "momentum=float:0.5:0.95", "--algorithm", "pbt", "--explore", "pb2",
         "--population", "4", "--intervals", "4", "--parallel", "2", "--seed", "1",
         "--run-dir", str(run_dir)],
        capture_output=True, text=True, check=False, timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert "explore: pb2" in (run_dir / "spec.yaml").read_text()
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").open()]
    finished = [e for e in events if e["event"] == "trial_finished"]
    assert len(finished) == 16 and all(e["status"] == "completed" for e in finished)
    assert any(e["trial"]["origin"] == "exploit" for e in finished)
    stage = json.loads((run_dir / "results.json").read_text())["stages"][0]
    assert len(stage["pbt"]["members"]) == 4
    assert [s["until"] for s in stage["pbt"]["schedule"]] == [1, 2, 3, 4]
    assert (run_dir / "plots" / "sweep-population.png").stat().st_size > 0


def test_search_set_says_what_no_flag_does() -> None:
    """--search-set KEY=VALUE: any field of the search block, so a sweep can say
    everything a spec can (values read as YAML: numbers, words, lists)."""
    pbt = continuing("pbt", search_settings=["quantile=0.5", "perturbation_factors=[0.7, 1.3]",
                                             "resample_probability=0"])
    stage = load_spec_text(spec_yaml(pbt)).stage("sweep")
    assert (stage.search.quantile, stage.search.resample_probability) == (0.5, 0)
    assert list(stage.search.perturbation_factors) == [0.7, 1.3]
    genetic = sweep_spec(search_settings=["replacement=mu_plus_lambda", "offspring=3",
                                          "patience=2"])
    stage = load_spec_text(spec_yaml(genetic)).stage("sweep")
    assert (stage.search.mode, stage.search.offspring, stage.search.patience) == (
        "mu_plus_lambda", 3, 2)
    bayesian = sweep_spec(algorithm="bayesian", population=None, generations=None,
                          sampler="lq-cmaes", search_settings=["population=12"],
                          params=["lr=float:0.01:0.1:log", "momentum=float:0.5:0.99"])
    assert load_spec_text(spec_yaml(bayesian)).stage("sweep").search.population == 12


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["population=3"], "--search-set population= is given twice (also by --population)"),
        (["algorithm=pbt"], "--search-set cannot set algorithm: use --algorithm"),
        (["patience"], "--search-set must look like KEY=VALUE, but got 'patience'"),
        (["patience=[1"], "--search-set patience= must be a YAML value"),
        (["patience=1", "patience=2"], "--search-set patience= is given twice"),
    ],
)
def test_search_set_refuses_what_it_cannot_mean(settings: list, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[")):
        sweep_spec(search_settings=settings)


def test_search_set_of_a_field_the_algorithm_lacks_is_a_spec_error() -> None:
    from nestor.orchestrator.spec import SpecError

    with pytest.raises(SpecError, match="unknown field 'quantil'; did you mean 'quantile'"):
        load_spec_text(spec_yaml(continuing("pbt", search_settings=["quantil=0.5"])))


def test_auto_is_the_default_search_and_budgets_take_units() -> None:
    result = subprocess.run([NESTOR, "sweep", "--help"], capture_output=True, text=True,
                            check=False, timeout=60)
    text = " ".join(result.stdout.split())
    assert "[default: auto]" in text and "30h" in text and "600slot-s" in text
    spec = sweep_spec(algorithm="auto", population=None, generations=None,
                      budget={"hours": 30.0})
    search = load_spec_text(spec_yaml(spec)).stage("sweep").search
    assert (search.algorithm, search.budget) == ("auto", {"hours": 30.0})


@pytest.mark.slow
def test_a_sweep_without_algo_says_what_auto_picked_and_spends_a_cost(tmp_path: Path) -> None:
    """No --algorithm: auto, named with its reason as the run starts; --budget 6epochs with
    epochs=2 per trial runs 3 trials (each told its 2 epochs), not the default 20."""
    result = fit_sweep(tmp_path, "--set", "epochs=2", "--budget", "6epochs", "--parallel", "1")
    assert result.returncode == 0, result.stderr
    stderr = " ".join(result.stderr.split())
    assert "stage sweep: auto picked bayesian tpe: one parameter" in stderr
    assert "planned for 1 trial at once (search.parallel)" in stderr  # --parallel 1
    assert "spent 6/6 epochs" in stderr and "3/?" in stderr
    stage = json.loads((tmp_path / "run" / "results.json").read_text())["stages"][0]
    assert stage["n_trials"] == 3


@pytest.mark.slow
def test_a_sweep_does_not_advise_turning_the_clusters_token_off(tmp_path: Path) -> None:
    # Ray's line on starting a cluster ("Token authentication is enabled ... Set
    # RAY_AUTH_MODE=disabled to opt out") tells every user how to remove what keeps
    # the cluster nestor starts private to its run.
    result = subprocess.run(
        [NESTOR, "sweep", "--command", "/bin/echo FoM: 0.5", "--mode", "min",
         "--param", "x=float:0:1", "--budget", "4", "--parallel", "2",
         "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, check=False, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "run directory:" in result.stdout
    assert "RAY_AUTH_MODE=disabled" not in result.stdout + result.stderr


def test_when_and_constraint_flags_make_a_conditional_constrained_space() -> None:
    stage = load_spec_text(spec_yaml(sweep_spec(
        algorithm="random", population=None, generations=None,
        params=["optimizer=categorical:sgd,adam", "momentum=float:0.5:0.99",
                "lr=float:0.01:0.1:log"],
        whens=["momentum:optimizer=sgd"], constraints=["lr * 10 <= momentum + 1"],
    ))).stages[0]
    space = stage.search_space()
    assert space.condition("momentum") == (("optimizer", ("sgd",)),)
    assert [c.text for c in space.constraints] == ["lr * 10 <= momentum + 1"]
    assert space.project({"optimizer": "adam", "momentum": 0.6, "lr": 0.02}) == {
        "optimizer": "adam", "lr": 0.02}


@pytest.mark.parametrize(("whens", "message"), [
    (["momentum=sgd"], "--when must look like NAME:PARENT=VALUE"),
    (["beta:optimizer=sgd"], "no --param declares 'beta'"),
])
def test_bad_when_flags_say_what_is_wrong(whens: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sweep_spec(algorithm="random", population=None, generations=None,
                   params=["optimizer=categorical:sgd,adam", "momentum=float:0.5:0.99"],
                   whens=whens)
