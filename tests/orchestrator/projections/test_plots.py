"""Plots and the numbers behind them, from hand-built journals and summaries.

The numbers (best so far, Pareto front, slot intervals, utilization) are
checked exactly; a drawn plot is checked to be a real picture of the right
size with something on it, since its pixels are not a contract.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pytest

from nestor.orchestrator.projections import plots
from nestor.search import Objective


def started(t: float, trial: str, attempt: int = 1, shape: str = "1x1",
            stage: str = "tune") -> dict[str, Any]:
    return {"event": "trial_started", "time": t, "stage": stage, "trial": {"id": trial},
            "attempt": attempt, "gang": 1, "shape": shape}


def finished(t: float, trial: str, value: Any, status: str = "completed", attempt: int = 1,
             stage: str = "tune") -> dict[str, Any]:
    return {"event": "trial_finished", "time": t, "stage": stage, "trial": {"id": trial},
            "attempt": attempt, "status": status, "value": value}


def failed_attempt(t: float, trial: str, attempt: int = 1) -> dict[str, Any]:
    return {"event": "trial_attempt_failed", "time": t, "stage": "tune", "trial": {"id": trial},
            "attempt": attempt, "reason": "boom"}


def picture(path: Path) -> Any:
    """The PNG as pixels; asserts it is not blank."""
    import matplotlib.image

    pixels = matplotlib.image.imread(path)
    assert pixels.shape[0] > 300 and pixels.shape[1] > 500
    assert (pixels[..., :3] < 0.5).any(axis=-1).mean() > 0.005, "nothing dark drawn"
    return pixels


def test_best_so_far_counts_every_run_and_only_improvements() -> None:
    events = [
        {"event": "workflow_started", "time": 0.0, "slots": 2},
        finished(1, "a", 0.5),
        failed_attempt(2, "b"),                      # run 2: failed, retried
        finished(3, "b", 0.4, attempt=2),            # run 3: worse than a for max
        finished(4, "c", 0.9, status="failed"),      # run 4: failed trials never count
        finished(5, "d", [0.7, 3.0]),                # run 5: a list: first objective
        finished(6, "x", 0.99, stage="other"),       # another stage: ignored
    ]
    assert plots.best_so_far(events, "tune", "max") == [(1, 0.5), (5, 0.7)]
    assert plots.best_so_far(events, "tune", "min") == [(1, 0.5), (3, 0.4)]


def test_best_so_far_from_a_summary_charges_attempts() -> None:
    summary = {"trials": [
        {"status": "completed", "value": 2.0, "attempts": 1},
        {"status": "completed", "value": 1.0, "attempts": 3},
        {"status": "failed", "value": None, "attempts": 2},
        {"status": "completed", "value": 1.5, "attempts": 1},
    ]}
    assert plots.best_so_far_from_summary(summary, "min") == [(1, 2.0), (4, 1.0)]


def brute_front(points: list[tuple[float, ...]], modes: list[str]) -> set[int]:
    signs = [1 if m == "min" else -1 for m in modes]

    def dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
        pairs = [(s * x, s * y) for s, x, y in zip(signs, a, b, strict=True)]
        return all(x <= y for x, y in pairs) and any(x < y for x, y in pairs)

    return {i for i, p in enumerate(points) if not any(dominates(q, p) for q in points)}


@pytest.mark.parametrize("modes", [["min", "min"], ["max", "min"], ["max", "max", "min"]])
def test_pareto_front_matches_brute_force(modes: list[str]) -> None:
    rng = random.Random(len(modes) * 7 + len(modes[0]))
    for _ in range(30):
        points = [tuple(float(rng.randint(0, 5)) for _ in modes) for _ in range(12)]
        assert set(plots.pareto_front(points, modes)) == brute_front(points, modes)


def test_pareto_front_keeps_ties_and_drops_dominated() -> None:
    points = [(1.0, 5.0), (2.0, 2.0), (5.0, 1.0), (3.0, 3.0), (2.0, 2.0)]
    assert plots.pareto_front(points, ["min", "min"]) == [0, 1, 2, 4]


def test_slot_intervals_lay_attempts_on_free_slots_and_show_idle_time() -> None:
    events = [
        {"event": "workflow_started", "time": 0.0, "slots": 4},
        started(0, "a", shape="2x1"), started(0, "b"),
        finished(10, "b", 1.0),                      # slot 2 idle from 10 to 20
        finished(20, "a", 2.0),
        started(20, "c", shape="1x2"),               # takes the lowest free: 0 and 1
        started(20, "d"),
        failed_attempt(25, "d"),
        started(25, "d", attempt=2),
        {"event": "workflow_resumed", "time": 30.0, "slots": 4},   # driver died: c, d cut
        started(31, "c", attempt=2, shape="1x2"),
        finished(40, "c", 3.0, attempt=2),
    ]
    intervals, slots = plots.slot_intervals(events, "tune")
    assert slots == 4
    got = {(i.trial, i.attempt): (i.slots, i.start, i.end, i.status) for i in intervals}
    assert got == {
        ("a", 1): ((0, 1), 0, 20, "completed"),
        ("b", 1): ((2,), 0, 10, "completed"),
        ("c", 1): ((0, 1), 20, 30.0, "interrupted"),
        ("d", 1): ((2,), 20, 25, "failed"),
        ("d", 2): ((2,), 25, 30.0, "interrupted"),
        ("c", 2): ((0, 1), 31, 40, "completed"),
    }
    busy = 2 * 20 + 10 + 2 * 10 + 5 + 5 + 2 * 9
    assert plots.utilization(intervals, slots) == pytest.approx(busy / (4 * 40))


def test_slot_intervals_share_slots_between_stages_and_grow_when_oversubscribed() -> None:
    events = [
        {"event": "workflow_started", "time": 0.0, "slots": 2},
        started(0, "z", stage="other"), started(0, "a"), started(1, "b"),
        finished(5, "a", 1.0), finished(6, "b", 1.0), finished(7, "z", 0.0, stage="other"),
    ]
    intervals, slots = plots.slot_intervals(events, "tune")
    assert slots == 3  # three at once on two slots: the third row shows the oversubscription
    assert [(i.trial, i.slots, i.stage) for i in intervals] == [("a", (1,), "tune"),
                                                                ("b", (2,), "tune")]
    everything, _ = plots.slot_intervals(events)
    assert {(i.stage, i.trial): i.slots for i in everything} == {
        ("other", "z"): (0,), ("tune", "a"): (1,), ("tune", "b"): (2,)}
    # The stage's window (0 to 6 s) had z on slot 0 too: 5 + 5 + 6 of 3 x 6 slot-seconds.
    assert plots.utilization(everything, 3, (0.0, 6.0)) == pytest.approx(16 / 18)


def test_slot_use_plot_is_drawn(tmp_path: Path) -> None:
    events = [{"event": "workflow_started", "time": 0.0, "slots": 3}]
    for n in range(6):
        events += [started(n * 2, str(n)), finished(n * 2 + 3, str(n), 1.0,
                                                     status=["completed", "failed"][n % 2])]
    events += [started(1, "x", stage="other"), finished(4, "x", 1.0, stage="other")]
    intervals, slots = plots.slot_intervals(events)
    path = plots.plot_slot_use(intervals, slots, "stage tune", tmp_path / "slots.png",
                               stage="tune")
    picture(path)


def test_slot_use_of_thousands_of_attempts_costs_artists_per_slot_not_per_attempt(
        tmp_path: Path, monkeypatch) -> None:
    """matplotlib's cost is per artist: 2,000 trivial trials drawn a bar and a name each
    took a minute at a sweep's end. Drawn per slot and colour, names only where few."""
    from matplotlib.axes import Axes

    events = [{"event": "workflow_started", "time": 0.0, "slots": 3}]
    for n in range(2000):
        events += [started(n / 3, str(n)), finished(n / 3 + 0.9, str(n), 1.0,
                                                    status=["completed", "failed"][n % 7 == 0])]
    calls = {"broken_barh": 0, "text": 0}
    for name in calls:
        real = getattr(Axes, name)

        def counted(self, *args, real=real, name=name, **kwargs):
            calls[name] += 1
            return real(self, *args, **kwargs)

        monkeypatch.setattr(Axes, name, counted)
    intervals, slots = plots.slot_intervals(events)
    picture(plots.plot_slot_use(intervals, slots, "stage tune", tmp_path / "slots.png",
                                stage="tune"))
    assert calls["broken_barh"] <= slots * 2, calls  # a slot's bars of one colour at once
    assert calls["text"] == 0, calls
    few = [i for i in intervals if int(i.trial) < 10]
    plots.plot_slot_use(few, slots, "stage tune", tmp_path / "few.png", stage="tune")
    assert calls["text"] == 10, calls  # a few attempts: each named on its bar


