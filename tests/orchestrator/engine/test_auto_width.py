"""``algorithm: auto`` without ``search.parallel`` plans for the trials its stage runs
at once: the slots it runs on over a trial's ranks (issue 44). Run on the simulated
cluster (the StageScheduler and TrialRunner that drive Ray) and checked from the
journal the run wrote, against ``search.choose_search`` at that width; ``nestor
validate`` works out the same for the slots it plans on."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nestor.orchestrator.backends import SimulatedBackend, fixed_trials
from nestor.orchestrator.backends.stopping import Interrupted
from nestor.orchestrator.commands.cli import cli
from nestor.orchestrator.commands.summary import sized_lines
from nestor.orchestrator.engine.workflow import run_workflow
from nestor.orchestrator.journal.events import SearchSized, parse
from nestor.orchestrator.journal.journal import read_events
from nestor.orchestrator.spec import load_spec_text
from nestor.search import choose_search

SEVEN = "\n".join(f"      c{i}: {{type: float, low: -1, high: 1}}" for i in range(7))


def auto_spec(budget: int, *, data: int = 1, parallel: int | None = None,
              slots: int | None = None) -> str:
    """An hpo stage of 7 numbers under ``auto``; ``parallel`` and ``slots`` as given."""
    given = f", parallel: {parallel}" if parallel is not None else ""
    resources = f"resources: {{slots: {slots}}}\n" if slots is not None else ""
    return resources + textwrap.dedent(f"""\
        name: wide
        stages:
          - name: tune
            kind: hpo
            trainer: {{function: "nestor.orchestrator.simulate:simulated_trial"}}
            parallel: {{data: {data}, model: 1}}
            search: {{algorithm: auto, budget: {budget}, seed: 1{given}}}
            objective: {{metric: loss, mode: min}}
            space:
        """) + SEVEN + "\n"


SPHERE = fixed_trials(60.0, lambda c: sum(float(v) ** 2 for v in c.values()), metric="loss")
"""Every trial a minute long; its loss the 7-D sphere's."""


def picked_at(workflow: Any, width: int) -> str:
    """What ``search.choose_search`` picks for the stage's space at ``width`` at once."""
    stage = workflow.stage("tune")
    return choose_search(stage.search_space(), [("loss", "min")],
                         budget=stage.search.budget, parallel=width).label()


def sized(run_dir: Path) -> list[SearchSized]:
    return [parse(e) for e in read_events(run_dir / "journal.jsonl")  # type: ignore[misc]
            if e["event"] == SearchSized.kind]


def first_wave(workflow: Any, backend: SimulatedBackend, run_dir: Path) -> None:
    """Run until the simulated allocation's time limit: the first trials, then stop."""
    with pytest.raises(Interrupted):
        run_workflow(workflow, backend, run_dir)


@pytest.mark.parametrize(("nodes", "per_node", "data", "width"), [
    (1, 2, 1, 2),  # a laptop's
    (8, 8, 1, 64),  # rule 3: the asynchronous genetic search
    (256, 8, 1, 2048),  # its children by differential evolution
    (8, 8, 2, 32),  # two ranks a trial: 64 slots run 32 at once (rule 3a)
])
def test_auto_plans_for_the_trials_its_slots_run_at_once(
        tmp_path: Path, nodes: int, per_node: int, data: int, width: int) -> None:
    workflow = load_spec_text(auto_spec(6 * width, data=data))
    assert workflow.stage("tune").search.parallel is None
    backend = SimulatedBackend(nodes, per_node, SPHERE, seed=1, time_limit_s=90.0)
    first_wave(workflow, backend, tmp_path)
    (event,) = sized(tmp_path)
    slots = nodes * per_node
    assert event.width == width
    assert event.source == (f"{slots} slots (a simulated cluster of {nodes} x {per_node})"
                            f" / {data} rank{'s' if data > 1 else ''} a trial")
    assert event.pick == picked_at(workflow, width)
    assert event.pick == workflow.stage("tune").auto_choice(width).label()
    assert event.resumed_at is None
    if width >= 32:  # what planning for one at a time would have picked differs
        assert event.pick != picked_at(workflow, 1)
    # and the search so built filled the slots with its first asks
    launched_first = [a for a in backend.attempts if a.launched == 0.0]
    assert len(launched_first) == width


