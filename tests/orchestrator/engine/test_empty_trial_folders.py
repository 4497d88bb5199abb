"""A trial's checkpoint and artifact folders exist before its code runs; the ones its
trial left empty are gone once the stage ends, all at once (engine.tidy), and nothing
outside the run directory is touched on the way.

End to end, a user's function trainer and command trainer each save a checkpoint
and an artifact only for some of their trials: after the run the run directory
holds exactly those trials' folders, and the trials that saved nothing are
recorded without a checkpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nestor.orchestrator.engine.tidy import remove_empty_trial_folders

NESTOR = str(Path(sys.executable).parent / "nestor")


def test_only_empty_trial_folders_of_the_stage_go(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for top in ("checkpoints", "artifacts"):
        (run / top / "tune" / "1").mkdir(parents=True)  # empty: goes
        (run / top / "tune" / "2").mkdir()
        (run / top / "tune" / "2" / "model.pt").write_text("weights")  # kept
        (run / top / "tune" / "3" / "sub").mkdir(parents=True)  # holds a folder: kept
        (run / top / "other" / "4").mkdir(parents=True)  # another stage's: not this one's
    assert remove_empty_trial_folders(run, "tune") == 2
    for top in ("checkpoints", "artifacts"):
        assert sorted(p.name for p in (run / top / "tune").iterdir()) == ["2", "3"]
        assert (run / top / "other" / "4").is_dir()


def test_links_in_a_run_directory_lead_nowhere_outside(tmp_path: Path) -> None:
    """A run directory passed between people: a stage folder or a trial folder that
    is a link to an empty folder elsewhere is not followed (nothing there is removed)."""
    outside = tmp_path / "outside"
    (outside / "empty").mkdir(parents=True)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "tune").symlink_to(outside, target_is_directory=True)
    (run / "artifacts" / "tune").mkdir(parents=True)
    (run / "artifacts" / "tune" / "7").symlink_to(outside / "empty", target_is_directory=True)
    assert remove_empty_trial_folders(run, "tune") == 0
    assert (outside / "empty").is_dir()
    assert (run / "artifacts" / "tune" / "7").is_symlink()


SAVES = """
import os


def train(config, ctx):
    if config["x"] > 0.5:
        with open(os.path.join(ctx.checkpoint_dir, "model.txt"), "w") as out:
            out.write(str(config["x"]))
        with open(os.path.join(ctx.artifact_dir, "note.txt"), "w") as out:
            out.write("kept")
    return {"score": config["x"]}
"""

SAVES_CMD = """
import os, sys
x = float(sys.argv[1].split("=")[1])
if x > 0.5:
    with open(os.path.join(os.environ["NESTOR_CHECKPOINT_DIR"], "model.txt"), "w") as out:
        out.write(str(x))
    with open(os.path.join(os.environ["NESTOR_ARTIFACT_DIR"], "note.txt"), "w") as out:
        out.write("kept")
print(f"FoM: {x}")
"""


@pytest.mark.slow
def test_a_run_keeps_the_folders_its_trials_filled_and_no_empty_one(tmp_path: Path) -> None:
    (tmp_path / "saves.py").write_text(textwrap.dedent(SAVES))
    (tmp_path / "saves_cmd.py").write_text(textwrap.dedent(SAVES_CMD))
    stages = {"fn": '{function: "saves:train"}',
              "cmd": f'{{command: "{sys.executable} {tmp_path}/saves_cmd.py"}}'}
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: folders\nresources: {slots: 2}\nstages:" + "".join(
        f"""
  - name: {name}
    kind: hpo
    trainer: {trainer}
    search: {{algorithm: random, budget: 8, seed: 3}}
    space: {{x: {{type: float, low: 0, high: 1}}}}
    objective: {{metric: {'score' if name == 'fn' else 'fom'}, mode: max}}"""
        for name, trainer in stages.items()) + "\n")
    run = tmp_path / "run"
    done = subprocess.run([NESTOR, "run", str(spec), "--run-dir", str(run)],
                          env=dict(os.environ, PYTHONPATH=str(tmp_path)), capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()]
    for stage in stages:
        finished = [e for e in events if e["event"] == "trial_finished" and e["stage"] == stage]
        assert len(finished) == 8
        saved = {e["trial"]["id"] for e in finished if e["trial"]["config"]["x"] > 0.5}
        assert 0 < len(saved) < 8  # the seed gives both kinds of trial
        for top in ("checkpoints", "artifacts"):
            assert {p.name for p in (run / top / stage).iterdir()} == saved, (stage, top)
        assert {e["trial"]["id"] for e in finished if e["checkpoint"]} == saved
