"""`nestor run` end to end: real Ray, real gangs, real MLflow, real processes.

Most sweeps use small command trainers (a Python script per trial) so that
faults can be staged cheaply; one runs the built-in CNN with dp=2 on real
digits. Every trainer appends a line to an invocation log outside nestor,
which is how the tests know, from outside, what actually ran.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from tests.orchestrator.workflow_helpers import (
    DIES_BEFORE_JOURNALLING_A_RESULT,
    FIT,
    NESTOR,
    events,
    fault_on_call,
    finished,
    mlflow_runs,
    nestor,
    spec_text,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def sweep(tmp_path: Path):
    fit = tmp_path / "fit.py"
    fit.write_text(FIT)
    env = dict(os.environ, FIT_LOG=str(tmp_path / "invocations.log"), FIT_DIR=str(tmp_path))

    def make(mode: str = "", **search: object) -> tuple[Path, Path, dict[str, str]]:
        spec = tmp_path / "spec.yaml"
        spec.write_text(spec_text(fit, **search))
        return spec, tmp_path / "run", dict(env, FIT_MODE=mode)

    return make


def test_a_sweep_journals_tracks_and_reports_every_trial(sweep) -> None:
    spec, run_dir, env = sweep()
    result = nestor("run", str(spec), "--run-dir", str(run_dir), env=env)
    assert result.returncode == 0, result.stderr
    done = finished(run_dir)
    assert len(done) == 12 and all(e["status"] == "completed" for e in done.values())
    results = json.loads((run_dir / "results.json").read_text())
    (stage,) = results["stages"]
    assert stage["n_trials"] == 12 and stage["n_runs"] == 12 and stage["n_failed"] == 0
    best = min(e["value"] for e in done.values())
    assert stage["best"]["value"] == best
    assert stage["slot_seconds"] > 0 and stage["wall_time_s"] > 0
    runs = mlflow_runs(run_dir)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 12
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    assert {r.data.tags["nestor.generation"] for r in children} == {"0", "1", "2"}
    assert all(r.data.tags["nestor.status"] == "completed" for r in children)
    from mlflow.tracking import MlflowClient

    from nestor.orchestrator.projections.store_paths import list_artifacts

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    logged = [a.path for a in list_artifacts(client, run_dir, children[0].info.run_id,
                                             "logs/attempt-1")]
    assert logged and all(p.startswith("logs/attempt-1/") for p in logged)
    stage_plots = [a.path for a in list_artifacts(client, run_dir, parents[0].info.run_id,
                                                  "plots")]
    assert "plots/tune.png" in stage_plots and "plots/tune-slots.png" in stage_plots
    assert (run_dir / "plots" / "tune.png").stat().st_size > 10_000
    table = nestor("results", str(run_dir), "--format", "json", env=env)
    assert json.loads(table.stdout)["stages"][0]["n_trials"] == 12


def test_a_failed_attempt_is_retried_and_counted(sweep) -> None:
    spec, run_dir, env = sweep("fail-first", population=4, generations=1)
    result = nestor("run", str(spec), "--run-dir", str(run_dir), env=env)
    assert result.returncode == 0, result.stderr
    done = finished(run_dir)
    assert len(done) == 4
    assert all(e["status"] == "completed" and e["attempt"] == 2 for e in done.values())
    failures = [e for e in events(run_dir) if e["event"] == "trial_attempt_failed"]
    assert len(failures) == 4 and "exit" in failures[0]["reason"]
    stage = json.loads((run_dir / "results.json").read_text())["stages"][0]
    assert stage["n_runs"] == 8  # every training run counts, failed ones too


def test_nan_results_fail_without_stopping_the_sweep(sweep) -> None:
    spec, run_dir, env = sweep("nan", algorithm="random", budget=8, retries=0)
    result = nestor("run", str(spec), "--run-dir", str(run_dir), env=env)
    assert result.returncode == 0, result.stderr
    done = finished(run_dir)
    nan_trials = [e for e in done.values() if e["trial"]["config"]["x"] > 0]
    assert nan_trials and all(e["status"] == "failed" for e in nan_trials)
    assert all("nan" in e["reason"].lower() for e in nan_trials)
    ok = [e for e in done.values() if e["trial"]["config"]["x"] <= 0]
    assert all(e["status"] == "completed" for e in ok)
    runs = mlflow_runs(run_dir)
    failed = [r for r in runs if r.data.tags.get("nestor.status") == "failed"]
    assert len(failed) == len(nan_trials) and all("nestor.failure" in r.data.tags for r in failed)


def test_a_trial_past_its_timeout_fails_and_the_sweep_goes_on(sweep) -> None:
    spec, run_dir, env = sweep("hang", algorithm="random", budget=6, timeout=3, retries=0)
    started = time.monotonic()
    result = nestor("run", str(spec), "--run-dir", str(run_dir), env=env)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 200
    done = finished(run_dir)
    hung = [e for e in done.values() if e["trial"]["config"]["x"] > 0]
    assert hung and all("timeout after 3 s" in e["reason"] for e in hung)
    assert len(done) == 6


def test_a_killed_driver_resumes_without_rerunning_finished_trials(sweep) -> None:
    spec, run_dir, env = sweep(population=4, generations=4)
    env["FIT_SLEEP"] = "0.5"
    driver = subprocess.Popen([NESTOR, "run", str(spec), "--run-dir", str(run_dir)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if (run_dir / "journal.jsonl").exists() and len(finished(run_dir)) >= 6:
            break
        time.sleep(0.2)
    os.killpg(driver.pid, signal.SIGKILL)  # the driver and everything it started
    driver.wait(timeout=30)
    before = finished(run_dir)
    assert 6 <= len(before) < 16
    status = nestor("status", str(run_dir), env=env)
    assert "interrupted" in status.stdout and f"nestor resume {run_dir}" in status.stdout
    result = nestor("resume", str(run_dir), env=env)
    assert result.returncode == 0, result.stderr
    assert "finished" in nestor("status", str(run_dir), env=env).stdout
    after = finished(run_dir)
    assert len(after) == 16
    for trial_id, event in before.items():  # finished results survived unchanged
        assert after[trial_id]["value"] == event["value"]
    # From outside: each finished configuration's program ran exactly once before the
    # kill and never again after it.
    runs = [tuple(line.split()) for line in (run_dir.parent / "invocations.log").read_text()
            .splitlines()]
    for event in before.values():
        config = event["trial"]["config"]
        assert runs.count((repr(config["x"]), repr(config["y"]))) == 1
    assert len([e for e in events(run_dir) if e["event"] == "trial_finished"]) == 16
    trial_runs = [r for r in mlflow_runs(run_dir) if "mlflow.parentRunId" in r.data.tags]
    assert len(trial_runs) == len({e["trial"]["id"] for e in events(run_dir)
                                   if e["event"] == "trial_started"}) == 16


# A trial is launched (its gang being booked), not journalled yet.
DIES_WHILE_LAUNCHING = fault_on_call("nestor.orchestrator.backends.ray.gangs:GangPool.reserve", 3,
                                     "os.killpg(0, signal.SIGKILL)")


def test_mlflow_shows_no_run_the_journal_does_not_name_and_resume_leaves_no_twin(
        sweep, nestor_with_fault) -> None:
    # MLflow is a projection of the journal: a run exists only for a journalled trial
    # start, under a key derived from the run's run_key, so a driver killed at any
    # instant leaves no run that a resumed driver would make again.
    spec, run_dir, env = sweep(population=2, generations=2)
    driver = nestor_with_fault(DIES_WHILE_LAUNCHING, "run", str(spec), "--run-dir",
                               str(run_dir), env=env, start_new_session=True, timeout=240)
    assert driver.returncode == -signal.SIGKILL, driver.stderr
    started = {e["trial"]["id"] for e in events(run_dir) if e["event"] == "trial_started"}
    assert len(started) == 2
    before = [r for r in mlflow_runs(run_dir) if "mlflow.parentRunId" in r.data.tags]
    assert {r.data.tags["nestor.trial"] for r in before} <= started

    result = nestor("resume", str(run_dir), env=env)
    assert result.returncode == 0, result.stderr
    ids = {e["trial"]["id"] for e in events(run_dir) if e["event"] == "trial_started"}
    trial_runs = [r for r in mlflow_runs(run_dir) if "mlflow.parentRunId" in r.data.tags]
    assert len(ids) == len(trial_runs) == 4
    assert {r.data.tags["nestor.trial"] for r in trial_runs} == ids
    assert all(r.info.status == "FINISHED" for r in trial_runs)


def test_a_result_that_landed_while_the_driver_was_down_is_adopted_not_rerun(
        sweep, nestor_with_fault) -> None:
    # The kill window a random SIGKILL hits now and then (2 of 6 trials re-ran in one
    # check of the engine before): training done, result not journalled.
    spec, run_dir, env = sweep(population=2, generations=2)
    driver = nestor_with_fault(DIES_BEFORE_JOURNALLING_A_RESULT, "run", str(spec),
                               "--run-dir", str(run_dir), env=env, start_new_session=True,
                               timeout=240)
    assert driver.returncode == -signal.SIGKILL, driver.stderr
    assert len(finished(run_dir)) == 2

    result = nestor("resume", str(run_dir), env=env)
    assert result.returncode == 0, result.stderr
    after = finished(run_dir)
    assert len(after) == 4 and all(e["status"] == "completed" for e in after.values())
    adopted = [e for e in after.values() if e.get("adopted")]
    assert adopted, "no result was adopted: the trial whose end the driver missed re-ran"
    runs = [tuple(line.split()) for line in (run_dir.parent / "invocations.log").read_text()
            .splitlines()]
    for event in adopted:  # from outside: its program ran once, before the kill
        config = event["trial"]["config"]
        assert runs.count((repr(config["x"]), repr(config["y"]))) == 1, runs
    trial_runs = [r for r in mlflow_runs(run_dir) if "mlflow.parentRunId" in r.data.tags]
    assert len(trial_runs) == 4 and all(r.info.status == "FINISHED" for r in trial_runs)


# What Horovod raises when Ray cannot place the gang in time.
PLACEMENT_TIMES_OUT_ONCE = fault_on_call(
    "nestor.orchestrator.backends.ray.gangs:GangPool._start_executor", 1,
    "raise TimeoutError('Placement group creation timed out. Make sure your cluster"
    " either has enough resources or use an autoscaling cluster.')")


def test_a_gang_that_cannot_be_placed_fails_one_attempt_which_is_retried(
        sweep, nestor_with_fault) -> None:
    # The pool's side of a real placement timeout is tested in test_gangs; here the
    # driver meets one (raised where Horovod raises it) in a whole run.
    spec, run_dir, env = sweep(population=2, generations=2)
    driver = nestor_with_fault(PLACEMENT_TIMES_OUT_ONCE, "run", str(spec), "--run-dir",
                               str(run_dir), env=env, timeout=240)
    assert driver.returncode == 0, driver.stderr
    assert "Traceback" not in driver.stderr
    (failed,) = [e for e in events(run_dir) if e["event"] == "trial_attempt_failed"]
    assert failed["reason"].startswith("could not start a 1x1 gang: Placement group creation")
    done = finished(run_dir)
    assert len(done) == 4 and all(e["status"] == "completed" for e in done.values())
    assert done[failed["trial"]["id"]]["attempt"] == 2
    (run,) = [r for r in mlflow_runs(run_dir)
              if r.data.tags.get("nestor.trial") == failed["trial"]["id"]]
    assert run.info.status == "FINISHED" and run.data.tags["nestor.attempts"] == "2"


PLACEMENT_TIMES_OUT_THRICE = """
import nestor.orchestrator.backends.ray.gangs as gangs
real, calls = gangs.GangPool._start_executor, []
def flaky(self, shape):
    calls.append(1)
    if len(calls) <= 3:
        raise TimeoutError("Placement group creation timed out.")
    return real(self, shape)
