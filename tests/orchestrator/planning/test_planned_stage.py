"""A stage with ``parallel: auto`` is planned by the engine on the slots its
backend has, keeps its journalled plan across a driver restart, and widens its
last trials when too few are left to fill the slots. Run on the simulated
cluster: the same StageScheduler and TrialRunner that drive Ray."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nestor.orchestrator.backends import SimulatedBackend, fixed_trials, lognormal_trials
from nestor.orchestrator.backends.stopping import Interrupted
from nestor.orchestrator.engine.workflow import StageScheduler, run_workflow
from nestor.orchestrator.journal.journal import Journal, read_events
from nestor.orchestrator.planning import plan_stage
from nestor.orchestrator.projections.tables import fmt
from nestor.orchestrator.spec import load_spec_text


def planned(budget: int) -> Any:
    return load_spec_text(textwrap.dedent(f"""
        name: planned
        stages:
          - name: tune
            kind: hpo
            trainer: {{name: cnn, settings: {{dataset: digits, epochs: 300}}}}
            parallel: auto
            batch: {{global_max: 512}}
            search: {{algorithm: random, budget: {budget}, seed: 3}}
            space: {{lr: {{type: float, low: 0.01, high: 0.1, log: true}}}}
        """))


def events(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_events(run_dir / "journal.jsonl") if e["event"] == kind]


def shapes(run_dir: Path) -> list[str]:
    return [e["shape"] for e in events(run_dir, "trial_started")]


def test_the_stage_is_planned_on_the_backends_slots_and_widens_its_last_trials(
        tmp_path: Path) -> None:
    # 32 slots, not this host's; durations that differ, so trials end one by one
    backend = SimulatedBackend(4, 8, lognormal_trials(60.0, 0.3), seed=1)
    run_workflow(planned(40), backend, tmp_path)
    plan = events(tmp_path, "stage_planned")
    assert len(plan) == 1 and plan[0]["slots"] == 32, plan
    first = f"{plan[0]['dp']}x{plan[0]['mp']}"
    at_once = 32 // (plan[0]["dp"] * plan[0]["mp"])
    assert at_once > 1, plan  # several trials at once: a tail to widen
    started = shapes(tmp_path)
    assert len(started) == 40
    assert set(started[:at_once]) == {first}
    tail = events(tmp_path, "stage_replanned")
    assert tail, "the last trials were never re-planned"
    assert all(0 < e["left"] < at_once for e in tail), tail
    wider = f"{tail[0]['dp']}x{tail[0]['mp']}"
    assert tail[0]["dp"] * tail[0]["mp"] > plan[0]["dp"] * plan[0]["mp"], tail
    assert wider in started[-tail[0]["left"]:]
    # Trials running when it re-planned kept their gangs (none was stopped; each
    # ended at its old shape); nothing ever held more slots than the cluster has.
    assert all(a.outcome == "ok" for a in backend.attempts)
    replanned_at = tail[0]["seq"]
    before = [e for e in events(tmp_path, "trial_finished") if e["seq"] > replanned_at
              and e["trial"]["id"] in {s["trial"]["id"] for s in events(tmp_path, "trial_started")
                                       if s["seq"] < replanned_at}]
    assert before and all(e["status"] == "completed" for e in before)
    assert peak_ranks(backend) <= 32


def test_results_name_the_trials_a_tail_re_plan_gave_another_global_batch_and_lr(
        tmp_path: Path) -> None:
    """A re-plan that widens dp changes the last trials' global batch and, by the
    stage's lr_rule (linear here), their learning rate: `nestor results` says so."""
    from click.testing import CliRunner

    from nestor.orchestrator.commands.cli import cli
    from nestor.trainers.catalog import TRAINERS

    backend = SimulatedBackend(4, 8, lognormal_trials(60.0, 0.3), seed=1)
    run_workflow(planned(40), backend, tmp_path)
    (plan,) = events(tmp_path, "stage_planned")
    widths = {e["trial"]["id"]: (int(e["shape"].split("x")[0]), e["trial"]["config"]["lr"])
              for e in events(tmp_path, "trial_started")}
    wider = {t: w for t, w in widths.items() if w[0] != plan["dp"]}
    assert wider, "no re-plan changed the data-parallel width"
    done = CliRunner().invoke(cli, ["results", str(tmp_path)], terminal_width=10_000)
    assert done.exit_code == 0, done.output
    text = " ".join(done.output.split())  # rich may wrap a long line
    assert "tune re-planned its tail (to " in text, text
    assert f"{len(wider)} trial(s) ran at another data-parallel width" in text, text
    per_rank = TRAINERS["cnn"].options["batch_size"].default
    for trial, (dp, lr) in wider.items():
        assert (f"{trial} at {dp}x1: global batch {per_rank * dp}, lr {fmt(lr * dp)}"
                in text), (trial, text)
    assert f"the other {40 - len(wider)} ran at {plan['dp']}x{plan['mp']}, global batch" \
           f" {per_rank * plan['dp']}" in text
    # A driver that resumes the stage rebuilds the same account from the journal
    # (on other slots, where it would plan otherwise).
    from nestor.orchestrator.engine.kinds.hpo import hpo_runner
    from nestor.orchestrator.projections.kinds.hpo import replanned_lines

    log = read_events(tmp_path / "journal.jsonl")
    journal = Journal(tmp_path / "resumed.jsonl")
    try:
        workflow = planned(40)
        runner = hpo_runner(workflow, workflow.stage("tune"), run_dir=tmp_path, journal=journal,
                            backend=SimulatedBackend(8, 8, fixed_trials(60.0), seed=2),
                            events=log)
        runner.restore(log)
    finally:
        journal.close()
    (line,) = replanned_lines(runner.summary())
    assert " ".join(line.split()) in text


