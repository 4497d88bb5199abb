"""`nestor sweep`: flags become a valid spec; a command sweep runs for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.spec import load_spec_text
from orchestrator.sweep import build_spec, parse_param, spec_yaml

NESTOR = str(Path(sys.executable).parent / "nestor")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("lr=float:1e-4:0.1:log", ("lr", {"type": "float", "low": 1e-4, "high": 0.1, "log": True})),
        ("n=int:1:8", ("n", {"type": "int", "low": 1, "high": 8, "log": False})),
        ("-a=float:-1:1", ("-a", {"type": "float", "low": -1.0, "high": 1.0, "log": False})),
        ("act=choice:relu,tanh,1", ("act", {"type": "categorical", "values": ["relu", "tanh", 1]})),
    ],
)
def test_param_forms(text: str, expected: tuple) -> None:
    assert parse_param(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lr", "--param must look like"),
        ("lr=flot:1:2", "the type must be float, int or choice, but got 'flot'"),
        ("n=int:1.5:3", "--param n low must be an integer, but got '1.5'"),
        ("lr=float:1:2:linear", "LOW:HIGH or LOW:HIGH:log"),
        ("c=choice:", "choice needs values"),
    ],
)
def test_bad_params_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_param(text)


def sweep_spec(**overrides: object) -> dict:
    args: dict = dict(trainer="cnn", command=None, params=["lr=float:0.01:0.1:log"],
                      settings=["dataset=digits", "epochs=2"], algorithm="genetic",
                      budget=None, population=6, generations=2, metric=None, mode=None,
                      fom_pattern=None, dp=2, mp=1, parallel=None, slots=None, seed=4)
    args.update(overrides)
    return build_spec(**args)


def test_flags_make_a_spec_that_validates() -> None:
    workflow = load_spec_text(spec_yaml(sweep_spec(parallel=1)))
    stage = workflow.stage("sweep")
    assert stage.trainer.settings == {"dataset": "digits", "epochs": 2}
    assert stage.search.population == 6 and stage.search.seed == 4
    assert (stage.parallel.data, workflow.resources.slots) == (2, 2)
    assert stage.objectives[0].metric == "val_accuracy" and stage.objectives[0].mode == "max"


def test_command_sweeps_minimize_a_figure_of_merit_by_default() -> None:
    spec = sweep_spec(trainer=None, command="python3 fit.py", settings=[])
    stage = load_spec_text(spec_yaml(spec)).stage("sweep")
    assert (stage.objectives[0].metric, stage.objectives[0].mode) == ("fom", "min")


def test_conflicting_flags_are_refused() -> None:
    with pytest.raises(ValueError, match="exactly one of --trainer NAME or --cmd"):
        sweep_spec(command="python3 fit.py")
    with pytest.raises(ValueError, match="apply to --algo genetic, not random"):
        sweep_spec(algorithm="random")


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


@pytest.mark.slow
def test_a_command_sweep_passes_dashed_names_literally(tmp_path: Path) -> None:
    fit = tmp_path / "fit.py"
    fit.write_text(FIT)
    log = tmp_path / "argv.log"
    env = dict(os.environ, FIT_LOG=str(log))
    result = subprocess.run(
        [NESTOR, "sweep", "--cmd", f"{sys.executable} {fit}", "--param=-a=float:-1:1",
         "--algo", "bayesian", "--budget", "6", "--parallel", "2",
         "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, env=env, check=False, timeout=300,
    )
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
def test_a_sweep_whose_every_trial_fails_exits_non_zero_and_says_why(tmp_path: Path) -> None:
    fit = tmp_path / "broken.py"
    fit.write_text("import sys\nsys.exit('no licence for the solver')\n")
    result = subprocess.run(
        [NESTOR, "sweep", "--cmd", f"{sys.executable} {fit}", "--param=a=float:-1:1",
         "--budget", "2", "--parallel", "1", "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, check=False, timeout=300,
    )
    assert result.returncode == 1, result.stderr
    assert "stage sweep: all 2 trials failed; the first said:" in result.stderr
    assert "no licence for the solver" in result.stderr and "Traceback" not in result.stderr
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    assert data["stages"][0]["n_failed"] == 2  # the run is still recorded in full