gangs.GangPool._start_executor = flaky
"""


def test_gangs_that_fail_to_start_again_and_again_back_off(sweep, nestor_with_fault) -> None:
    spec, run_dir, env = sweep(algorithm="random", budget=1, retries=3)
    spec.write_text(spec.read_text().replace("resources: {slots: 2}", "resources: {slots: 1}"))
    driver = nestor_with_fault(PLACEMENT_TIMES_OUT_THRICE, "run", str(spec), "--run-dir",
                               str(run_dir), env=env, timeout=240)
    assert driver.returncode == 0, driver.stderr
    log = events(run_dir)
    failed = [e["time"] for e in log if e["event"] == "trial_attempt_failed"]
    (started,) = [e["time"] for e in log if e["event"] == "trial_started"]
    assert len(failed) == 3
    gaps = [b - a for a, b in zip([*failed, started], [*failed, started][1:], strict=False)]
    # 1, 2 and 4 s of backoff, counted from each failure's end (journalled a few ms
    # later); without it the gaps were 0.008, 0.003 and 0.6 s
    assert gaps[0] >= 0.9 and gaps[1] >= 1.8 and gaps[2] >= 3.6, gaps
    assert finished(run_dir)["0"]["attempt"] == 4


def test_sigterm_stops_the_driver_cleanly_and_resume_finishes(sweep) -> None:
    spec, run_dir, env = sweep(population=4, generations=3)
    env["FIT_SLEEP"] = "0.5"
    driver = subprocess.Popen([NESTOR, "run", str(spec), "--run-dir", str(run_dir)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if (run_dir / "journal.jsonl").exists() and len(finished(run_dir)) >= 3:
            break
        time.sleep(0.2)
    driver.send_signal(signal.SIGTERM)  # what scancel and Slurm's --signal send
    _, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 128 + signal.SIGTERM, stderr
    assert f"nestor resume {run_dir}" in stderr and "Traceback" not in stderr
    log = events(run_dir)
    assert log[-1]["event"] == "workflow_interrupted" and log[-1]["reason"] == "SIGTERM"
    before = finished(run_dir)
    assert 3 <= len(before) < 12
    result = nestor("resume", str(run_dir), env=env)
    assert result.returncode == 0, result.stderr
    after = finished(run_dir)
    assert len(after) == 12
    runs = [tuple(line.split()) for line in (run_dir.parent / "invocations.log").read_text()
            .splitlines()]
    for event in before.values():  # nothing finished before the stop ran again
        config = event["trial"]["config"]
        assert runs.count((repr(config["x"]), repr(config["y"]))) == 1


CURVES = """
import os