def peak_ranks(backend: SimulatedBackend) -> int:
    """The most ranks the simulator's ledger shows running at one moment."""
    edges = sorted((t, d) for a in backend.attempts
                   for t, d in ((a.launched, a.ranks), (a.ended or a.launched, -a.ranks)))
    peak = busy = 0
    for _, change in edges:  # at one instant, ends (negative) sort before starts
        busy += change
        peak = max(peak, busy)
    return peak


def test_a_resumed_driver_keeps_the_journalled_plan(tmp_path: Path) -> None:
    first = SimulatedBackend(4, 8, fixed_trials(60.0), seed=1, time_limit_s=150.0)
    with pytest.raises(Interrupted):
        run_workflow(planned(200), first, tmp_path)
    before = events(tmp_path, "stage_planned")
    assert len(before) == 1 and before[0]["slots"] == 32
    started_before = len(events(tmp_path, "trial_started"))
    # The new driver sits on twice the slots, where a fresh plan would differ...
    bigger = SimulatedBackend(8, 8, fixed_trials(60.0), seed=2, time_limit_s=150.0)
    fresh = plan_stage(planned(200), "tune", 64)
    assert (fresh.shape.dp, fresh.shape.mp) != (before[0]["dp"], before[0]["mp"])
    # ...but it goes on with the shape the journal holds, and plans nothing new.
    journal = Journal(tmp_path / "journal.jsonl")
    try:
        scheduler = StageScheduler(planned(200), run_dir=tmp_path, backend=bigger,
                                   journal=journal, events=read_events(tmp_path / "journal.jsonl"),
                                   on_progress=None)
        with pytest.raises(Interrupted):
            scheduler.run()
    finally:
        journal.close()
        bigger.shutdown()
    assert len(events(tmp_path, "stage_planned")) == 1
    # Every trial it started kept that shape (until a journalled tail re-plan, if
    # it got that far).
    log = read_events(tmp_path / "journal.jsonl")
    after = [e for e in log if e["event"] == "trial_started"][started_before:]
    replanned = next((e for e in log if e["event"] == "stage_replanned"), None)
    kept = [e["shape"] for e in after if replanned is None or e["seq"] < replanned["seq"]]
    assert kept and set(kept) == {f"{before[0]['dp']}x{before[0]['mp']}"}, kept


RECORDED = Path(__file__).parent / "data" / "cnn-mnist5k-2core.json"


