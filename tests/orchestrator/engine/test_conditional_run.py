"""A conditional, constrained space end to end: `nestor run` of a function trainer on
real Ray; the trainer gets exactly the active parameters of each configuration, every
one meeting the constraint, and the journal records the same configurations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nestor.orchestrator.journal.journal import read_events
from nestor.search.space import CategoricalParam, FloatParam, IntParam, SearchSpace

SPEC = textwrap.dedent("""
    name: conditional
    stages:
      - name: hpo
        kind: hpo
        trainer: {function: "condtrain:train"}
        search:
          algorithm: genetic
          population: 6
          generations: 3
          seed: 3
          constraints: ["lr * layers <= 0.3"]
        space:
          optimizer: [adam, sgd]
          lr: {type: float, low: 0.001, high: 0.5, log: true}
          momentum: {type: float, low: 0.0, high: 0.99, when: {optimizer: sgd}}
          nesterov: {type: categorical, values: [true, false], when: {optimizer: sgd}}
          dampening: {type: float, low: 0.0, high: 0.5, when: {nesterov: false}}
          layers: {type: int, low: 1, high: 4}
        objective: {metric: loss, mode: min}
    """)
TRAINER = textwrap.dedent("""
    import json, os

    def train(config, ctx):
        with open(os.environ["CONDTRAIN_LOG"], "a") as log:
            log.write(json.dumps(config) + "\\n")
        return {"loss": config["lr"] * config["layers"] + config.get("momentum", 0.5)}
    """)
SPACE = SearchSpace(
    (CategoricalParam("optimizer", ("adam", "sgd")), FloatParam("lr", 0.001, 0.5, log=True),
     FloatParam("momentum", 0.0, 0.99), CategoricalParam("nesterov", (True, False)),
     FloatParam("dampening", 0.0, 0.5), IntParam("layers", 1, 4)),
    conditions={"momentum": {"optimizer": "sgd"}, "nesterov": {"optimizer": "sgd"},
                "dampening": {"nesterov": False}},
    constraints=("lr * layers <= 0.3",))


@pytest.mark.slow
def test_a_function_trainer_gets_only_active_parameters_meeting_the_constraints(
        tmp_path: Path) -> None:
    (tmp_path / "condtrain.py").write_text(TRAINER)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    log = tmp_path / "configs.jsonl"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "CONDTRAIN_LOG": str(log)}
    done = subprocess.run(
        [sys.executable, "-m", "nestor.orchestrator.commands.cli", "run", str(spec), "--run-dir",
         str(tmp_path / "run"), "--slots", "2"],
        env=env, capture_output=True, text=True, timeout=1500, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    received = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(received) == 18
    for config in received:
        assert SPACE.contains(config), config  # active parameters only, constraint met
    assert any("momentum" in c for c in received) and any("momentum" not in c for c in received)
    events = read_events(tmp_path / "run" / "journal.jsonl")
    journalled = [e["trial"]["config"] for e in events if e["event"] == "trial_finished"]
    assert sorted(map(json.dumps, journalled)) == sorted(map(json.dumps, received))