def hpo_summary(values: list[Any], statuses: list[str] | None = None) -> dict[str, Any]:
    statuses = statuses or ["completed"] * len(values)
    return {
        "name": "tune", "kind": "hpo", "n_runs": len(values),
        "trials": [{"id": str(i), "value": v, "status": s, "generation": i // 4,
                    "attempts": 1, "config": {"x": i}}
                   for i, (v, s) in enumerate(zip(values, statuses, strict=True))],
    }


def test_search_plots_are_drawn(tmp_path: Path) -> None:
    values: list[Any] = [0.5 + 0.03 * i for i in range(11)] + [None]
    summary = hpo_summary(values, ["completed"] * 11 + ["failed"])
    curve = plots.best_so_far_from_summary(summary, "max")
    picture(plots.plot_best_so_far({"tune (genetic)": curve, "other (random)": curve[:3]},
                                   {"tune (genetic)": 12, "other (random)": 12},
                                   "val_accuracy", "max", tmp_path / "best.png"))
    picture(plots.plot_generations(summary, "val_accuracy", "max", tmp_path / "gen.png"))
    pairs = [[float(a), float(b)] for a, b in itertools.product(range(4), range(3))]
    two = hpo_summary(pairs)
    picture(plots.plot_pareto(two, [Objective("loss", "min"), Objective("size", "min")],
                              tmp_path / "pareto.png"))


