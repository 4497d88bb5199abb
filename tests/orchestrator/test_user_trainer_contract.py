"""A user's own trainer gets what the built-in ones get: checkpoints that PBT, ASHA,
a replayed schedule and transfer carry on from, predictions an ensemble combines,
and the data split it trains on, through the documented contract
(trainers/outputs.py), as a function and as a command, on real Ray through
`nestor run`. The trainer (user_code/quadfit.py) saves what it started from with
its model, so each continued trial is seen to have loaded the one before."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.orchestrator.workflow_helpers import events, nestor

pytestmark = pytest.mark.slow

USER_CODE = Path(__file__).resolve().parent / "user_code"
FIT = USER_CODE / "quadfit.py"

LATER_STAGES = """
  - name: final
    kind: train
    from: [tune]
    data: train+val
  - name: members
    kind: ensemble
    from: [tune]
    members: 2
    select: SELECT
  - name: moved
    kind: transfer
    from: [tune]
    source: {dataset: digits, classes: [0, 1, 2]}
    target: {dataset: digits, classes: [3, 4, 5]}
"""


def run(tmp_path: Path, trainer: str, search: str, later: str = "") -> tuple[Any, Path]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent(f"""
        name: usercode
        resources: {{slots: 2}}
        stages:
          - name: tune
            kind: hpo
            trainer: {trainer}
            search: {search}
            space:
              lr: {{type: float, low: 0.05, high: 0.6, log: true}}
            objective: {{metric: val_accuracy, mode: max}}
        """) + later)
    run_dir = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(USER_CODE), *filter(None, [os.environ.get("PYTHONPATH")])]))
    result = nestor("run", str(spec), "--run-dir", str(run_dir), env=env, timeout=900)
    return result, run_dir


def finished(run_dir: Path, stage: str) -> dict[str, dict[str, Any]]:
    return {e["trial"]["id"]: e for e in events(run_dir)
            if e["event"] == "trial_finished" and e["stage"] == stage}


def saved(event: dict[str, Any]) -> dict[str, Any]:
    """The model a trial left in its checkpoint folder, as the journal records it."""
    assert event["checkpoint"], f"{event['trial']['id']} recorded no checkpoint"
    return json.loads((Path(event["checkpoint"]) / "model.json").read_text())


def assert_continued(done: dict[str, dict[str, Any]]) -> list[str]:
    """Every trial that continues another started from that one's saved model."""
    continued = [t for t, e in done.items() if e["trial"].get("continue_from")]
    for trial in continued:
        child, parent = saved(done[trial]), saved(done[done[trial]["trial"]["continue_from"]])
        assert child["start"]["source"] == "continue_from"
        assert child["start"]["w"] == parent["w"] and child["start"]["epoch"] == parent["epoch"]
        assert child["epoch"] == done[trial]["trial"]["budget"] > parent["epoch"]
    return continued


def assert_later_stages(run_dir: Path) -> None:
    """The train stage got train+val without a flag, the ensemble combined the members'
    own predictions, and transfer's fine-tuning started from the pretrained model."""
    final = finished(run_dir, "final")
    assert all(e["status"] == "completed" for e in final.values())
    assert saved(final["final"])["start"]["data_split"] == "train+val"

    members = finished(run_dir, "members")
    assert len(members) == 2 and all(e["status"] == "completed" for e in members.values())
    ensemble = json.loads((run_dir / "ensembles" / "members" / "ensemble.json").read_text())
    folders = [run_dir / m["checkpoint"] for m in ensemble["members"]]
    loaded = [np.load(folder / "predictions.npz") for folder in folders]
    weights = np.array([m["weight"] for m in ensemble["members"]])
    blend = np.tensordot(weights, np.stack([p["test_probs"] for p in loaded]), axes=1)
    expected = float((blend.argmax(1) == loaded[0]["test_labels"]).mean())
    assert ensemble["test_value"] == pytest.approx(expected)
    assert len({m["seed"] for m in ensemble["members"]}) == 2  # each with its own seed

    moved = finished(run_dir, "moved")
    assert all(e["status"] == "completed" for e in moved.values()), moved
    tuned, pretrained = saved(moved["finetune"]), saved(moved["pretrain"])
    assert tuned["start"]["source"] == "init_from" and tuned["start"]["w"] == pretrained["w"]
    assert saved(moved["scratch"])["start"]["source"] is None


