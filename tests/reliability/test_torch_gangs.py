"""The torch backend end to end: ``backend: torch`` trials run on warm torch.distributed
gangs that never import Horovod, and a collective one rank never joins fails the
attempt, which is retried on a new gang.

Real `nestor run`, real Ray, real torch.distributed over Gloo, 2 ranks per trial.
The function trainer checks from inside each rank what it runs on (the backend,
its process group, whether Horovod was imported) and writes it down; the test
reads those files and the journal.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from nestor_harness import events, finished, kill_tagged, nestor, tagged_env, wait_for_no_tagged

pytestmark = pytest.mark.slow

TRAINER = """
import json, os, sys

import torch


def train(config, ctx):
    where = os.environ["FIT_DIR"]
    import torch.distributed as dist

    seen = {"backend": ctx.backend, "rank": ctx.rank, "pid": os.getpid(),
            "world": dist.get_world_size() if dist.is_initialized() else None,
            "pg_backend": str(dist.get_backend()) if dist.is_initialized() else None,
            "horovod_imported": any(m.startswith("horovod") for m in sys.modules)}
    name = f"{config['mode']}-{config.get('x', 0)}-rank{ctx.rank}"
    first = not os.path.exists(os.path.join(where, name + ".json"))
    with open(os.path.join(where, name + ".json"), "a") as out:
        out.write(json.dumps(seen) + "\\n")
    if config["mode"] == "stall" and first and ctx.rank == 1:
        return {"val_accuracy": 0.0}  # rank 1 never joins the collective below
    total = ctx.comm.allreduce_sum(torch.tensor([config.get("x", 1.0)]), ctx.dp_set, "sum")
    return {"val_accuracy": 0.5, "total": float(total.item())}
"""


def _spec(tmp_path: Path, space: str, retries: int = 0) -> Path:
    spec = tmp_path / "torch.yaml"
    spec.write_text(textwrap.dedent(f"""
        name: torch-gangs
        resources: {{slots: 2}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{function: "torchfit:train"}}
            backend: torch
            parallel: {{data: 2}}
            search: {{algorithm: grid}}
            space: {space}
            trial: {{timeout: 120, retries: {retries}}}
        """))
    (tmp_path / "torchfit.py").write_text(TRAINER)
    return spec


def _seen(tmp_path: Path, prefix: str) -> list[dict]:
    return [json.loads(line) for path in sorted(tmp_path.glob(f"{prefix}-*.json"))
            for line in path.read_text().splitlines()]


def test_torch_trials_share_a_warm_gang_without_horovod(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "{mode: {type: constant, value: ok},"
                           " x: {type: categorical, values: [1.5, 2.5, 3.5]}}")
    env = tagged_env(tmp_path, PYTHONPATH=str(tmp_path), FIT_DIR=str(tmp_path))
    run_dir = tmp_path / "run"
    try:
        done = nestor("run", str(spec), "--run-dir", str(run_dir), env=env, timeout=400)
        assert done.returncode == 0, done.stderr[-3000:]
        results = finished(run_dir)
        assert len(results) == 3 and all(e["status"] == "completed" for e in results.values())
        # Each trial's allreduce over its 2 ranks: 2 * x.
        assert sorted(e["metrics"]["total"] for e in results.values()) == [3.0, 5.0, 7.0]
        seen = _seen(tmp_path, "ok")
        assert len(seen) == 6
        assert {s["backend"] for s in seen} == {"torch"}
        assert {s["world"] for s in seen} == {2} and {s["pg_backend"] for s in seen} == {"gloo"}
        assert not any(s["horovod_imported"] for s in seen), seen
        # One gang, warm: the same two processes ran all three trials.
        assert len({s["pid"] for s in seen}) == 2
        started = [e for e in events(run_dir) if e["event"] == "trial_started"]
        assert len({e["gang"] for e in started}) == 1, started
        assert {e.get("comm") for e in started} == {"torch"}  # journalled, for MLflow
        assert wait_for_no_tagged(env["NESTOR_TEST_TAG"]) == {}
    finally:
        kill_tagged(env["NESTOR_TEST_TAG"])


def test_a_collective_one_torch_rank_never_joins_fails_and_retries_on_a_new_gang(
        tmp_path: Path) -> None:
    spec = _spec(tmp_path, "{mode: {type: categorical, values: [stall]}}", retries=1)
    env = tagged_env(tmp_path, PYTHONPATH=str(tmp_path), FIT_DIR=str(tmp_path),
                     NESTOR_COLLECTIVE_TIMEOUT_S="5")
    run_dir = tmp_path / "run"
    try:
        done = nestor("run", str(spec), "--run-dir", str(run_dir), env=env, timeout=400)
        assert done.returncode == 0, done.stderr[-3000:]
        log = events(run_dir)
        failures = [e for e in log if e["event"] == "trial_attempt_failed"]
        assert len(failures) == 1, failures
        # Rank 0 gave up waiting after the collective timeout, not the trial timeout.
        assert "Timed out" in failures[0]["reason"], failures[0]["reason"]
        assert failures[0]["slot_seconds"] / 2 < 60
        (result,) = finished(run_dir).values()
        assert result["status"] == "completed" and result["metrics"]["total"] == 2.0
        gangs = [e["gang"] for e in log if e["event"] == "trial_started"]
        assert len(gangs) == 2 and gangs[0] != gangs[1], gangs  # not the broken gang again
        pids = [{s["pid"] for s in _seen(tmp_path, "stall")}]
        assert len(pids[0]) == 4, pids  # two ranks, then two fresh ones
        assert wait_for_no_tagged(env["NESTOR_TEST_TAG"]) == {}
    finally:
        kill_tagged(env["NESTOR_TEST_TAG"])


def test_a_model_parallel_torch_gang_trains_as_one_process_would(tmp_path: Path) -> None:
    """mp = 2 on a torch gang placed by nestor (its own ranks, groups and rendezvous)
    follows the unsplit model's loss curve."""
    from nestor.trainers import TrainerRef, TrialRequest, run_trial

    settings = {"dataset": "digits", "epochs": 2, "max_train_samples": 300, "seed": 2}
    config = {"width": 33, "batch_size": 30, "lr": 0.1}
    spec = tmp_path / "mp.yaml"
    spec.write_text(textwrap.dedent(f"""
        name: torch-mp
        resources: {{slots: 2}}
        stages:
          - name: fit
            kind: train
            trainer: {{name: mlp, settings: {json.dumps(settings)}}}
            config: {json.dumps(config)}
            backend: torch
            parallel: {{data: 1, model: 2}}
        """))
    env = tagged_env(tmp_path)
    run_dir = tmp_path / "run"
    try:
        done = nestor("run", str(spec), "--run-dir", str(run_dir), env=env, timeout=400)
        assert done.returncode == 0, done.stderr[-3000:]
        (result,) = finished(run_dir).values()
        assert result["status"] == "completed", result
        started = [e for e in events(run_dir) if e["event"] == "trial_started"]
        assert [(e["shape"], e.get("comm")) for e in started] == [("1x2", "torch")]
        alone = run_trial(TrialRequest("alone", TrainerRef.builtin("mlp"), settings=settings,
                                       config=config))
        assert alone.ok, alone.details
        ours = [h["train_loss"] for h in result["history"]]
        ref = [h["train_loss"] for h in alone.history]
        assert len(ours) == 2 and ours == pytest.approx(ref, rel=1e-5)
        assert wait_for_no_tagged(env["NESTOR_TEST_TAG"]) == {}
    finally:
        kill_tagged(env["NESTOR_TEST_TAG"])
