"""PB2 (``pbt`` with ``explore: pb2``) under the scheduler: a killed driver resumes."""

from __future__ import annotations

import textwrap
from pathlib import Path

from nestor.orchestrator.spec import load_spec_text
from nestor.search import Objective, make_searcher
from tests.backends.simulated.test_simulated import journal, kill_and_resume_population

SPEC = textwrap.dedent("""
    name: pb2
    stages:
      - name: tune
        kind: hpo
        trainer: {function: "nestor.orchestrator.simulate:simulated_trial", checkpoints: true}
        search: {algorithm: pbt, explore: pb2, population: 4, interval: 1, intervals: 6,
                 quantile: 0.5, seed: 3}
        space:
          x: {type: float, low: 0, high: 1}
          y: {type: float, low: 0, high: 1}
    """)


def test_a_pb2_population_killed_midway_resumes_and_runs_no_trial_twice(
    tmp_path: Path,
) -> None:
    workflow = load_spec_text(SPEC)
    stage = workflow.stage("tune")
    assert stage.search_label() == "pb2 4 members, exploit every 1 epochs"
    run_dir = tmp_path / "run"
    kill_and_resume_population(run_dir, SPEC, time_limit_s=200.0, trials=24)
    # The journalled search log rebuilds the search: its GP picks are in it.
    entries: list = []
    for event in journal(run_dir, "search"):
        for index, entry in enumerate(event["entries"], start=event["start"]):
            if index == len(entries):
                entries.append(entry)
    objectives = [Objective(o.metric, o.mode) for o in stage.objectives]
    rebuilt = make_searcher("pbt", stage.search_space(), objectives, **stage.search.settings())
    rebuilt.restore({**rebuilt.state(), "events": entries})
    assert rebuilt.done() and len(rebuilt.trials) == 24
    assert any(e["chosen_by"] == "journal" for e in rebuilt.pb2_log)
