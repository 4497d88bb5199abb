"""Going on with a run (issue 39): a finished search extended to a larger budget, a
failed train stage run again with the search before it kept, a search warm-started
from earlier results and given configurations to try first, and exactly-once
through a kill at any point of an extension.

On the simulated cluster (the one run path, `run_workflow`, on a virtual clock): a
driver is killed exactly where the test says, in a process of its own, as in
test_kill_after_a_result.py; the resume then runs here. The CLI and Python API
paths of the same features run on real Ray in test_python_api.py."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from nestor.orchestrator.backends import SimulatedBackend, lognormal_trials
from nestor.orchestrator.backends.simulated.backend import Draw
from nestor.orchestrator.engine.reopen import ReopenError, edited_budget
from nestor.orchestrator.engine.workflow import RunError, run_workflow
from nestor.orchestrator.spec import load_spec_text
from tests.orchestrator.engine.test_kill_after_a_result import events, tells


def spec(search: str, more: str = "") -> str:
    return textwrap.dedent(f"""
        name: extended
        stages:
          - name: tune
            kind: hpo
            trainer: {{function: "nestor.orchestrator.simulate:simulated_trial"}}
            search: {search}
            space:
              x: {{type: float, low: 0, high: 1}}
              y: {{type: float, low: 0, high: 1}}
            objective: {{metric: val_accuracy, mode: max}}
        """) + more


def backend(model: Any = None, seed: int = 1) -> SimulatedBackend:
    return SimulatedBackend(2, 2, model or lognormal_trials(60.0, 0.3), seed=seed)


def configs(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {e["trial"]["id"]: e["trial"]["config"] for e in events(run_dir, "trial_started")}


RANDOM = "{algorithm: random, budget: 6, seed: 4}"


def test_a_finished_search_extended_goes_on_as_the_same_search(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = run_workflow(load_spec_text(spec(RANDOM)), backend(), run_dir)
    assert first["stages"][0]["n_trials"] == 6
    before = events(run_dir, "trial_finished")

    results = run_workflow(load_spec_text(spec(RANDOM)), backend(seed=2), run_dir,
                           resume=True, reopen={"budget": 10})

    (stage,) = results["stages"]
    assert stage["n_trials"] == 10 and stage["stop_reason"] == "all 10 planned trials were run"
    done = events(run_dir, "trial_finished")
    assert done[:6] == before, "the finished trials' events changed"
    ids = [e["trial"]["id"] for e in done]
    assert sorted(ids, key=int) == [str(i) for i in range(10)], "a trial ran twice"
    assert set(tells(run_dir).values()) == {1}
    # The same search: its four new trials are those a search of 10 asks after its first
    # six (random search's RNG restored, not a new one).
    whole = tmp_path / "whole"
    run_workflow(load_spec_text(spec(RANDOM.replace("6", "10"))), backend(), whole)
    assert configs(run_dir) == configs(whole)
    # A plain resume after that changes nothing.
    again = run_workflow(load_spec_text(spec(RANDOM)), backend(), run_dir, resume=True)
    assert again["stages"][0]["n_trials"] == 10 and len(events(run_dir, "trial_started")) == 10


DRIVER = """
import os, signal, sys
from pathlib import Path
from nestor.orchestrator.backends import SimulatedBackend, lognormal_trials
from nestor.orchestrator.engine import trials
from nestor.orchestrator.engine.search_log import SearchLog
from nestor.orchestrator.engine.workflow import run_workflow
from nestor.orchestrator.spec import load_spec_text

where, run_dir, spec = sys.argv[1], Path(sys.argv[2]), sys.argv[3]

def die():
    os.kill(os.getpid(), signal.SIGKILL)

if where == "after the reopening, before the search log holds the extension":
    real_record = SearchLog.record
    def record(self):
        if any(e["event"] == "extend" for e in self.searcher.log_since(self.logged)):
            die()
        return real_record(self)
    SearchLog.record = record
else:  # at the second result of the extension's trials, before it is told
    real_tell, calls = trials.TrialRunner._tell, []
    def tell(self, trial, record):
        calls.append(trial.id)
        if len(calls) == 2:
            die()
        return real_tell(self, trial, record)
    trials.TrialRunner._tell = tell