def climb(config, ctx):
    # A learning curve that rises to config['q']; poor q should be cut short.
    for epoch in range(1, 9):
        with open(os.environ["FIT_LOG"], "a") as log:
            log.write(f"{config['q']!r} {epoch}\\n")
        ctx.report({"val_accuracy": config["q"] * epoch / 8}, epoch)
        if ctx.should_stop():
            break
"""


def test_median_rule_stops_poor_trials_early(tmp_path: Path) -> None:
    (tmp_path / "curves.py").write_text(CURVES)
    spec = tmp_path / "prune.yaml"
    spec.write_text(textwrap.dedent("""
        name: prune
        resources: {slots: 1}
        stages:
          - name: tune
            kind: hpo
            trainer: {function: "curves:climb"}
            search: {algorithm: grid, points: 8}
            space: {q: {type: float, low: 0.1, high: 0.9}}
            early_stopping: {rule: median, warmup_epochs: 2, startup_trials: 2}
        """))
    # Ray's workers inherit the driver's environment, so they can import curves.py.
    env = dict(os.environ, PYTHONPATH=str(tmp_path), FIT_LOG=str(tmp_path / "epochs.log"))
    result = nestor("run", str(spec), "--run-dir", str(tmp_path / "run"), env=env)
    assert result.returncode == 0, result.stderr
    done = finished(tmp_path / "run")
    assert len(done) == 8
    epochs: dict[float, int] = {}
    for line in (tmp_path / "epochs.log").read_text().splitlines():
        q, epoch = line.split()
        epochs[float(q)] = max(epochs.get(float(q), 0), int(epoch))
    pruned = [e for e in done.values() if e["status"] == "pruned"]
    assert pruned, "no trial was stopped early"
    for event in pruned:  # stopped ones really trained fewer epochs, from outside
        assert epochs[event["trial"]["config"]["q"]] < 8
    best = max(done.values(), key=lambda e: e["value"])
    assert best["status"] == "completed" and epochs[best["trial"]["config"]["q"]] == 8
    stage = json.loads((tmp_path / "run" / "results.json").read_text())["stages"][0]
    assert stage["n_pruned"] == len(pruned)


KILLER = """
import os, signal

