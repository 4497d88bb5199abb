"""Every combination is run or refused up front (issue 38, item 2).

The table: every kind of stage (orchestrator.spec.model.STAGE_KINDS) x every kind
of trainer (built-in; a function and a command, each declaring nothing,
checkpoints, predictions or both) x every search (the spec's algorithms, and each
value of a setting that picks another engine: a bayesian ``sampler``, PBT's
``explore``, a halving search's ``sampler``; ``auto`` also with a ``fidelity``) x
one or two objectives. A stage of a kind that does not search follows an hpo
stage (``from: [tune]``), whose search and objectives are the cell's.

For every cell `nestor validate` (in process, through the CLI) either accepts the
spec or refuses it with exit status 2, no traceback, the file's line and field,
and one of the known reasons saying what to do instead (1,080 cells, seconds).

The accepted cells then run end to end with `nestor run` (in process, on one real
Ray that each run joins) on a tiny trainer (tests/orchestrator/user_code/quadfit.py,
or the built-in mlp on 200 digits): exit 0, no traceback, no failed trial, every
stage finished with its product. One run holds the hpo stage and a stage of every
other kind accepted after it, so it covers those cells at once. Cells that differ
only in what a user trainer declares share the run of the trainer that declares
both: the declaration changes what validation accepts, never how the trainer runs.
By default (about 30 runs, 15 minutes on 2 loaded cores; marked slow) every
algorithm runs on each kind of trainer and every other engine on the function
trainer, with two objectives where the search takes several, else one;
NESTOR_TABLE=all runs every engine on every trainer with one and two objectives.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from nestor import search
from nestor.orchestrator.commands.cli import cli
from nestor.orchestrator.spec import model
from nestor.search._settings import declared

USER_CODE = Path(__file__).resolve().parent / "user_code"
FIT = USER_CODE / "quadfit.py"
# importable from the repository's root, as it is in Ray's workers
FUNCTION = "tests.orchestrator.user_code.quadfit:train"

# --- the table's axes, read from the registries -------------------------------------

USER_KINDS = ("function", "command")
DECLARATIONS = ("none", "checkpoints", "predictions", "both")
EPOCHS = 4  # a trial's full length: auto (with a fidelity) splits it into rungs 1, 2, 4
BUILTIN = {"name": "mlp", "settings": {"dataset": "digits", "epochs": EPOCHS,
                                       "max_train_samples": 200}}
# two numbers: lq-CMA-ES searches no fewer (one alone is refused: tests/spec/bad)
SPACE = {"lr": {"type": "float", "low": 0.05, "high": 0.6, "log": True},
         "momentum": {"type": "float", "low": 0.5, "high": 0.95}}
BUILTIN_SPACE = {**SPACE, "width": 16, "depth": 1}  # a small model, fixed


def trainer_block(kind: str, declares: str) -> dict[str, Any]:
    if kind == "builtin":
        return json.loads(json.dumps(BUILTIN))
    block: dict[str, Any] = ({"function": FUNCTION} if kind == "function"
                             else {"command": [sys.executable, str(FIT)]})
    block["settings"] = {"epochs": EPOCHS}
    for capability in ("checkpoints", "predictions"):
        if declares in (capability, "both"):
            block[capability] = True
    return block


TRAINER_KINDS = [("builtin", "-")] + [(k, d) for k in USER_KINDS for d in DECLARATIONS]

# The smallest value of a searcher setting that still exercises it, applied where the
# algorithm declares the setting and its Settings accept the value.
TINY: dict[str, Any] = {
    "seed": 1, "population": 2, "generations": 2, "tournament_size": 2, "points": 2,
    "interval": 1, "intervals": 2, "quantile": 0.5, "min_budget": 1, "max_budget": 3,
    "reduction_factor": 3, "iterations": 1, "startup_trials": 1,
}
TINY_BUDGET = 3  # for a search whose default budget is a number of trials
ENGINE_SETTINGS = ("sampler", "explore")  # a setting whose value picks another engine


def tiny_settings(algorithm: str, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` plus each TINY value the algorithm's settings accept."""
    cls = search.settings_class(algorithm)
    names = {d.name: d for d in declared(cls, public_only=True)}
    settings = dict(given)
    for name, value in TINY.items():
        if name in names and name not in settings:
            try:
                cls(**{**settings, name: value})
            except ValueError:
                continue
            settings[name] = value
    if "budget" in names and isinstance(names["budget"].default, int):
        settings["budget"] = TINY_BUDGET
    return settings