def test_a_function_trainer_runs_pbt_on_its_own_checkpoints(tmp_path: Path) -> None:
    trainer = ('{function: "quadfit:train", settings: {epochs: 3}, checkpoints: true,'
               ' predictions: true}')
    result, run_dir = run(tmp_path, trainer, "{algorithm: pbt, population: 2, interval: 1,"
                          " intervals: 3, quantile: 0.5, seed: 1}",
                          LATER_STAGES.replace("SELECT", "top_k"))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    done = finished(run_dir, "tune")
    assert len(done) == 6 and all(e["status"] == "completed" for e in done.values())
    assert len(assert_continued(done)) == 4  # each member after its first interval
    # the train stage replays the winner's schedule, each step from the one before
    final = finished(run_dir, "final")
    assert list(final) == ["step-0", "step-1", "final"]
    assert saved(final["step-1"])["start"]["w"] == saved(final["step-0"])["w"]
    assert_later_stages(run_dir)


def test_a_command_trainer_runs_asha_on_its_own_checkpoints(tmp_path: Path) -> None:
    trainer = (f'{{command: ["{sys.executable}", "{FIT}"], settings: {{epochs: 3}},'
               ' checkpoints: true, predictions: true}')
    result, run_dir = run(tmp_path, trainer, "{algorithm: asha, min_budget: 1, max_budget: 3,"
                          " reduction_factor: 3, budget: 8, seed: 2}",
                          LATER_STAGES.replace("SELECT", "greedy"))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    done = finished(run_dir, "tune")
    assert all(e["status"] == "completed" for e in done.values()), done
    assert assert_continued(done), "no trial was promoted"
    assert_later_stages(run_dir)


FUNCTION = '{function: "quadfit:train", settings: {epochs: 3}, checkpoints: true}'
COMMAND = f'{{command: ["{sys.executable}", "{FIT}"], settings: {{epochs: 3}}, checkpoints: true}}'


@pytest.mark.parametrize(("trainer", "search"), [
    (FUNCTION, "{algorithm: asha, min_budget: 1, max_budget: 3, reduction_factor: 3,"
               " budget: 8, seed: 2}"),
    (COMMAND, "{algorithm: pbt, population: 2, interval: 1, intervals: 2, seed: 1}"),
], ids=["function-asha", "command-pbt"])
def test_each_trainer_kind_continues_under_each_continuing_search(tmp_path: Path, trainer: str,
                                                                  search: str) -> None:
    result, run_dir = run(tmp_path, trainer, search)
    assert result.returncode == 0, result.stderr
    done = finished(run_dir, "tune")
    assert all(e["status"] == "completed" for e in done.values()), done
    assert assert_continued(done), "no trial carried on from another"


@pytest.mark.parametrize(("declared", "search", "later", "stage", "said"), [
    ("checkpoints", "{algorithm: pbt, population: 2, interval: 1, intervals: 2, seed: 1}", "",
     "tune", "checkpoints but left no file in its checkpoint folder; PBT needs checkpoints:"
     " save to ctx.checkpoint_dir"),
    ("predictions", "{algorithm: random, budget: 2, seed: 1}",
     "  - {name: members, kind: ensemble, from: [tune], members: 2}\n", "members",
     "predictions but left no predictions.npz in its checkpoint folder; an ensemble needs"
     " predictions: write predictions.npz"),
], ids=["pbt-checkpoints", "ensemble-predictions"])
def test_a_trainer_that_says_it_gives_what_it_does_not_stops_the_run(
        tmp_path: Path, declared: str, search: str, later: str, stage: str, said: str) -> None:
    """PBT would otherwise continue from nothing (random search under its name), an
    ensemble would have nothing to combine."""
    trainer = f'{{function: "quadfit:forgetful", settings: {{epochs: 2}}, {declared}: true}}'
    result, run_dir = run(tmp_path, trainer, search, later)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    message = " ".join(result.stderr.split())
    assert f"stage {stage!r}" in message
    assert f"the function trainer 'quadfit:forgetful' says it gives {said}" in message
    done = finished(run_dir, stage)
    assert done and all(e["status"] == "failed" for e in done.values())
    assert not any(e["trial"].get("continue_from") for e in done.values())