def test_the_picks_at_2_64_and_2048_are_the_rules_for_those_widths() -> None:
    """The three widths of the issue, named: what the rules say there."""
    workflow = load_spec_text(auto_spec(6 * 2048))
    labels = {width: picked_at(workflow, width) for width in (1, 2, 64, 2048)}
    assert labels == {1: "bayesian lq-cmaes", 2: "bayesian lq-cmaes", 64: "genetic async 16",
                      2048: "genetic async 16, de"}


def test_a_spec_that_sets_search_parallel_keeps_its_own(tmp_path: Path) -> None:
    workflow = load_spec_text(auto_spec(384, parallel=2))
    first_wave(workflow, SimulatedBackend(8, 8, SPHERE, seed=1, time_limit_s=90.0),
               tmp_path)
    (event,) = sized(tmp_path)
    assert (event.width, event.source) == (2, "search.parallel")
    assert event.pick == picked_at(workflow, 2) == "bayesian lq-cmaes"
    assert event.pick != picked_at(workflow, 64)


def test_a_resumed_search_keeps_the_width_it_was_built_for(tmp_path: Path) -> None:
    """Built on 64 slots (the genetic search), resumed on 2 (where a new search would be
    lq-CMA-ES): the resumed driver restores the genetic search, at its width, says so,
    and finishes its budget."""
    workflow = load_spec_text(auto_spec(256))
    first_wave(workflow, SimulatedBackend(8, 8, SPHERE, seed=1, time_limit_s=90.0),
               tmp_path)
    resumed = SimulatedBackend(1, 2, SPHERE, seed=2)
    results = run_workflow(workflow, resumed, tmp_path, resume=True)
    built, kept = sized(tmp_path)
    assert (built.width, built.pick, built.resumed_at) == (64, "genetic async 16", None)
    assert (kept.width, kept.source, kept.pick) == (built.width, built.source, built.pick)
    assert kept.resumed_at == 2
    assert picked_at(workflow, 2) != built.pick  # a new search on 2 slots would differ
    (stage,) = results["stages"]
    assert stage["auto"]["pick"] == "genetic async 16" and stage["auto"]["width"] == 64
    assert stage["n_trials"] == 256
    assert max(a.launched for a in resumed.attempts) > 0  # the resumed driver ran trials
    (line,) = sized_lines(kept)
    assert line == ("stage tune: resumed, auto keeps genetic async 16, the search built for"
                    " 64 trials at once (64 slots (a simulated cluster of 8 x 8) / 1 rank a"
                    " trial); these slots run 2 at once")
    start = sized_lines(built)
    assert start[0].startswith("stage tune: auto picked genetic async 16: 64 trials at once")
    assert start[1] == ("  planned for 64 trials at once (64 slots (a simulated cluster of"
                        " 8 x 8) / 1 rank a trial)")


def test_a_search_begun_before_widths_were_journalled_keeps_planning_for_one(
        tmp_path: Path) -> None:
    """A run directory from before: its journal has the search's asks but no width, and
    its search was built for 1 at once. Resumed on 64 slots (where a new search would
    be the genetic one), it is rebuilt for 1 and restores."""
    workflow = load_spec_text(auto_spec(40))
    first_wave(workflow, SimulatedBackend(1, 2, SPHERE, seed=1, time_limit_s=90.0), tmp_path)
    journal = tmp_path / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(line for line in lines if '"search_sized"' not in line))
    assert not sized(tmp_path)
    results = run_workflow(workflow, SimulatedBackend(8, 8, SPHERE, seed=2), tmp_path,
                           resume=True)
    (kept,) = sized(tmp_path)
    assert (kept.width, kept.pick, kept.resumed_at) == (1, "bayesian lq-cmaes", 64)
    assert kept.source == "what nestor planned for before it read the slots"
    assert picked_at(workflow, 64) != kept.pick
    assert results["stages"][0]["n_trials"] == 40