def search_variants() -> dict[str, dict[str, Any]]:
    """A search block per algorithm of the spec, and per other value of a setting
    that picks another engine; ``auto`` also with a fidelity it may split."""
    assert set(model.ALGORITHMS) == {*search.ALGORITHMS, "auto"}, (
        "the spec's algorithms and search/'s differ")
    variants: dict[str, dict[str, Any]] = {}
    for algorithm in model.ALGORITHMS:
        variants[algorithm] = {"algorithm": algorithm, **tiny_settings(algorithm, {})}
        for item in declared(search.settings_class(algorithm), public_only=True):
            if item.name not in ENGINE_SETTINGS:
                continue
            for value in typing.get_args(item.annotation):
                if value != item.default:
                    variants[f"{algorithm}-{value}"] = {
                        "algorithm": algorithm, **tiny_settings(algorithm, {item.name: value})}
    assert "fidelity" in model.AutoSearch.model_fields
    # auto picks a multi-fidelity search (ASHA) only with a fidelity to split and a
    # budget of more trials than a model's random start
    variants["auto-fidelity"] = {**variants["auto"], "fidelity": "epochs", "budget": 11}
    return variants


SEARCHES = search_variants()
OBJECTIVES = {
    1: [{"metric": "val_accuracy", "mode": "max"}],
    2: [{"metric": "val_accuracy", "mode": "max"}, {"metric": "wall_time", "mode": "min"}],
}

# A stage of each kind that does not search, drawn from the hpo stage `tune`.
FOLLOWERS: dict[str, dict[str, Any]] = {
    "train": {"name": "final", "kind": "train", "from": ["tune"], "data": "train+val"},
    "ensemble": {"name": "members", "kind": "ensemble", "from": ["tune"], "members": 2},
    "transfer": {"name": "moved", "kind": "transfer", "from": ["tune"],
                 "source": {"dataset": "digits", "classes": [0, 1, 2]},
                 "target": {"dataset": "digits", "classes": [3, 4, 5]}},
}


def kind_model(kind: str) -> type:
    """The spec's model of a kind of stage."""
    union = typing.get_args(typing.get_args(model.Stage)[0])
    return next(m for m in union
                if typing.get_args(m.model_fields["kind"].annotation) == (kind,))


def test_the_table_has_a_stage_for_every_kind() -> None:
    searching = [k for k in model.STAGE_KINDS if kind_model(k).searches]
    assert searching == ["hpo"], "a new searching kind: give it a cell here"
    missing = set(model.STAGE_KINDS) - {"hpo", *FOLLOWERS}
    assert not missing, f"add a stage of kind {missing} to FOLLOWERS"


@dataclass(frozen=True)
class Cell:
    kind: str  # the stage kind under test
    trainer: str
    declares: str
    search: str
    objectives: int

    @property
    def id(self) -> str:
        trainer = self.trainer if self.trainer == "builtin" else f"{self.trainer}-{self.declares}"
        return f"{self.kind}/{trainer}/{self.search}/{self.objectives}obj"


