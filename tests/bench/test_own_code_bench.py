"""The own-code benchmark (issue 38): the user function's checkpoint contract (what ASHA
promotions and PBT rely on), the figures read from the function's own log (only what
happened within the budget counts; a seed that never reached the target counts at its
budget), the goal's verdict, nestor's specs, and the report's section."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from bench import own_code_bench as bench
from bench import own_code_train, report
from nestor.orchestrator.spec import load_spec_text


class Ctx(SimpleNamespace):
    def report(self, metrics: dict[str, float], step: int) -> None:
        self.reports.append((step, metrics))

    def should_stop(self) -> bool:
        return False


def ctx(checkpoint_dir: Path | None, continue_from: Path | None = None) -> Ctx:
    return Ctx(checkpoint_dir=None if checkpoint_dir is None else str(checkpoint_dir),
               continue_from=None if continue_from is None else str(continue_from),
               reports=[])


CONFIG = {"lr": 0.1, "momentum": 0.8, "batch_size": 64}


def test_a_continued_trial_carries_on_from_the_epochs_its_parent_trained(
        tmp_path: Path) -> None:
    parent, child, log = tmp_path / "a", tmp_path / "b", tmp_path / "log.jsonl"
    parent.mkdir()
    child.mkdir()
    first = ctx(parent)
    own_code_train.train({**CONFIG, "epochs": 1, "log": str(log)}, first)
    assert [s for s, _ in first.reports] == [1]
    assert (parent / own_code_train.CHECKPOINT).is_file()
    second = ctx(child, continue_from=parent)
    out = own_code_train.train({**CONFIG, "epochs": 3, "log": str(log)}, second)
    assert [s for s, _ in second.reports] == [2, 3]  # not from scratch: 2 epochs more
    assert out["val_accuracy"] == second.reports[-1][1]["val_accuracy"]
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["epoch"] for x in lines] == [1, 2, 3]
    assert all(0 <= x["val"] <= 1 and 0 <= x["test"] <= 1 for x in lines)
    # its own checkpoint (a retried attempt) wins over the one it continues from
    again = ctx(child, continue_from=parent)
    own_code_train.train({**CONFIG, "epochs": 3}, again)
    assert again.reports == []


def test_figures_count_only_what_the_budget_saw() -> None:
    lines = [{"t": 105.0, "val": 0.5, "test": 0.4}, {"t": 130.0, "val": 0.97, "test": 0.95},
             {"t": 140.0, "val": 0.99, "test": 0.96}, {"t": 170.0, "val": 1.0, "test": 1.0}]
    f = bench.figures(lines, t0=100.0, budget_s=60.0, target=0.98)
    assert (f["epochs"], f["late_epochs"]) == (3, 1)
    assert (f["best_val"], f["best_test"], f["to_target_s"]) == (0.99, 0.96, 40.0)
    assert f["first_epoch_s"] == 5.0
    never = bench.figures(lines[:2], t0=100.0, budget_s=60.0, target=0.98)
    assert never["to_target_s"] is None
    empty = bench.figures([], t0=0.0, budget_s=60.0, target=0.98)
    assert empty["best_val"] is None and empty["epochs"] == 0


def seed(i: int, val: float | None, to: float | None) -> dict[str, Any]:
    return {"seed": i, "best_val": val, "best_test": None if val is None else val - 0.01,
            "to_target_s": to, "first_epoch_s": 10.0, "epochs": 30}


def systems(nestor_to: list[float | None], peer_to: list[float | None],
            nestor_val: float = 0.985, peer_val: float = 0.985) -> dict[str, Any]:
    def one(vals: float, tos: list[float | None]) -> dict[str, Any]:
        seeds = [seed(i, vals, t) for i, t in enumerate(tos)]
        return {"seeds": seeds, **bench.summarize(seeds, 90.0)}

    return {"nestor-asha": one(nestor_val, nestor_to), "optuna-tpe-hyperband":
            one(peer_val, peer_to), "tune-pbt": one(0.9, [None, None])}


def test_the_goal_needs_the_accuracy_and_0_7x_the_fastest_peers_time() -> None:
    met = bench.verdict(systems([20.0, 30.0], [40.0, 50.0]))
    assert met["accuracy_first_or_tied"] and met["time_goal_met"]
    assert met["peer_fastest"] == "optuna-tpe-hyperband"
    assert met["time_ratio"] == pytest.approx(25.0 / 45.0)
    slow = bench.verdict(systems([40.0, 50.0], [40.0, 50.0]))
    assert not slow["time_goal_met"]
    never = bench.verdict(systems([None, None], [40.0, 50.0]))  # at its budget: 90 s
    assert not never["time_goal_met"]
    worse = bench.verdict(systems([20.0, 30.0], [40.0, 50.0], nestor_val=0.95))
    assert not worse["accuracy_first_or_tied"]


@pytest.mark.parametrize("system", [s for s in bench.SYSTEMS if s.startswith("nestor-")])
def test_nestor_runs_the_users_function_with_checkpoints(system: str, tmp_path: Path) -> None:
    spec = bench.nestor_spec(system, 4, tmp_path / "log.jsonl", 90.0)
    stage = load_spec_text(yaml.safe_dump(spec)).stage("tune")
    assert stage.search.seed == 4
    assert stage.trainer.function == bench.FUNCTION
    assert stage.trainer.checkpoints
    assert set(stage.space) == {"lr", "momentum", "batch_size"}


def test_the_report_ranks_the_systems_and_reads_the_goal() -> None:
    s = systems([20.0, 30.0], [40.0, 50.0])
    r = {"machine": {"host": "h", "cores": 2, "cpu": "c", "memory_gib": 1, "gpu": "none",
                     "started": "s", "finished": "f", "load_average_at_start": [9.0, 2, 1],
                     "load_average_at_end": [2.5, 2, 1]},
         "wall_s": 600.0, "budget_s": 90.0, "slots": 2, "seeds": 2, "target": 0.98,
         "target_note": "chosen first", "epochs": 9, "eta": 3, "pbt": bench.PBT,
         "space": {"lr": bench.LR, "momentum": bench.MOMENTUM, "batch_size": bench.BATCH},
         "function": bench.FUNCTION, "systems": s, "goal": bench.verdict(s)}
    lines = report.own_code_section(r)
    table = [line for line in lines if line.startswith("| ")][1:]
    assert [row.split(" | ")[1] for row in table] == [
        "nestor-asha", "optuna-tpe-hyperband", "tune-pbt"]
    assert "≥ 90 [≥ 90–≥ 90], 0/2 reached" in table[2]
    text = "\n".join(lines)
    assert "loaded machine" in text
    assert "0.7x the wall time of the fastest peer: **met**" in text


def test_startup_reads_ray_the_search_and_the_first_trial_from_the_folder(
        tmp_path: Path) -> None:
    import datetime

    t0 = datetime.datetime(2026, 11, 28, 2, 17, 3).timestamp()
    (tmp_path / "nestor-ray-0" / "ray" / "session_2026-11-28_02-17-23_003791_30738").mkdir(
        parents=True)
    (tmp_path / "run").mkdir()
    events = [{"event": "workflow_started", "time": t0 + 30.0},
              {"event": "trial_started", "time": t0 + 32.5},
              {"event": "trial_started", "time": t0 + 34.0}]
    (tmp_path / "run" / "journal.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in events))
    assert bench.startup(tmp_path, t0) == {"ray_s": 20.0, "search_s": 30.0,
                                           "first_trial_s": 32.5}
    tune = tmp_path / "tune-run"
    (tune / "ray" / "session_2026-11-28_02-17-13_1_2").mkdir(parents=True)
    (tune / "tune" / "trainable_2026-11-28_02-17-45").mkdir(parents=True)
    assert bench.startup(tune, t0) == {"ray_s": 10.0, "search_s": 42.0, "first_trial_s": None}
    assert bench.startup(tmp_path / "optuna", t0) == {
        "ray_s": None, "search_s": None, "first_trial_s": None}