def test_a_planned_shape_sets_the_width(tmp_path: Path) -> None:
    """``parallel: auto``: the width is the slots over the ranks of the planner's shape."""
    text = auto_spec(40).replace(
        'trainer: {function: "nestor.orchestrator.simulate:simulated_trial"}',
        "trainer: {name: cnn, settings: {dataset: digits, epochs: 300}}").replace(
        "parallel: {data: 1, model: 1}", "parallel: auto\n    batch: {global_max: 512}")
    text = text.replace("metric: loss, mode: min", "metric: val_accuracy, mode: max")
    text = "\n".join(line for line in text.splitlines() if not line.startswith("      c"))
    text += "\n      lr: {type: float, low: 0.01, high: 0.1, log: true}"
    text += "\n      momentum: {type: float, low: 0.5, high: 0.99}\n"
    workflow = load_spec_text(text)
    backend = SimulatedBackend(16, 8, fixed_trials(60.0, 0.5), seed=1, time_limit_s=90.0)
    first_wave(workflow, backend, tmp_path)
    (plan,) = [e for e in read_events(tmp_path / "journal.jsonl") if e["event"] == "stage_planned"]
    ranks = plan["dp"] * plan["mp"]
    assert ranks > 1, plan  # 40 trials on 128 slots: the planner widens them
    (event,) = sized(tmp_path)
    assert event.width == 128 // ranks
    unit = "rank" if ranks == 1 else "ranks"
    assert event.source == f"128 slots (a simulated cluster of 16 x 8) / {ranks} {unit} a trial"
    assert event.pick == workflow.stage("tune").auto_choice(128 // ranks).label()


@pytest.mark.parametrize(("slots", "label"), [
    (2, "bayesian lq-cmaes"), (64, "genetic async 16"), (2048, "genetic async 16, de")])
def test_validate_prints_the_pick_and_the_width(tmp_path: Path, slots: int, label: str) -> None:
    path = tmp_path / "wide.yaml"
    path.write_text(auto_spec(6 * slots))
    result = CliRunner().invoke(cli, ["validate", "--slots", str(slots), str(path)],
                                terminal_width=10_000)
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert f"auto: {label}" in output  # the plan's table
    assert f"tune: auto picked {label}: " in output
    assert (f"planned for {slots} trials at once ({slots} slots (--slots) / 1 rank a trial)"
            in output)
    path.write_text(auto_spec(6 * slots, slots=slots))  # resources.slots says it
    output = " ".join(CliRunner().invoke(cli, ["validate", str(path)]).output.split())
    assert f"tune: auto picked {label}: " in output
    assert f"({slots} slots (resources.slots) / 1 rank a trial)" in output
    path.write_text(auto_spec(6 * slots, parallel=2))
    output = " ".join(CliRunner().invoke(cli, ["validate", "--slots", str(slots),
                                               str(path)]).output.split())
    assert "tune: auto picked bayesian lq-cmaes: " in output
    assert "planned for 2 trials at once (search.parallel)" in output


FOM = """
import sys
a = float(sys.argv[1].split("=", 1)[1])
print(f"FoM: {(a - 0.25) ** 2}")
"""


@pytest.mark.slow
def test_a_run_says_the_width_it_planned_for_and_where_it_came_from(tmp_path: Path) -> None:
    """``nestor run`` of a command trainer on a Ray cluster of ``resources.slots: 2``, no
    ``search.parallel``: its start says auto's pick, for 2 at once, from resources.slots."""
    import subprocess
    import sys

    fit = tmp_path / "fit.py"
    fit.write_text(FOM)
    spec = tmp_path / "said.yaml"
    spec.write_text(textwrap.dedent(f"""\
        name: said
        resources: {{slots: 2}}
        stages:
          - name: tune
            kind: hpo
            trainer: {{command: "{sys.executable} {fit}"}}
            search: {{budget: 4}}
            objective: {{metric: fom, mode: min}}
            space:
              -a: {{type: float, low: -1, high: 1}}
        """))
    nestor = str(Path(sys.executable).parent / "nestor")
    result = subprocess.run([nestor, "run", str(spec), "--run-dir", str(tmp_path / "run")],
                            capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    stderr = " ".join(result.stderr.split())
    assert "stage tune: auto picked random: a budget of 4" in stderr
    assert "planned for 2 trials at once (2 slots (resources.slots) / 1 rank a trial)" in stderr
    (event,) = sized(tmp_path / "run")
    assert (event.width, event.pick) == (2, "random")
