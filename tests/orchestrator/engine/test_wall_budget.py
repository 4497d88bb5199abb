"""A stage's wall-clock budget (``search.budget: {wall: ...}``) on the real scheduler
and a simulated cluster (its virtual clock: hours in milliseconds, exactly).

No trial starts that could not finish by the limit, as the median of the trials
finished so far says; at the limit the running trials are stopped, journalled
stopped (not failed, not retried) and the stage ends with its reason while the
next stage runs; a resumed stage goes on from the time it had spent."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from nestor.orchestrator.backends import SimulatedBackend, fixed_trials
from nestor.orchestrator.backends.stopping import Interrupted
from nestor.orchestrator.engine.workflow import run_workflow
from nestor.orchestrator.journal.journal import read_events
from nestor.orchestrator.spec import load_spec_text

SPEC = textwrap.dedent("""
    name: wall
    stages:
      - name: tune
        kind: hpo
        trainer: {{function: "nestor.orchestrator.simulate:simulated_trial"}}
        search: {{algorithm: random, budget: {budget}, seed: 1}}
        trial: {{retries: 2}}
        space:
          x: {{type: float, low: 0, high: 1}}
        objective: {{metric: val_accuracy, mode: max}}
      - name: after
        kind: hpo
        from: [tune]
        trainer: {{function: "nestor.orchestrator.simulate:simulated_trial"}}
        search: {{algorithm: random, budget: 2, seed: 1}}
        space:
          x: {{type: float, low: 0, high: 1}}
        objective: {{metric: val_accuracy, mode: max}}
    """)


def run(tmp_path: Path, budget: str, trial_s: float, **backend: object) -> dict:
    cluster = SimulatedBackend(1, 2, fixed_trials(trial_s, 0.5), seed=1, startup_s=0.0,
                               **backend)  # type: ignore[arg-type]
    return run_workflow(load_spec_text(SPEC.format(budget=budget)), cluster, tmp_path / "run")


def trial_events(tmp_path: Path, stage: str = "tune") -> list[dict]:
    return [e for e in read_events(tmp_path / "run" / "journal.jsonl")
            if e["event"].startswith("trial") and e["stage"] == stage]


@pytest.mark.timeout(60)  # the wall clock alone ends this search: without it, none does
def test_no_trial_starts_that_could_not_finish_by_the_limit(tmp_path: Path) -> None:
    """100 s trials two at a time under 350 s: three rounds end at 300 s; a fourth could
    not finish (300 + 100 > 350), so none starts, and the stage ends then, not at 350."""
    results = run(tmp_path, "{wall: 350s}", 100.0)
    tune = results["stages"][0]
    assert tune["n_trials"] == 6 and tune["n_failed"] == 0
    assert [t["status"] for t in tune["trials"]] == ["completed"] * 6
    assert tune["stop_reason"] == ("wall budget 350s: the next trial (median 100 s) could not"
                                   " finish by it")
    finished = [e for e in trial_events(tmp_path) if e["event"] == "trial_finished"]
    assert max(e["elapsed_s"] for e in finished) == pytest.approx(300.0)
    assert results["stages"][1]["n_trials"] == 2  # the next stage runs


def test_a_count_that_comes_first_ends_the_stage(tmp_path: Path) -> None:
    tune = run(tmp_path, "{trials: 3, wall: 2h}", 100.0)["stages"][0]
    assert tune["n_trials"] == 3 and "wall" not in str(tune["stop_reason"])


def test_at_the_limit_running_trials_are_stopped_not_failed_and_the_next_stage_runs(
        tmp_path: Path) -> None:
    """300 s trials under 150 s: none finishes, so both start; at 150 s both are stopped,
    journalled once each as stopped (never retried, though the stage retries failures),
    and the stage ends with its reason, in results.json too."""
    results = run(tmp_path, "{trials: 40, wall: 150s}", 300.0)
    tune = results["stages"][0]
    events = trial_events(tmp_path)
    started = [e["trial"]["id"] for e in events if e["event"] == "trial_started"]
    finished = [e for e in events if e["event"] == "trial_finished"]
    assert sorted(started) == sorted(e["trial"]["id"] for e in finished) == ["0", "1"]
    assert not [e for e in events if e["event"] == "trial_attempt_failed"]
    for event in finished:
        assert (event["status"], event["reason"], event["attempt"]) == (
            "stopped", "wall budget 150s reached", 1)
        assert event["elapsed_s"] == pytest.approx(150.0)
    assert tune["stop_reason"] == "wall budget 150s reached"
    assert (tune["n_stopped"], tune["n_failed"]) == (2, 0)
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["stages"][0]["stop_reason"] == "wall budget 150s reached"
    after = results["stages"][1]
    assert after["n_trials"] == 2 and {t["status"] for t in after["trials"]} == {"completed"}


def test_a_resumed_stage_goes_on_from_the_time_it_had_spent(tmp_path: Path) -> None:
    """Under 350 s, the allocation ends at 150 s with two trials running. The resumed
    driver (a new cluster, its clock at 0) counts the 150 s spent: the two interrupted
    trials run again (to 250 s), one more round fits (to 350 s), and that is all; a
    fresh limit would have run two rounds more."""
    with pytest.raises(Interrupted):
        run(tmp_path, "{trials: 40, wall: 350s}", 100.0, time_limit_s=150.0)
    cluster = SimulatedBackend(1, 2, fixed_trials(100.0, 0.5), seed=1, startup_s=0.0)
    results = run_workflow(load_spec_text(SPEC.format(budget="{trials: 40, wall: 350s}")), cluster,
                           tmp_path / "run", resume=True)
    tune = results["stages"][0]
    assert tune["n_trials"] == 6 and {t["status"] for t in tune["trials"]} == {"completed"}
    finished = [e for e in trial_events(tmp_path) if e["event"] == "trial_finished"]
    assert len(finished) == 6
    assert max(e["elapsed_s"] for e in finished) == pytest.approx(350.0)
    assert "wall budget 350s" in tune["stop_reason"]
    assert results["stages"][1]["n_trials"] == 2


def test_a_stage_resumed_past_its_limit_runs_nothing_more(tmp_path: Path) -> None:
    """Killed with 150 s of a 150 s budget spent (its trials running): the resumed stage
    starts nothing; the interrupted trials are journalled stopped, exactly once."""
    with pytest.raises(Interrupted):
        run(tmp_path, "{trials: 40, wall: 150s}", 300.0, time_limit_s=149.0)
    cluster = SimulatedBackend(1, 2, fixed_trials(300.0, 0.5), seed=1, startup_s=0.0,
                               time_limit_s=None)
    # 149 s spent: 1 s is left, and the trials are restarted, then stopped at the limit.
    results = run_workflow(load_spec_text(SPEC.format(budget="{trials: 40, wall: 150s}")), cluster,
                           tmp_path / "run", resume=True)
    tune = results["stages"][0]
    assert results["virtual_time_s"] <= 300.0 + 1.5  # the next stage's 300 s, and 1 s
    finished = [e for e in trial_events(tmp_path) if e["event"] == "trial_finished"]
    assert sorted(e["trial"]["id"] for e in finished) == ["0", "1"]
    assert {e["status"] for e in finished} == {"stopped"}
    assert max(e["elapsed_s"] for e in finished) == pytest.approx(150.0)
    assert tune["stop_reason"] == "wall budget 150s reached"


def test_sweep_and_tune_take_a_wall_limit_and_refuse_a_bad_one(tmp_path: Path) -> None:
    """`nestor sweep --wall` and `nestor.tune(wall=...)` write the spec's form; a bad
    duration is the spec's error, naming the field, exit 2, no traceback, nothing run."""
    from click.testing import CliRunner

    import nestor
    from nestor.orchestrator.commands.cli import cli
    from nestor.orchestrator.commands.sweep import build_spec, spec_yaml
    from nestor.orchestrator.spec.budget import with_wall

    spec = build_spec(trainer=None, command="python3 fit.py", params=["x=float:0:1"],
                      settings=[], algorithm="random", budget=with_wall(5, "2h"),
                      metric=None, mode="max", result_pattern=None, dp=1, mp=1, parallel=None,
                      slots=None, seed=0)
    search = load_spec_text(spec_yaml(spec)).stage("sweep").search
    assert (search.budget, search.wall_s) == (5, 7200.0)
    assert with_wall("3slot-h", "30m") == {"slot_hours": 3.0, "wall": "30m"}
    result = CliRunner().invoke(cli, ["sweep", "--command", "python3 fit.py", "--mode", "max",
                                      "--param", "x=float:0:1", "--wall", "2x",
                                      "--run-dir", str(tmp_path / "never")])
    assert result.exit_code == 2, result.output
    assert "search.budget" in result.output and "budget.wall must be" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "never").exists()
    with pytest.raises(nestor.NestorError, match=r"budget\.wall must be positive"):
        nestor.tune("nestor.orchestrator.simulate:simulated_trial",
                    {"x": {"type": "float", "low": 0.0, "high": 1.0}}, wall="0m",
                    run_dir=tmp_path / "never")
    assert not (tmp_path / "never").exists()
