"""Constraints as Python callables (issue 39 item 3): ``nestor.tune(...,
constraints=[lambda c: ..., "expression"])`` from a script's ``__main__``, on real Ray
with a function trainer. The callables run on the driver, where the search asks:
random, TPE and genetic never start a trial that breaks one. A lambda is shipped by
value into the run directory, so `nestor resume --budget` from the command line
extends the run under the same rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.orchestrator.workflow_helpers import events, nestor

pytestmark = pytest.mark.slow

SCRIPT = """
import json, os, sys
from nestor import tune

def objective(config, ctx):
    with open(os.environ["RAN_LOG"], "a") as log:
        log.write(json.dumps(config) + "\\n")
    return {"loss": (config["a"] - 0.7) ** 2 + (config["b"] - 0.2) ** 2}  # best: a > b

def ordered(config):  # a named function of __main__: shipped by value too
    return config["a"] < config["b"]

if __name__ == "__main__":
    algorithm = sys.argv[2]
    search = {"random": {"algorithm": "random"},
              "tpe": {"algorithm": "bayesian", "sampler": "tpe", "startup_trials": 2},
              "genetic": {"algorithm": "genetic", "population": 4}}[algorithm]
    rule = ordered if algorithm == "genetic" else (lambda c: c["a"] < c["b"])
    result = tune(objective, space={"a": {"type": "float", "low": 0.0, "high": 1.0},
                                    "b": {"type": "float", "low": 0.0, "high": 1.0}},
                  metric="loss", mode="min", budget=8, parallel=2, run_dir=sys.argv[1],
                  search=search, constraints=[rule, "a + b <= 1.2"], quiet=True)
    print(json.dumps({"trials": len(result.trials), "best": result.best_config}))
"""


def allowed(config: dict) -> bool:
    return config["a"] < config["b"] and config["a"] + config["b"] <= 1.2


@pytest.mark.parametrize("algorithm", ["random", "tpe", "genetic"])
def test_no_search_asks_what_a_callable_constraint_forbids(tmp_path: Path,
                                                            algorithm: str) -> None:
    script = tmp_path / "study.py"
    script.write_text(SCRIPT)
    log = tmp_path / "ran.log"
    env = dict(os.environ, RAN_LOG=str(log))
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, str(script), str(run_dir), algorithm],
                          capture_output=True, text=True, env=env, timeout=900, check=False,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["trials"] == 8
    ran = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(ran) == 8 and all(allowed(c) for c in ran), ran
    asked = [e["trial"]["config"] for e in events(run_dir) if e["event"] == "trial_started"]
    assert len(asked) == 8 and all(allowed(c) for c in asked)
    # the objective pulls towards a > b: only the rule keeps the search from it
    assert out["best"]["a"] < out["best"]["b"]
    if algorithm == "random":  # the lambda lies in the run directory: the CLI extends it
        assert (run_dir / "functions" / "constraint_0.pkl").is_file()
        more = nestor("resume", str(run_dir), "--budget", "12", "-q", env=env)
        assert more.returncode == 0, more.stderr
        ran = [json.loads(line) for line in log.read_text().splitlines()]
        assert len(ran) == 12 and all(allowed(c) for c in ran), ran