def spec_of(cell: Cell, kinds: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The cell's spec (with ``kinds``: the hpo stage and a follower of each)."""
    tune = {
        "name": "tune", "kind": "hpo",
        "trainer": trainer_block(cell.trainer, cell.declares),
        "search": SEARCHES[cell.search],
        "space": BUILTIN_SPACE if cell.trainer == "builtin" else SPACE,
        "objective": OBJECTIVES[cell.objectives],
        "trial": {"retries": 0},
    }
    followers = [FOLLOWERS[k] for k in (kinds if kinds is not None else (cell.kind,))
                 if k != "hpo"]
    return {"name": "table", "resources": {"slots": 2}, "stages": [tune, *followers]}


def cells() -> Iterator[Cell]:
    for kind, (trainer, declares), name, objectives in itertools.product(
            model.STAGE_KINDS, TRAINER_KINDS, SEARCHES, OBJECTIVES):
        yield Cell(kind, trainer, declares, name, objectives)


# --- validation: every cell ----------------------------------------------------------

@dataclass
class Verdict:
    accepted: bool
    message: str  # what `nestor validate` printed on stderr


def validate(tmp_path: Path, name: str, spec: dict[str, Any]) -> Verdict:
    """`nestor validate` on ``spec``, in process: accepted, or refused with exit
    status 2 and no traceback (anything else fails the test, naming the cell)."""
    path = tmp_path / f"{name.replace('/', '_')}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{name}: nestor validate raised {result.exception!r}")
    assert "Traceback" not in result.output + result.stderr, name
    assert result.exit_code in (0, 2), (name, result.exit_code, result.stderr)
    return Verdict(result.exit_code == 0, " ".join(result.stderr.split()))


def test_every_cell_is_accepted_or_refused_with_a_clear_message(tmp_path: Path) -> None:
    """`nestor validate` on every cell: accepted, or exit 2 without a traceback, at the
    line of the field it names, for one of the reasons a stage cannot run, saying what
    would (a capability the trainer must declare and how, or an algorithm that takes
    several objectives). A built-in trainer with one objective is never refused."""
    verdicts = {cell: validate(tmp_path, cell.id, spec_of(cell)) for cell in cells()}
    refused = {cell: v.message for cell, v in verdicts.items() if not v.accepted}
    reasons = (
        "needs checkpoints: save to ctx.checkpoint_dir and load ctx.continue_from",
        "needs predictions: write predictions.npz",
        "optimizes exactly one objective",
    )
    for cell, message in refused.items():
        assert re.search(r"\.yaml:\d+:\d+: stages\[\d\]\.", message), (cell.id, message)
        assert any(reason in message for reason in reasons), (cell.id, message)
        assert "keep one, or use an algorithm that takes several" in message or (
            "true in its trainer" in message), (cell.id, message)
    assert not [c.id for c in refused if c.trainer == "builtin" and c.objectives == 1]
    assert not [c.id for c in refused if c.declares == "both" and c.objectives == 1]
    counts = (len(verdicts), len(verdicts) - len(refused), len(refused))
    print(f"table: {counts[0]} cells, {counts[1]} accepted, {counts[2]} refused")


# --- end to end: the accepted cells run ----------------------------------------------

PRODUCT_KEYS = ("ensemble", "train", "transfer")  # what a kind keeps in its stage summary


def e2e_runs() -> list[tuple[str, str]]:
    """(trainer kind, search) pairs run end to end, each with every stage kind the
    table accepts for it: every algorithm on each kind of trainer; every other
    engine of an algorithm (a sampler, PB2, auto's fidelity) on the function trainer,
    the quickest. NESTOR_TABLE=all runs every engine on every kind of trainer."""
    every = os.environ.get("NESTOR_TABLE") == "all"
    runs = []
    for trainer in ("function", "command", "builtin"):
        for name, block in SEARCHES.items():
            default = name == block["algorithm"]
            if every or default or trainer == "function":
                runs.append((trainer, name))
    return runs


def stage_events(run_dir: Path) -> list[dict[str, Any]]:
    from nestor.orchestrator.journal.journal import read_events

    return list(read_events(run_dir / "journal.jsonl"))


@pytest.mark.slow
@pytest.mark.parametrize(("trainer", "search_name"), e2e_runs(),
                         ids=[f"{t}-{s}" for t, s in e2e_runs()])