@pytest.mark.parametrize(
    ("values", "scale"),
    [
        ([1.1e7, 3e5, 40.0, 0.065], "log"),  # a fit's error over a search
        ([0.5, 0.9, 0.97], "linear"),  # accuracies
        ([-1.0, 5.0, 500.0], "linear"),  # not all positive: no log axis
        ([2.0, 150.0], "linear"),  # under 100-fold
        ([], "linear"),
    ],
)
def test_values_spanning_decades_are_drawn_on_a_log_axis(values: list, scale: str) -> None:
    assert plots.value_scale(values) == scale


def test_a_fits_error_is_plotted_on_a_log_axis(tmp_path: Path, monkeypatch) -> None:
    scales = []
    real = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: (
        scales.append(fig.axes[0].get_yscale()), real(fig, path))[1])
    summary = hpo_summary([1.1e7 / 10**i for i in range(8)])
    curve = plots.best_so_far_from_summary(summary, "min")
    plots.plot_best_so_far({"fit (lq-cmaes)": curve}, {"fit (lq-cmaes)": 8}, "fom", "min",
                           tmp_path / "best.png")
    plots.plot_generations(summary, "fom", "min", tmp_path / "gen.png")
    assert scales == ["log", "log"]


ENSEMBLE = {
    "test_value": 0.962, "val_value": 0.958, "best_member_test_value": 0.951,
    "mean_member_test_value": 0.944,
    "members": [
        {"id": f"member-{i}", "config": {"lr": 0.01 * (i + 1)}, "seed": 1000 + i,
         "weight": w, "val_value": 0.94 + 0.005 * i, "test_value": 0.937 + 0.007 * i,
         "checkpoint": f"checkpoints/ens/member-{i}/last.pt"}
        for i, w in enumerate([0.5, 0.3, 0.2])
    ],
}


def curve(start: float, step: float, epochs: int) -> list[dict[str, Any]]:
    return [{"epoch": e, "val_accuracy": start + step * e, "train_loss": 1.0 / (e + 1)}
            for e in range(epochs)]


TRANSFER = {
    "test_value": 0.95, "scratch_test_value": 0.91,
    "curves": {"pretrain": curve(0.6, 0.08, 4), "finetune": curve(0.85, 0.03, 3),
               "scratch": curve(0.5, 0.12, 3)},
}


def test_ensemble_plot_shows_members_and_the_ensemble(tmp_path: Path) -> None:
    picture(plots.plot_ensemble("ens", ENSEMBLE, tmp_path / "ens.png"))
    # Without test values it falls back to validation and says so; it still draws.
    val_only = {**ENSEMBLE, "test_value": None,
                "members": [{**m, "test_value": None} for m in ENSEMBLE["members"]]}
    picture(plots.plot_ensemble("ens", val_only, tmp_path / "ens-val.png"))


def test_transfer_plot_draws_curves_and_copes_with_none(tmp_path: Path) -> None:
    assert plots.curve_metric(TRANSFER["curves"]) == "val_accuracy"
    assert plots.curve_metric({"finetune": [{"epoch": 0, "val_loss": 0.3}]}) == "val_loss"
    assert plots.curve_metric({"finetune": [], "scratch": []}) is None
    picture(plots.plot_transfer("tl", TRANSFER, tmp_path / "tl.png"))
    empty = {"test_value": None, "scratch_test_value": None,
             "curves": {"pretrain": [], "finetune": [], "scratch": []}}
    picture(plots.plot_transfer("tl", empty, tmp_path / "tl-empty.png"))