backend = SimulatedBackend(2, 2, lognormal_trials(60.0, 0.3), seed=3)
run_workflow(load_spec_text(spec), backend, run_dir, resume=True, reopen={"budget": 10})
"""


@pytest.mark.parametrize("where", [
    "after the reopening, before the search log holds the extension",
    "mid-way through the extension's trials",
])
def test_a_driver_killed_during_an_extension_loses_nothing_and_reruns_nothing(
        tmp_path: Path, where: str) -> None:
    run_dir = tmp_path / "run"
    text = spec("{algorithm: bayesian, budget: 6, seed: 4, startup_trials: 3}")
    run_workflow(load_spec_text(text), backend(), run_dir)
    driver = subprocess.run([sys.executable, "-c", DRIVER, where, str(run_dir), text],
                            capture_output=True, text=True, timeout=300, check=False)
    assert driver.returncode == -signal.SIGKILL, driver.stderr
    assert [e["budget"] for e in events(run_dir, "stage_reopened")] == [10]
    extended = any(e["event"] == "extend" for logged in events(run_dir, "search")
                   for e in logged["entries"])
    assert extended == (where != "after the reopening, before the search log holds the"
                        " extension")

    # The plain resume goes on with the extension it finds journalled.
    results = run_workflow(load_spec_text(text), backend(seed=5), run_dir, resume=True)

    (stage,) = results["stages"]
    assert stage["n_trials"] == 10
    ids = [e["trial"]["id"] for e in events(run_dir, "trial_finished")]
    assert sorted(ids, key=int) == [str(i) for i in range(10)], f"ran twice or lost: {ids}"
    told = tells(run_dir)
    assert set(told) == set(ids) and set(told.values()) == {1}, told
    extends = [e for logged in events(run_dir, "search") for e in logged["entries"]
               if e["event"] == "extend"]
    assert extends == [{"event": "extend", "budget": 10}]


def failing_train(broken: list[bool]) -> Any:
    """The hpo trials succeed; the train stage's (its config has ``final: 1``) fails
    while ``broken[0]``: a train stage whose trainer broke, then was fixed."""
    model = lognormal_trials(30.0, 0.2)

    def draw(config: Any, rng: Any) -> Draw:
        if config.get("final") == 1 and broken[0]:
            return Draw(5.0, failure="ValueError: the final run broke")
        return model({k: v for k, v in config.items() if k != "final"}, rng)

    return draw


TRAINED = """\
  - name: final
    kind: train
    from: [tune]
    config: {final: 1}
