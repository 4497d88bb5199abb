"""results.json with its index (orchestrator.journal.results_file).

``nestor results``'s tables of a million-event run must not parse every trial of
it: with the index, the stages' summaries are read and their trial lists only
when something reads them; the tables are the same as from the whole file, and
an index that no longer matches the file is ignored.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from nestor.orchestrator.backends import SimulatedBackend, lognormal_trials
from nestor.orchestrator.engine.workflow import run_workflow
from nestor.orchestrator.journal.results_file import (
    LazyTrials,
    index_path,
    read_results,
    write_results,
)
from nestor.orchestrator.projections.results import load_results, render_results
from tests.orchestrator.journal.test_run_state import two_stages


def tables(results: dict[str, Any]) -> str:
    out = io.StringIO()
    render_results(Console(file=out, width=200), results)
    return out.getvalue()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("results") / "run"
    run_workflow(two_stages(retries=1),
                 SimulatedBackend(4, 4, lognormal_trials(600.0, 0.8), seed=3), run_dir)
    return run_dir


def test_the_tables_read_no_trial_and_say_what_the_whole_file_says(run: Path) -> None:
    whole = json.loads((run / "results.json").read_bytes())  # plain JSON, as before
    assert all(len(stage["trials"]) > 3 for stage in whole["stages"])
    lazy = load_results(run, lazy=True)
    shown = tables(lazy)
    for stage in lazy["stages"]:
        assert isinstance(stage["trials"], LazyTrials)
        assert stage["trials"]._where is not None  # the tables never read a trial
    assert shown == tables(whole)
    assert lazy == whole  # read when compared: the same trials


def test_an_index_that_does_not_match_the_file_is_ignored(run: Path, tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    data = json.loads((run / "results.json").read_bytes())
    write_results(path, data)
    assert read_results(path, lazy=True) == data
    index = index_path(path).read_bytes()
    edited = {**data, "stages": [{**s, "name": s["name"].upper()} for s in data["stages"]]}
    write_results(path, edited)  # rewritten, as long as before, and the old index put back
    index_path(path).write_bytes(index)
    again = read_results(path, lazy=True)
    assert again == edited and not isinstance(again["stages"][0]["trials"], LazyTrials)
    index_path(path).unlink()  # an older run's results: no index
    assert read_results(path, lazy=True) == edited