def test_a_resumed_driver_does_not_profile_again(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The profile is journalled with the plan: the resumed stage neither measures
    again nor re-plans. (Profiling is stood in for by a recorded profile: the
    simulated cluster runs no trainer; the real path is the test below.)"""
    from nestor.orchestrator.planning import StagePlanner

    calls: list[int] = []

    def recorded_job(self: StagePlanner) -> tuple[Any, ...]:
        calls.append(1)
        return (json.loads, RECORDED.read_text())

    monkeypatch.setattr(StagePlanner, "profile_job", recorded_job)
    monkeypatch.setenv("NESTOR_CACHE_DIR", str(tmp_path / "empty-cache"))
    first = SimulatedBackend(4, 8, fixed_trials(60.0), seed=1, time_limit_s=150.0)
    first.measurable = True
    with pytest.raises(Interrupted):
        run_workflow(planned(200), first, tmp_path / "run")
    plan = events(tmp_path / "run", "stage_planned")
    assert calls == [1] and len(plan) == 1 and plan[0]["measured"] is True
    assert plan[0]["profile"]["key"] == json.loads(RECORDED.read_text())["key"]
    again = SimulatedBackend(4, 8, fixed_trials(60.0), seed=2, time_limit_s=150.0)
    again.measurable = True
    journal = Journal(tmp_path / "run" / "journal.jsonl")
    try:
        with pytest.raises(Interrupted):
            StageScheduler(planned(200), run_dir=tmp_path / "run", backend=again,
                           journal=journal, events=read_events(tmp_path / "run" / "journal.jsonl"),
                           on_progress=None).run()
    finally:
        journal.close()
        again.shutdown()
    assert calls == [1], "the resumed driver profiled again"
    assert len(events(tmp_path / "run", "stage_planned")) == 1


PROFILED_IN_THE_DRIVER = """
import nestor.orchestrator.planning._profiler as profiler
def refused(*args, **kwargs):
    raise AssertionError("the driver profiled the trainer itself")
profiler.profile = refused
"""


@pytest.mark.slow
def test_a_planned_stage_measures_its_trainer_on_the_allocation_once(
        tmp_path: Path, nestor_with_fault: Any) -> None:
    """A real run: the profile is measured by real Horovod ranks in a Ray task (the
    driver refuses to), journalled with the plan, and cached for the next run."""
    spec = tmp_path / "auto.yaml"
    spec.write_text(textwrap.dedent("""
        name: auto
        resources: {slots: 2}
        stages:
          - name: tune
            kind: hpo
            trainer: {name: mlp, settings: {dataset: digits, epochs: 1}}
            parallel: auto
            batch: {global_max: 128}
            search: {algorithm: random, budget: 2, seed: 1}
            space: {lr: {type: float, low: 0.01, high: 0.1, log: true}}
        """))
    env = {**os.environ, "NESTOR_CACHE_DIR": str(tmp_path / "cache")}
    records = []
    for run in ("one", "two"):
        driver = nestor_with_fault(PROFILED_IN_THE_DRIVER, "run", str(spec), "--run-dir",
                                   str(tmp_path / run), timeout=900, env=env,
                                   cwd=str(Path(__file__).parents[3]))
        assert driver.returncode == 0, driver.stderr
        assert "Traceback" not in driver.stderr
        plan = events(tmp_path / run, "stage_planned")
        assert len(plan) == 1 and plan[0]["measured"] is True, plan
        records.append(plan[0]["profile"])
        trials = events(tmp_path / run, "trial_finished")
        assert len(trials) == 2 and all(t["status"] == "completed" for t in trials)
        shape = f"{plan[0]['dp']}x{plan[0]['mp']}"
        assert {e["shape"] for e in events(tmp_path / run, "trial_started")} == {shape}
    profiled = {(s["dp"], s["mp"]) for s in records[0]["steps"]}
    assert profiled == {(1, 1), (2, 1), (1, 2)}
    assert list((tmp_path / "cache" / "profiles").glob("*.json")), "nothing was cached"
    assert records[1] == records[0], "the second run measured again instead of the cache"