def test_every_accepted_cell_runs_end_to_end(tmp_path: Path, ray_local: object,
                                             trainer: str, search_name: str) -> None:
    """The hpo stage with the search, and after it a stage of every kind `nestor
    validate` accepts after it, with two objectives where the search takes several,
    else one (and one more run with one where it takes several, NESTOR_TABLE=all)."""
    declares = "-" if trainer == "builtin" else "both"

    def accepted(objectives: int) -> bool:
        hpo = Cell("hpo", trainer, declares, search_name, objectives)
        return validate(tmp_path, hpo.id, spec_of(hpo)).accepted

    wanted = [2, 1] if os.environ.get("NESTOR_TABLE") == "all" else [2]
    for objectives in sorted({n if accepted(n) else 1 for n in wanted}, reverse=True):
        hpo = Cell("hpo", trainer, declares, search_name, objectives)
        assert accepted(objectives), hpo.id
        kinds = tuple(k for k in model.STAGE_KINDS
                      if validate(tmp_path, f"{k}-{hpo.id}",
                                  spec_of(Cell(k, trainer, declares, search_name,
                                               objectives))).accepted)
        run_cell(tmp_path / f"{objectives}obj", hpo, kinds)


def run_cell(root: Path, cell: Cell, kinds: tuple[str, ...]) -> None:
    """`nestor run` on the cell's spec with a stage of each of ``kinds``, in process on
    the shared Ray: exit 0, no traceback, every stage finished with its product and
    no trial failed."""
    root.mkdir()
    spec = spec_of(cell, kinds)
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    run_dir = root / "run"
    result = CliRunner().invoke(cli, ["run", str(path), "--run-dir", str(run_dir)])
    said = f"{cell.id} with {kinds}: {result.stderr[-3000:]}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{said}\nnestor run raised {result.exception!r}")
    assert "Traceback" not in result.output + result.stderr, said
    assert result.exit_code == 0, said
    names = [s["name"] for s in spec["stages"]]
    finished = [e["stage"] for e in stage_events(run_dir) if e["event"] == "stage_finished"]
    assert sorted(finished) == sorted(names), said
    failed = [(e["stage"], e["trial"]["id"], e.get("reason"))
              for e in stage_events(run_dir)
              if e["event"] == "trial_finished" and e["status"] == "failed"]
    assert not failed, f"{said}\nfailed trials: {failed}"
    results = json.loads((run_dir / "results.json").read_text())
    for stage in results["stages"]:
        assert stage["best"] and stage["best"]["checkpoint"], (said, stage["name"])
        for key in PRODUCT_KEYS:
            if key == stage["kind"]:
                assert stage.get(key), (said, stage["name"], stage.get("stop_reason"))


def test_an_ensemble_draws_members_from_a_search_of_two_objectives() -> None:
    """A two-objective search's trials carry a value per objective: its members rank on
    the first, as its best trial is chosen (the ensemble once found no trial with a
    value and stopped the run after the search)."""
    from nestor.orchestrator.engine.kinds._planned import source_objective
    from nestor.orchestrator.engine.kinds.ensemble import EnsembleTrials
    from nestor.orchestrator.spec import load_spec_text

    cell = Cell("ensemble", "builtin", "-", "random", 2)
    workflow = load_spec_text(yaml.safe_dump(spec_of(cell)))
    trials = [{"id": str(i), "status": "completed", "config": {"lr": lr}, "value": value}
              for i, (lr, value) in enumerate([(0.1, [0.5, 3.0]), (0.2, [0.9, 9.0]),
                                               (0.3, [0.7, 1.0])])]
    sources = [{"objective": {"metric": "val_accuracy", "mode": "max"}, "trials": trials}]
    phases = EnsembleTrials(sources).phases(workflow, workflow.stage("members"), sources,
                                            source_objective(sources))
    assert [(m.config["lr"], m.parents) for m in phases[0]] == [(0.2, ("1",)), (0.3, ("2",))]