import torch


def fragile(config, ctx):
    marker = os.path.join(os.environ["FIT_DIR"], "killed-once")
    if ctx.rank == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)  # a rank dies mid-trial
    total = ctx.hvd.allreduce(torch.tensor([1.0]), op=ctx.hvd.Sum).item()
    return {"val_accuracy": config["q"], "ranks": total}
"""


def test_a_killed_rank_fails_the_attempt_and_a_fresh_gang_retries_it(tmp_path: Path) -> None:
    (tmp_path / "killer.py").write_text(KILLER)
    spec = tmp_path / "kill.yaml"
    spec.write_text(textwrap.dedent("""
        name: kill
        resources: {slots: 2}
        stages:
          - name: tune
            kind: hpo
            trainer: {function: "killer:fragile"}
            parallel: {data: 2}
            search: {algorithm: random, budget: 2}
            space: {q: {type: float, low: 0.1, high: 0.9}}
            trial: {timeout: 120, retries: 1}
        """))
    env = dict(os.environ, PYTHONPATH=str(tmp_path), FIT_DIR=str(tmp_path))
    result = nestor("run", str(spec), "--run-dir", str(tmp_path / "run"), env=env)
    assert result.returncode == 0, result.stderr
    log = events(tmp_path / "run")
    failures = [e for e in log if e["event"] == "trial_attempt_failed"]
    assert len(failures) == 1 and "died" in failures[0]["reason"]
    done = finished(tmp_path / "run")
    assert all(e["status"] == "completed" for e in done.values()) and len(done) == 2
    assert all(e["metrics"]["ranks"] == 2.0 for e in done.values())  # both ranks took part
    killed = failures[0]["trial"]["id"]
    gangs = [e["gang"] for e in log if e["event"] == "trial_started" and e["trial"]["id"] == killed]
    assert len(gangs) == 2 and gangs[0] != gangs[1]  # the retry ran on a fresh gang


def test_builtin_cnn_trials_run_as_two_rank_horovod_jobs(tmp_path: Path) -> None:
    spec = tmp_path / "cnn.yaml"
    spec.write_text(textwrap.dedent("""
        name: cnn-digits
        resources: {slots: 2}
        stages:
          - name: tune
            kind: hpo
            trainer: {name: cnn, settings: {dataset: digits, epochs: 2}}
            parallel: {data: 2}
            search: {algorithm: random, budget: 2, seed: 0}
            space:
              lr: {type: float, low: 0.02, high: 0.1, log: true}
        """))
    result = nestor("run", str(spec), "--run-dir", str(tmp_path / "run"),
                    env=dict(os.environ), timeout=500)
    assert result.returncode == 0, result.stderr
    done = finished(tmp_path / "run")
    assert len(done) == 2 and all(e["status"] == "completed" for e in done.values())
    for event in done.values():
        assert event["metrics"]["val_accuracy"] > 0.5  # 10 classes: chance is 0.1
        assert "test_accuracy" in event["metrics"]
    started = [e for e in events(tmp_path / "run") if e["event"] == "trial_started"]
    assert {e["shape"] for e in started} == {"2x1"}
    best = json.loads((tmp_path / "run" / "results.json").read_text())["stages"][0]["best"]
    assert Path(best["checkpoint"]).is_file()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'run' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("cnn-digits")
    (stage_run,) = [r for r in client.search_runs([experiment.experiment_id])
                    if "mlflow.parentRunId" not in r.data.tags]
    from nestor.orchestrator.projections.store_paths import list_artifacts

    assert list_artifacts(client, tmp_path / "run", stage_run.info.run_id, "best_checkpoint")
    assert len({e["gang"] for e in started}) == 1  # the second trial reused the warm gang


def test_an_early_stopper_takes_a_report_that_comes_before_its_start() -> None:
    """The driver does not wait for the stopper to register an attempt (its loop
    never blocks on the actor), so the attempt's first report may come first."""
    from nestor.orchestrator.backends.ray.pruning import EarlyStopper

    stopper = EarlyStopper("median", "val_accuracy", "max", warmup_epochs=0,
                           reduction_factor=3, startup_trials=1)
    stopper.start("a")
    for step in range(3):
        stopper.report("a", {"val_accuracy": 0.9}, step)
    stopper.finish("a", 0.9, pruned=False)
    for step in range(3):  # "b" reports before its start call arrives
        stopper.report("b", {"val_accuracy": 0.1}, step)
    stopper.start("b")  # late: must not forget b's reports
    assert stopper.should_stop("b")
    stopper.finish("b", None, pruned=True)
    stopper.start("b")  # a retry of b starts clean
    assert not stopper.should_stop("b")
