"""A run directory is data: ids and paths read back from it never reach outside it.

Run directories are passed between people, so a journal, an attempt file or an
``ensemble.json`` may have been written by someone else. Each test below alters
one the way an attacker would (an id with ``/`` or ``..``, an absolute path, a link
out of the run directory) and checks from outside, on the victim's files, that
nothing was deleted, read or handed to a trainer.
"""

from __future__ import annotations

import contextlib
import json
import random
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nestor.orchestrator.backends import SimulatedBackend, fixed_trials
from nestor.orchestrator.backends.stopping import Interrupted
from nestor.orchestrator.engine.adoption import ResultFiles
from nestor.orchestrator.engine.checkpoints import CheckpointKeeper
from nestor.orchestrator.engine.workflow import run_workflow
from nestor.orchestrator.journal.events import parse
from nestor.orchestrator.journal.journal import JournalError, read_events
from nestor.orchestrator.journal.safe import UnsafeRunData, check_id, inside
from nestor.orchestrator.spec import load_spec_text

SPEC = textwrap.dedent("""
    name: sim
    stages:
      - name: tune
        kind: hpo
        trainer: {function: "nestor.orchestrator.simulate:simulated_trial"}
        search: {algorithm: genetic, population: 4, generations: 3, seed: 1}
        space:
          x: {type: float, low: 0, high: 1}
        objective: {metric: val_accuracy, mode: max}
        keep_checkpoints: 1
    """)


def interrupted_run(run_dir: Path) -> None:
    """A simulated run stopped by its allocation's time limit after one generation."""
    backend = SimulatedBackend(nodes=1, slots_per_node=4, seed=0,
                               trial_model=fixed_trials(3600.0, 0.5), time_limit_s=5000.0)
    with pytest.raises(Interrupted):
        run_workflow(load_spec_text(SPEC), backend, run_dir)


def resume(run_dir: Path) -> None:
    backend = SimulatedBackend(nodes=1, slots_per_node=4, seed=0,
                               trial_model=fixed_trials(3600.0, 0.5))
    run_workflow(load_spec_text(SPEC), backend, run_dir, resume=True)


def append(run_dir: Path, **event: Any) -> None:
    seq = len(read_events(run_dir / "journal.jsonl"))
    with open(run_dir / "journal.jsonl", "a") as handle:
        handle.write(json.dumps({"seq": seq, "time": 1.0, **event}) + "\n")


def victim(tmp_path: Path) -> Path:
    folder = tmp_path / "victim"
    folder.mkdir()
    (folder / "thesis.tex").write_text("three years of work")
    return folder


# The failure as reported: a checkpoint_removed event naming an absolute folder.
@pytest.mark.parametrize("trial", ["{victim}", "../../../victim", "0/../../../../victim"])
def test_a_checkpoint_removed_event_cannot_delete_outside_the_run(tmp_path: Path,
                                                                  trial: str) -> None:
    run_dir = tmp_path / "run"
    interrupted_run(run_dir)
    target = victim(tmp_path)
    append(run_dir, event="checkpoint_removed", stage="tune",
           trial=trial.format(victim=target), path="x")
    with pytest.raises(UnsafeRunData, match="altered"):
        resume(run_dir)
    assert (target / "thesis.tex").read_text() == "three years of work"