"""


def test_a_failed_train_stage_is_retried_on_resume_with_the_search_kept(
        tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    text = spec("{algorithm: random, budget: 4, seed: 2}", TRAINED)
    broken = [True]
    first = run_workflow(load_spec_text(text), backend(failing_train(broken)), run_dir)
    final = {s["name"]: s for s in first["stages"]}["final"]
    assert [t["status"] for t in final["trials"]] == ["failed"]

    tried = final["trials"][0]["attempts"]
    broken[0] = False
    results = run_workflow(load_spec_text(text), backend(failing_train(broken)), run_dir,
                           resume=True, reopen={"retry": True})

    stages = {s["name"]: s for s in results["stages"]}
    (trial,) = stages["final"]["trials"]
    assert trial["status"] == "completed" and trial["attempts"] == tried + 1, trial
    started = Counter((e["stage"], e["trial"]["id"]) for e in events(run_dir, "trial_started"))
    assert [n for (stage, _), n in started.items() if stage == "tune"] == [1, 1, 1, 1]
    assert started[("final", "final")] == tried + 1
    assert stages["tune"] == first["stages"][0], "the search before it changed"
    assert [e["stage"] for e in events(run_dir, "stage_reopened")] == ["final"]


def test_what_an_extension_cannot_honour_is_refused_before_anything_is_written(
        tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    text = spec("{algorithm: random, budget: 4, seed: 2}", TRAINED)
    run_workflow(load_spec_text(text), backend(failing_train([False])), run_dir)
    size = (run_dir / "journal.jsonl").stat().st_size
    refusals = {
        "finished stage(s) final took its results": {"budget": 8},
        "--budget must be above the 4 trials": {"budget": 3},
        "--stage must name an hpo stage": {"budget": 8, "stage": "final"},
        "no finished stage with a failed trial": {"retry": True},
    }
    for message, reopen in refusals.items():
        with pytest.raises(RunError, match=re.escape(message)):
            run_workflow(load_spec_text(text), backend(), run_dir, resume=True, reopen=reopen)
    genetic = tmp_path / "genetic"
    gtext = spec("{algorithm: genetic, population: 2, generations: 2, seed: 1}")
    run_workflow(load_spec_text(gtext), backend(), genetic)
    with pytest.raises(RunError, match="genetic search cannot run more than the 4 trials"):
        run_workflow(load_spec_text(gtext), backend(), genetic, resume=True,
                     reopen={"budget": 8})
    assert (run_dir / "journal.jsonl").stat().st_size == size


def test_an_edited_spec_on_resume_is_an_extension_or_refused() -> None:
    saved = load_spec_text(spec(RANDOM))
    assert edited_budget(saved, load_spec_text(spec(RANDOM))) is None
    assert edited_budget(saved, load_spec_text(spec(RANDOM.replace("6", "9")))) == {
        "budget": 9, "stage": "tune"}
    changed = spec(RANDOM).replace("high: 1}", "high: 2}", 1)
    with pytest.raises(ReopenError, match=r"stages\[0\]\.space\.x\.high"):
        edited_budget(saved, load_spec_text(changed))


def test_a_spec_edited_in_place_is_taken_as_an_extension_or_refused(tmp_path: Path) -> None:
    from nestor.orchestrator.commands.run import _edited
    from nestor.orchestrator.spec import load_spec

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    saved = run_dir / "spec.yaml"
    saved.write_text(spec(RANDOM))
    run_workflow(load_spec(saved), backend(), run_dir)
    saved.write_text(spec(RANDOM.replace("6", "9")))  # the user raises the budget there
    workflow, edit = _edited(run_dir, load_spec(saved), None)
    assert edit == {"budget": 9, "stage": "tune"}
    assert workflow.stages[0].search.budget == 6, "the search must be rebuilt as it started"
    results = run_workflow(workflow, backend(), run_dir, resume=True, reopen=edit)
    assert results["stages"][0]["n_trials"] == 9
    saved.write_text(spec(RANDOM).replace("high: 1}", "high: 2}", 1))
    with pytest.raises(RunError, match=r"started with in stages\[0\]\.space\.x\.high"):
        _edited(run_dir, load_spec(saved), None)


def test_enqueued_configurations_run_first(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    text = spec("{algorithm: bayesian, budget: 5, seed: 1,"
                " enqueue: [{x: 0.125, y: 0.5}, {x: 0.75, y: 0.25}]}")
    run_workflow(load_spec_text(text), backend(), run_dir)
    started = events(run_dir, "trial_started")
    assert [e["trial"]["config"] for e in started[:2]] == [{"x": 0.125, "y": 0.5},
                                                            {"x": 0.75, "y": 0.25}]
    assert [e["trial"]["origin"] for e in started[:2]] == ["enqueued", "enqueued"]
    assert len(started) == 5
    # A configuration outside the space stops the run before any trial, naming it.
    bad = tmp_path / "bad"
    with pytest.raises(RunError, match=r"search.enqueue: enqueued configuration #1"):
        run_workflow(load_spec_text(text.replace("x: 0.125", "x: 7")), backend(), bad)


def test_a_warm_start_changes_the_first_asks(tmp_path: Path) -> None:
    cold, warm = tmp_path / "cold", tmp_path / "warm"
    search = "{algorithm: bayesian, budget: 3, seed: 1, startup_trials: 2%s}"
    run_workflow(load_spec_text(spec(search % "")), backend(), cold)
    table = tmp_path / "earlier.csv"
    table.write_text("x,y,val_accuracy\n0.3,0.3,0.99\n0.9,0.1,0.2\n0.1,0.8,0.4\n")
    run_workflow(load_spec_text(spec(search % f", warm_start: {table}")), backend(), warm)
    cold_first = [e["trial"] for e in events(cold, "trial_started")]
    warm_first = [e["trial"] for e in events(warm, "trial_started")]
    # Told three results before its first ask, TPE models from the start.
    assert [t["origin"] for t in cold_first[:2]] == ["random", "random"]
    assert [t["origin"] for t in warm_first] == ["model"] * 3
    assert cold_first[0]["config"] != warm_first[0]["config"]
    (logged,) = [e for s in events(warm, "search") for e in s["entries"]
                 if e["event"] == "warm_start"]
    assert len(logged["observations"]) == 3

    # From a run directory: random search asks the earlier run's best first.
    seeded = tmp_path / "seeded"
    best = run_workflow(load_spec_text(spec(RANDOM)), backend(), tmp_path / "earlier")
    best_config = best["stages"][0]["best"]["config"]
    run_workflow(load_spec_text(spec(
        f"{{algorithm: random, budget: 4, seed: 9, warm_start: {tmp_path / 'earlier'}}}")),
        backend(), seeded)
    first = events(seeded, "trial_started")[0]["trial"]
    assert first["config"] == best_config and first["origin"] == "warm-start"
    # A resume replays the warm start from the journal: the source may be gone.
    (tmp_path / "earlier" / "journal.jsonl").rename(tmp_path / "moved.jsonl")
    again = run_workflow(load_spec_text(spec(
        f"{{algorithm: random, budget: 4, seed: 9, warm_start: {tmp_path / 'earlier'}}}")),
        backend(), seeded, resume=True)
    assert again["stages"][0]["n_trials"] == 4