def test_a_checkpoints_folder_linked_out_cannot_be_deleted_through(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    interrupted_run(run_dir)
    target = victim(tmp_path)
    (target / "0").mkdir()
    (target / "0" / "keep.txt").write_text("mine")
    checkpoints = run_dir / "checkpoints"
    if checkpoints.exists():
        import shutil
        shutil.rmtree(checkpoints)
    checkpoints.mkdir()
    (checkpoints / "tune").symlink_to(target)  # checkpoints/tune -> the victim's folder
    append(run_dir, event="checkpoint_removed", stage="tune", trial="0", path="x")
    with pytest.raises(UnsafeRunData, match="outside"):
        resume(run_dir)
    assert (target / "0" / "keep.txt").read_text() == "mine"


def test_a_keeper_removes_its_own_folders_as_before(tmp_path: Path) -> None:
    """The check does not stop the keeper's own work: a folder inside goes."""
    mine = tmp_path / "run" / "checkpoints" / "tune" / "3"
    mine.mkdir(parents=True)
    keeper = CheckpointKeeper("tune", 1, tmp_path / "run", journal=None)  # type: ignore[arg-type]
    keeper.removed("3", {})
    assert not mine.exists()


@pytest.mark.parametrize("bad", ["../x", "/etc", "a/b", ".hidden", "..", "", "x" * 200,
                                 "a\x00b", "a\nb"])
def test_ids_with_path_syntax_are_refused_when_an_event_is_read(bad: str) -> None:
    record = {"seq": 1, "time": 1.0, "event": "trial_finished", "stage": "tune",
              "trial": {"id": bad, "config": {}}, "attempt": 1, "status": "completed",
              "value": 1.0, "metrics": {}, "reason": None, "slot_seconds": 1.0}
    with pytest.raises(UnsafeRunData):
        parse(record)
    with pytest.raises(UnsafeRunData):
        parse({**record, "trial": {"id": "1", "config": {}}, "stage": bad})
    with pytest.raises(UnsafeRunData):
        parse({**record, "trial": {"id": "1", "config": {}, "continue_from": bad}})
    assert isinstance(UnsafeRunData("x"), JournalError)  # the commands report it as damage


def test_the_ids_nestor_writes_pass() -> None:
    for good in ("0", "17", "warm-3", "member-2", "pretrain", "group-1", "tune", "a.b_c-d"):
        assert check_id(good, "trial id") == good


def test_an_attempt_folder_linked_out_is_not_read(tmp_path: Path) -> None:
    """Adoption reads attempts/STAGE/TRIAL/N.json: a link there to a file outside (a
    result the attacker crafted, or a secret to be parsed into an error) is refused."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "1.json").write_text(json.dumps({"status": "completed", "value": 1.0}))
    folder = tmp_path / "run" / "attempts" / "tune"
    folder.mkdir(parents=True)
    (folder / "5").symlink_to(outside)
    files = ResultFiles(tmp_path / "run", "tune")
    with pytest.raises(UnsafeRunData):
        files.unheard("5", set())
    with pytest.raises(UnsafeRunData):
        files.unheard("../../outside", set())


def test_inside_allows_the_run_directory_through_a_link_to_it(tmp_path: Path) -> None:
    """A run directory reached through a link of the user's own (runs/latest) is fine."""
    real = tmp_path / "runs" / "sweep-1"
    (real / "checkpoints").mkdir(parents=True)
    (tmp_path / "latest").symlink_to(real)
    assert inside(tmp_path / "latest", "checkpoints") == tmp_path / "latest" / "checkpoints"
    with pytest.raises(UnsafeRunData):
        inside(tmp_path / "latest", "..", "..")


def test_a_continued_trial_is_never_handed_a_checkpoint_outside(tmp_path: Path) -> None:
    """A trial_finished event whose checkpoint points outside the run directory: the
    trial continuing from it is not launched with that path."""
    from nestor.orchestrator.engine.kinds.hpo import HpoTrials
    from nestor.orchestrator.engine.records import TrialRecord

    secret = tmp_path / "secret.pt"
    secret.write_text("not yours")

    class Runner:
        def __init__(self) -> None:
            self.run_dir = tmp_path / "run"
            self.stage = type("S", (), {"search": None})()
            self.records = {"1": TrialRecord(id="1", config={}, generation=0, deme=0,
                                             parents=[], status="completed",
                                             checkpoint=str(secret))}

    trial = type("T", (), {"budget": None, "continue_from": "1"})()
    with pytest.raises(UnsafeRunData):
        HpoTrials([]).request_extras(Runner(), trial)  # type: ignore[arg-type]


def test_a_fuzzed_journal_never_touches_outside(tmp_path: Path) -> None:
    """Random edits of an interrupted run's journal (ids and paths replaced with ones
    that climb out, absolute ones, links) never delete or create anything outside the
    run directory: the resume either goes on or stops with a JournalError."""
    rng = random.Random(7)
    hostile = ["../victim", "/tmp/../" + str(tmp_path / "victim"), str(tmp_path / "victim"),
               "..", "a/../../victim", "0/../../.."]
    for round_ in range(6):
        run_dir = tmp_path / f"run{round_}"
        interrupted_run(run_dir)
        target = tmp_path / "victim"
        if not target.exists():
            victim(tmp_path)
        before = sorted(p.name for p in tmp_path.iterdir())
        lines = (run_dir / "journal.jsonl").read_text().splitlines()
        for _ in range(3):
            i = rng.randrange(1, len(lines))
            event = json.loads(lines[i])
            key = rng.choice([k for k in ("stage", "trial", "checkpoint", "path") if k in event]
                             or ["stage"])
            value = rng.choice(hostile)
            if key == "trial" and isinstance(event.get("trial"), dict):
                event["trial"]["id" if rng.random() < 0.5 else "continue_from"] = value
            else:
                event[key] = value
            lines[i] = json.dumps(event)
        if round_ % 2 == 0:  # and an event of the attacker's own, at the end
            lines.append(json.dumps({"seq": len(lines), "time": 1.0,
                                     "event": "checkpoint_removed", "stage": "tune",
                                     "trial": rng.choice(hostile), "path": "x"}))
        (run_dir / "journal.jsonl").write_text("\n".join(lines) + "\n")
        with contextlib.suppress(JournalError):
            resume(run_dir)
        assert (target / "thesis.tex").read_text() == "three years of work"
        after = sorted(p.name for p in tmp_path.iterdir())
        assert after == before, "something was created or deleted beside the run"


def test_predict_never_loads_a_model_outside_the_run(tmp_path: Path) -> None:
    """results.json is data too: a best checkpoint pointing outside the run directory
    (a file the attacker planted, which torch would unpickle) is refused, not loaded."""
    from nestor.orchestrator.predict import load_predictor

    planted = tmp_path / "planted.pt"
    planted.write_bytes(b"not a model")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    trial = {"id": "0", "status": "completed", "value": 0.9, "config": {},
             "checkpoint": str(planted)}
    stage = {"name": "tune", "kind": "hpo", "best": trial, "trials": [trial],
             "objective": {"metric": "val_accuracy", "mode": "max"}}
    (run_dir / "results.json").write_text(json.dumps({"stages": [stage]}))
    with pytest.raises(UnsafeRunData, match="outside"):
        load_predictor(run_dir, "tune")
