"""PNG plots of a finished stage, for the run directory and MLflow.

Each plot is a pure function of plain data (a stage summary, journal events)
and a path, so it can be drawn for a stage long finished, or from a test's
hand-made summary. The numbers behind the pictures (best-so-far curves, the
Pareto front, slot intervals) are computed by separate functions that tests
check directly; drawing only lays them out.

Honest by construction: the x axis of a search is *runs* (every attempt that
trained, failed retries included), not just finished trials, and the slot
chart shows idle slots as gaps, with the utilization in its title.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nestor.orchestrator.engine.kinds.summaries import PbtSummary
from nestor.orchestrator.journal.state import Attempt, RunState, fold
from nestor.orchestrator.journal.status import SCORED, TrialStatus
from nestor.orchestrator.projections.explain import completed, first_value, pareto_front

STATUS_COLORS: dict[str, str] = {
    TrialStatus.COMPLETED: "tab:green", TrialStatus.PRUNED: "tab:orange",
    TrialStatus.FAILED: "tab:red", TrialStatus.INTERRUPTED: "tab:gray",
    TrialStatus.RUNNING: "tab:blue", TrialStatus.STOPPED: "tab:purple"}
# A slot-use chart names each attempt on its bar up to this many attempts; beyond,
# the names would overlap into ink, and each is an artist that costs its drawing.
LABELLED_BARS = 200


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def warm() -> None:
    """Import matplotlib now (a third of a second of CPU here), while the driver waits
    for Ray to start, rather than when a stage ends, with its user waiting for the
    stage's plots before the command exits."""
    _pyplot()


def _save(fig: Any, path: Path) -> Path:
    """Lay ``fig`` out and write it, cropped to what it draws only where something
    reaches beyond the figure (a legend placed outside the axes, a title wider than
    the figure). The crop draws the whole figure once more, a quarter of a plot's
    time, and a stage's plots are what its user waits for after its last trial;
    finding whether it is needed costs a tenth."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    drawn, whole = fig.get_tightbbox(fig.canvas.get_renderer()), fig.bbox_inches
    inside = (drawn.x0 >= whole.x0 and drawn.y0 >= whole.y0 and drawn.x1 <= whole.x1
              and drawn.y1 <= whole.y1)
    fig.savefig(path, **({} if inside else {"bbox_inches": "tight"}))
    _pyplot().close(fig)
    return path


def _first(value: Any) -> float | None:
    """A trial's value for one-objective plots: the first objective of a list."""
    if isinstance(value, list):
        value = value[0] if value else None
    return None if value is None else float(value)


def _better(a: float, b: float, mode: str) -> bool:
    return a > b if mode == "max" else a < b


# -- best so far --------------------------------------------------------------------------


def best_so_far(events: RunState | Iterable[dict[str, Any]], stage: str,
                mode: str) -> list[tuple[int, float]]:
    """(runs so far, best value so far) after each run of ``stage`` that changed the best.

    A run is an attempt that ended (finished, failed and retried, or pruned),
    counted in the order they ended, so the curve charges the search for every
    training run it paid for. ``events``: the journal's fold, or its records.
    """
    state = as_state(events)
    best, curve = None, []
    found = state.stages.get(stage)
    for runs, run in enumerate(found.runs if found else [], start=1):
        if run.status != TrialStatus.COMPLETED:
            continue
        value = _first(run.value)
        if value is not None and (best is None or _better(value, best, mode)):
            best = value
            curve.append((runs, best))
    return curve


def as_state(events: RunState | Iterable[dict[str, Any]]) -> RunState:
    """The journal's fold, made from its records unless it is one already. The last
    list of records folded is remembered (held, so it is the same list; and of the
    same length): a stage's plots ask for its curves and slots from one list."""
    if isinstance(events, RunState):
        return events
    if isinstance(events, list):
        held, length, state = _LAST_FOLD
        if held is events and length == len(events):
            return state
        state = fold(events)
        _LAST_FOLD[:] = [events, len(events), state]
        return state
    return fold(events)


_LAST_FOLD: list[Any] = [None, 0, None]


def best_so_far_from_summary(summary: dict[str, Any], mode: str) -> list[tuple[int, float]]:
    """The same curve from a summary alone (no journal): trials in their recorded
    order, each counting its attempts as runs."""
    runs, best, curve = 0, None, []
    for trial in summary.get("trials", []):
        runs += max(int(trial.get("attempts") or 1), 1)
        value = _first(trial.get("value"))
        if trial.get("status") == TrialStatus.COMPLETED and value is not None and (
            best is None or _better(value, best, mode)
        ):
            best = value
            curve.append((runs, best))
    return curve


WIDE = 100.0  # positive values spanning this factor or more are drawn on a log axis


def value_scale(values: Iterable[float]) -> str:
    """"log" for positive values spanning WIDE-fold or more (a fit's error falling
    from 1e7 to 1e-1 is a flat line then a cliff on a linear axis), else "linear"."""
    values = [v for v in values if math.isfinite(v)]
    if not values or min(values) <= 0 or max(values) / min(values) < WIDE:
        return "linear"
    return "log"


def plot_best_so_far(curves: dict[str, list[tuple[int, float]]], total_runs: dict[str, int],
                     metric: str, mode: str, path: Path) -> Path:
    """One step line per search (label: "stage (algorithm)"), best value against runs."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    for label, curve in curves.items():
        if not curve:
            continue
        xs = [runs for runs, _ in curve] + [max(total_runs.get(label, 0), curve[-1][0])]
        ys = [value for _, value in curve] + [curve[-1][1]]
        ax.step(xs, ys, where="post", linewidth=1.8, label=f"{label}: {curve[-1][1]:.4g}")
        ax.scatter(xs[:-1], ys[:-1], s=14)
    if not any(curves.values()):
        ax.text(0.5, 0.5, "no completed trial", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_yscale(value_scale(v for curve in curves.values() for _, v in curve))
    ax.set_xlabel("runs (every attempt that trained, failed ones included)")
    ax.set_ylabel(f"best {metric} so far ({mode})")
    ax.set_title(f"best {metric} against runs, per search")
    ax.grid(alpha=0.3)
    if any(curves.values()):  # no curve, no legend (matplotlib warns on stderr otherwise)
        ax.legend(loc="best", fontsize="small")
    return _save(fig, path)


# -- trials by generation -----------------------------------------------------------------


def plot_generations(summary: dict[str, Any], metric: str, mode: str, path: Path) -> Path:
    """Each trial's metric at its generation (box per generation, points jittered);
    failed trials as red crosses under the lowest point."""
    import random

    plt = _pyplot()
    rng = random.Random(0)  # the same jitter every time the plot is drawn
    by_generation: dict[int, list[float]] = {}
    failed: list[int] = []
    for trial in summary.get("trials", []):
        value = _first(trial.get("value"))
        generation = int(trial.get("generation") or 0)
        if trial.get("status") in SCORED and value is not None:
            by_generation.setdefault(generation, []).append(value)
        elif trial.get("status") == TrialStatus.FAILED:
            failed.append(generation)
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    generations = sorted(by_generation)
    if generations:
        ax.boxplot([by_generation[g] for g in generations], positions=generations,
                   widths=0.5, showfliers=False)
        for generation in generations:
            values = by_generation[generation]
            xs = [generation + rng.uniform(-0.18, 0.18) for _ in values]
            ax.scatter(xs, values, s=22, alpha=0.8, color="tab:blue", zorder=3)
        low = min(min(v) for v in by_generation.values())
    else:
        low = 0.0
    if failed:
        ax.scatter(failed, [low] * len(failed), marker="x", color="red", s=40, zorder=4,
                   label=f"failed ({len(failed)})")
        ax.legend(loc="best", fontsize="small")
    ax.set_yscale(value_scale(v for values in by_generation.values() for v in values))
    ax.set_xticks(sorted(set(generations) | set(failed)) or [0])
    ax.set_xlabel("generation")
    ax.set_ylabel(f"{metric} ({mode})")
    ax.set_title(f"stage {summary['name']}: {metric} of each trial by generation")
    ax.grid(alpha=0.3)
    return _save(fig, path)


# -- Pareto front -------------------------------------------------------------------------


def plot_pareto(summary: dict[str, Any], objectives: Sequence[Any], path: Path) -> Path:
    """All completed trials on the first two objectives, the front joined up."""
    plt = _pyplot()
    names = [o.metric for o in objectives[:2]]
    modes = [o.mode for o in objectives[:2]]
    points, ids = [], []
    for trial in summary.get("trials", []):
        value = trial.get("value")
        if (trial.get("status") == TrialStatus.COMPLETED and isinstance(value, list)
                and len(value) >= 2):
            points.append((float(value[0]), float(value[1])))
            ids.append(str(trial["id"]))
    front = pareto_front(points, modes) if points else []
    fig, ax = plt.subplots(figsize=(7, 5), dpi=110)
    if points:
        ax.scatter([p[0] for p in points], [p[1] for p in points], s=22, color="tab:gray",
                   label=f"trials ({len(points)})")
        ordered = sorted((points[i], ids[i]) for i in front)
        ax.plot([p[0] for p, _ in ordered], [p[1] for p, _ in ordered], "o-",
                color="tab:red", label=f"Pareto front ({len(front)})")
        for (x, y), trial_id in ordered:
            ax.annotate(trial_id, (x, y), textcoords="offset points", xytext=(4, 4),
                        fontsize="x-small")
        ax.legend(loc="best", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no completed trial with two objectives", ha="center",
                va="center", transform=ax.transAxes)
    ax.set_xlabel(f"{names[0]} ({modes[0]})")
    ax.set_ylabel(f"{names[1]} ({modes[1]})")
    more = f"; {len(objectives) - 2} more objective(s) not shown" if len(objectives) > 2 else ""
    ax.set_title(f"stage {summary['name']}: Pareto front{more}")
    ax.grid(alpha=0.3)
    return _save(fig, path)


# -- slot use -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SlotInterval:
    """One attempt of one trial on some slots, from its start to its end."""

    slots: tuple[int, ...]
    start: float
    end: float
    trial: str
    attempt: int
    status: str
    stage: str = ""


def slot_intervals(events: RunState | Iterable[dict[str, Any]], stage: str | None = None,
                   ) -> tuple[list[SlotInterval], int]:
    """The journal's attempts laid on numbered slots; returns those of ``stage``
    (all if None) and the slot count. ``events``: the journal's fold, or its records.

    Every stage's attempts take slots, so all are laid out (stages of a DAG run
    at once) before the result is filtered. The journal says when each attempt
    started and ended and how many ranks (dp x mp) it used, not which slots:
    each start takes the lowest-numbered free ones, as a person would draw it.
    An attempt a driver restart cut ends then, "interrupted"; one never ended
    (the driver was killed) runs to the last event.
    Slots past the workflow's count appear only when it oversubscribed.
    """
    state = as_state(events)
    slots = state.workflow.slots
    last = state.last_time or 0.0
    free = FreeSlots(slots)
    taken: dict[int, tuple[Attempt, tuple[int, ...]]] = {}  # id(attempt) -> it, its slots
    done: list[SlotInterval] = []
    for what, attempt in state.timeline():
        if what == "start":
            taken[id(attempt)] = (attempt, free.take(_ranks(attempt.shape)))
        elif what == "end" and id(attempt) in taken:
            done.append(_interval(*taken.pop(id(attempt)), free, attempt.ended,
                                  attempt.outcome or TrialStatus.COMPLETED))
    for attempt, held in taken.values():  # never ended: the driver was killed
        done.append(_interval(attempt, held, free, last, TrialStatus.RUNNING))
    used = max((s for i in done for s in i.slots), default=-1) + 1
    mine = [i for i in done if stage is None or i.stage == stage]
    return sorted(mine, key=lambda i: (i.start, i.slots)), max(slots, used)


class FreeSlots:
    """The free slot numbers, lowest first: a start takes the lowest ``ranks`` free
    ones (past ``slots`` when all are taken: oversubscription), in O(ranks log slots),
    so laying out a journal's attempts costs time linear in the journal."""

    def __init__(self, slots: int) -> None:
        self._free = list(range(slots))  # a heap of the free numbers below _next
        self._next = slots  # no slot at or past it was ever taken

    def take(self, ranks: int) -> tuple[int, ...]:
        out = []
        for _ in range(ranks):
            if self._free:
                out.append(heapq.heappop(self._free))
            else:
                out.append(self._next)
                self._next += 1
        return tuple(out)

    def give(self, slots: tuple[int, ...]) -> None:
        for slot in slots:
            heapq.heappush(self._free, slot)


def _interval(attempt: Attempt, slots: tuple[int, ...], free: FreeSlots,
              end: float | None, status: str) -> SlotInterval:
    free.give(slots)
    return SlotInterval(slots, attempt.started or 0.0, end if end is not None else 0.0,
                        attempt.trial, attempt.attempt, status, attempt.stage)


def _ranks(shape: Any) -> int:
    try:
        data, model = str(shape).split("x")
        return max(int(data) * int(model), 1)
    except (ValueError, AttributeError):
        return 1


def utilization(intervals: Sequence[SlotInterval], slots: int,
                window: tuple[float, float] | None = None) -> float:
    """Busy slot-seconds over slots x time, in ``window`` (default: first start to
    last end): 1.0 means no idle slot."""
    if not intervals or slots <= 0:
        return 0.0
    low, high = window or (min(i.start for i in intervals), max(i.end for i in intervals))
    busy = sum(max(0.0, min(i.end, high) - max(i.start, low)) * len(i.slots)
               for i in intervals)
    return busy / (slots * (high - low)) if high > low else 0.0


def plot_slot_use(intervals: Sequence[SlotInterval], slots: int, title: str,
                  path: Path, stage: str | None = None) -> Path:
    """A Gantt chart: one row per slot, a bar per attempt, coloured by how it ended.
    White space in a row is a slot that had nothing to run. With ``stage``, the
    chart spans that stage's time and other stages' attempts are drawn in grey."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    mine = [i for i in intervals if stage is None or i.stage == stage]
    low = min((i.start for i in mine), default=0.0)
    high = max((i.end for i in mine), default=0.0)
    shown = [i for i in intervals if i.end > low and i.start < high] if stage else mine
    fig, ax = plt.subplots(figsize=(9, 1.6 + 0.45 * max(slots, 1)), dpi=110)
    # One collection per slot and colour, not an artist per attempt: matplotlib's
    # cost is per artist (2,000 trivial trials took a minute to draw, one by one).
    bars: dict[tuple[int, str], list[tuple[float, float]]] = {}
    labelled = len(shown) <= LABELLED_BARS
    for interval in shown:
        ours = stage is None or interval.stage == stage
        color = STATUS_COLORS.get(interval.status, "tab:purple") if ours else "lightgray"
        start, end = max(interval.start, low), min(interval.end, high)
        for slot in interval.slots:
            bars.setdefault((slot, color), []).append((start - low, end - start))
        if not labelled:
            continue
        label = interval.trial if interval.attempt == 1 else f"{interval.trial}#{interval.attempt}"
        if not ours:
            label = f"{interval.stage}/{label}"
        ax.text((start + end) / 2 - low, min(interval.slots), label, ha="center",
                va="center", fontsize="x-small", clip_on=True)
    for (slot, color), spans in bars.items():
        ax.broken_barh(spans, (slot - 0.4, 0.8), facecolors=color, edgecolors="black",
                       linewidth=0.5)
    ax.set_yticks(range(slots))
    ax.set_yticklabels([f"slot {s}" for s in range(slots)])
    ax.set_ylim(slots - 0.5, -0.5)
    ax.set_xlim(0, max(high - low, 1e-3))
    ax.set_xlabel("seconds since the stage's first trial started")
    used = utilization(shown, slots, (low, high))
    ax.set_title(f"{title}: {len(mine)} attempts on {slots} slots,"
                 f" {used:.0%} busy (white = idle slot)")
    handles = [Patch(color=STATUS_COLORS.get(s, "tab:purple"), label=s)
               for s in sorted({i.status for i in mine})]
    if len(shown) > len(mine):
        handles.append(Patch(color="lightgray", label="other stages"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="x-small")
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


# -- ensemble and transfer ----------------------------------------------------------------


def plot_ensemble(name: str, ensemble: dict[str, Any], path: Path) -> Path:
    """Each member's accuracy beside the ensemble's (test split where known)."""
    plt = _pyplot()
    members = ensemble.get("members", [])
    use_test = ensemble.get("test_value") is not None
    key = "test_value" if use_test else "val_value"
    labels = [f"{m['id']}\nw={m.get('weight', 0):.2g}" for m in members] + ["ensemble"]
    values = [m.get(key) for m in members] + [ensemble.get(key)]
    heights = [v if v is not None else 0.0 for v in values]
    colors = ["tab:blue"] * len(members) + ["tab:red"]
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(labels) + 2), 4.5), dpi=110)
    bars = ax.bar(range(len(labels)), heights, color=colors)
    for bar, value in zip(bars, values, strict=True):
        text = "n/a" if value is None else f"{value:.4f}"
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize="x-small")
    mean = ensemble.get("mean_member_test_value") if use_test else None
    if mean is not None:
        ax.axhline(mean, color="black", linestyle="--", linewidth=1,
                   label=f"mean member {mean:.4f}")
        ax.legend(loc="lower right", fontsize="small")
    known = [v for v in values if v is not None]
    if known:
        spread = max(known) - min(known)
        ax.set_ylim(max(0.0, min(known) - max(spread, 0.01) * 1.5),
                    max(known) + max(spread, 0.01) * 0.6)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize="x-small")
    split = "test" if use_test else "validation"
    ax.set_ylabel(f"{split} value")
    ax.set_title(f"stage {name}: {len(members)} members against their ensemble ({split})")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def plot_population(name: str, pbt: PbtSummary, path: Path) -> Path:
    """A population's hyperparameter schedules: per numeric hyperparameter, each
    member's value over the budget, an x where it copied a better member, and the
    winner's lineage (the schedule to replay) in black."""
    plt = _pyplot()
    members = pbt.members
    steps = [s for history in members.values() for s in history]
    keys = sorted({k for s in steps for k, v in (s.config or {}).items()
                   if isinstance(v, int | float) and not isinstance(v, bool)})
    fig, axes = plt.subplots(max(1, len(keys)), 1, figsize=(8, 2.6 * max(1, len(keys))),
                             dpi=110, squeeze=False)
    for ax, key in zip(axes[:, 0], keys or ["-"], strict=True):
        for member, history in sorted(members.items(), key=lambda m: int(m[0])):
            xs = [x for s in history for x in (s.start, s.until)]
            ys = [s.config.get(key) for s in history for _ in (0, 1)]
            line, = ax.plot(xs, ys, linewidth=1, alpha=0.7, label=f"member {member}")
            copied = [s for s in history if s.copied_from is not None]
            ax.scatter([s.start for s in copied], [s.config.get(key) for s in copied],
                       marker="x", color=line.get_color(), zorder=3)
        best = pbt.schedule
        ax.plot([x for s in best for x in (s.start, s.until)],
                [s.config.get(key) for s in best for _ in (0, 1)], color="black",
                linewidth=2.5, label="winner's schedule")
        ax.set_ylabel(key)
        if key in ("lr",) and all(v and v > 0 for v in ax.get_lines()[0].get_ydata()):
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("budget (epochs)")
    axes[0, 0].legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="x-small")
    axes[0, 0].set_title(f"stage {name}: population-based training (x: copied a better member)")
    return _save(fig, path)


def curve_metric(curves: dict[str, list[dict[str, Any]]]) -> str | None:
    """The metric to draw: val_accuracy if any curve has it, else the first other number."""
    keys = [k for points in curves.values() for p in points for k, v in p.items()
            if k != "epoch" and isinstance(v, int | float) and not isinstance(v, bool)]
    if "val_accuracy" in keys:
        return "val_accuracy"
    return keys[0] if keys else None


def plot_transfer(name: str, transfer: dict[str, Any], path: Path) -> Path:
    """Learning curves: pre-training on the left; fine-tuning against training the
    same model from scratch on the right, with both test values in the title."""
    plt = _pyplot()
    curves = {k: list(v or []) for k, v in (transfer.get("curves") or {}).items()}
    metric = curve_metric(curves)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5), dpi=110, sharey=True)
    styles = {"pretrain": ("tab:gray", left), "finetune": ("tab:red", right),
              "scratch": ("tab:blue", right)}
    for label, (color, ax) in styles.items():
        points = [p for p in curves.get(label, []) if metric and p.get(metric) is not None]
        if points:
            xs = [p.get("epoch", i) for i, p in enumerate(points)]
            ax.plot(xs, [p[metric] for p in points], "o-", color=color, label=label)
    for ax, what in ((left, "pre-training"), (right, "fine-tune vs scratch")):
        if ax.lines:
            ax.legend(loc="lower right", fontsize="small")
        else:
            ax.text(0.5, 0.5, "no curve recorded", ha="center", va="center",
                    transform=ax.transAxes)
        ax.set_xlabel("epoch")
        ax.set_title(what)
        ax.grid(alpha=0.3)
    left.set_ylabel(metric or "metric")
    tuned, scratch = transfer.get("test_value"), transfer.get("scratch_test_value")
    fig.suptitle(f"stage {name}: test {_fmt(tuned)} fine-tuned, {_fmt(scratch)} from scratch")
    return _save(fig, path)


def _fmt(value: Any) -> str:
    return "n/a" if value is None else f"{value:.4f}"


# -- what the parameters did: parallel coordinates and slices ------------------------------


@dataclass(frozen=True)
class Axis:
    """One parameter as an axis: where each trial's value sits in [0, 1] and what the
    ticks say (a log scale where the values span two decades or more; categories
    spaced evenly)."""

    name: str
    positions: list[float | None]
    ticks: list[tuple[float, str]]
    log: bool
    numeric: bool


def parameter_axes(trials: list[dict[str, Any]]) -> list[Axis]:
    names = sorted({k for t in trials for k in t.get("config") or {}})
    axes = []
    for name in names:
        raw = [(t.get("config") or {}).get(name) for t in trials]
        present = [v for v in raw if v is not None]
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in present)
        if numeric and present:
            low, high = float(min(present)), float(max(present))
            log = low > 0 and high / low >= 100
            f = math.log10 if log else float
            lo, hi = f(low), f(high)
            span = (hi - lo) or 1.0
            positions = [None if v is None else (f(float(v)) - lo) / span for v in raw]
            ticks = [(0.0, f"{low:.4g}"), (1.0, f"{high:.4g}")]
        else:
            levels = sorted({str(v) for v in present})
            spot = {level: (i / (len(levels) - 1) if len(levels) > 1 else 0.5)
                    for i, level in enumerate(levels)}
            positions = [None if v is None else spot[str(v)] for v in raw]
            ticks, log = [(spot[level], level) for level in levels], False
        axes.append(Axis(name, positions, ticks, log, numeric and bool(present)))
    return axes


def plot_parallel_coordinates(summary: dict[str, Any], metric: str, mode: str,
                              path: Path) -> Path | None:
    """Every completed trial as a line across its parameters to its value, coloured
    by the value (darker is better); the best trial drawn thick. A parameter a trial
    lacks (a conditional one) breaks its line there."""
    trials = completed(summary)
    if not trials:
        return None
    plt = _pyplot()
    axes = parameter_axes(trials)
    values = [first_value(t) for t in trials]
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    goodness = [((v - low) / span) if mode == "max" else ((high - v) / span) for v in values]
    best = max(range(len(trials)), key=lambda i: goodness[i])
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * (len(axes) + 1)), 4.8), dpi=110)
    cmap = plt.get_cmap("viridis_r")
    xs = list(range(len(axes) + 1))

    def line(i: int) -> list[float | None]:  # trial i's heights, None where it lacks one
        return [a.positions[i] for a in axes] + [(values[i] - low) / span]

    # One collection of every other trial's line, worst first (a line per Line2D took
    # a second or more at 2,000 trials, at the run's end, where its user waits), then
    # the best on top. A parameter a trial lacks breaks its line: the runs between.
    segments: list[list[tuple[float, float]]] = []
    colours = []
    for i in sorted(range(len(trials)), key=lambda i: goodness[i]):
        if i == best:
            continue
        for run in _unbroken(list(zip(xs, line(i), strict=True))):
            segments.append(run)
            colours.append(cmap(goodness[i]))
    from matplotlib.collections import LineCollection

    ax.add_collection(LineCollection(segments, colors=colours, alpha=0.45, linewidths=1.0))
    ax.plot(xs, [math.nan if y is None else y for y in line(best)],
            color=cmap(goodness[best]), alpha=0.9, linewidth=2.6)
    ax.set_ylim(-0.05, 1.05)
    for x, a in enumerate(axes):
        ax.axvline(x, color="black", linewidth=0.6)
        for y, label in a.ticks:
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(3, 0),
                        fontsize="x-small", va="center")
    ax.axvline(len(axes), color="black", linewidth=0.6)
    for y, label in ((0.0, f"{low:.4g}"), (1.0, f"{high:.4g}")):
        ax.annotate(label, (len(axes), y), textcoords="offset points", xytext=(3, 0),
                    fontsize="x-small", va="center")
    ax.set_xticks(xs, [a.name + (" (log)" if a.log else "") for a in axes] + [f"{metric} ({mode})"])
    ax.set_yticks([])
    ax.set_xlim(-0.2, len(axes) + 0.6)
    ax.set_title(f"stage {summary['name']}: {len(trials)} completed trials, parameters to"
                 f" {metric}; best (trial {trials[best]['id']}) thick")
    return _save(fig, path)


def _unbroken(points: list[tuple[float, float | None]]) -> list[list[tuple[float, float]]]:
    """The runs of two or more points with a value (None breaks a line), as drawn."""
    runs: list[list[tuple[float, float]]] = [[]]
    for x, y in points:
        if y is None:
            runs.append([])
        else:
            runs[-1].append((x, y))
    return [run for run in runs if len(run) > 1]


def plot_slices(summary: dict[str, Any], metric: str, mode: str, path: Path) -> Path | None:
    """One panel per parameter: each completed trial's value against that parameter
    alone, coloured by trial order (where the search went over time)."""
    trials = completed(summary)
    axes = parameter_axes(trials) if trials else []
    if not axes:
        return None
    plt = _pyplot()
    columns = min(3, len(axes))
    rows = math.ceil(len(axes) / columns)
    fig, grid = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows), dpi=110,
                             squeeze=False)
    values = [first_value(t) for t in trials]
    order = list(range(len(trials)))
    for k, a in enumerate(axes):
        ax = grid[k // columns][k % columns]
        kept = [i for i in order if a.positions[i] is not None]
        if a.numeric:
            xs = [float(trials[i]["config"][a.name]) for i in kept]
            if a.log:
                ax.set_xscale("log")
        else:  # categories at their evenly spaced positions, labelled
            xs = [float(a.positions[i]) for i in kept]  # type: ignore[arg-type]
            ax.set_xticks([y for y, _ in a.ticks], [label for _, label in a.ticks],
                          fontsize="x-small")
        ax.scatter(xs, [values[i] for i in kept], c=kept, cmap="viridis", s=18,
                   vmin=0, vmax=max(len(trials) - 1, 1))
        ax.set_xlabel(a.name)
        ax.set_ylabel(f"{metric} ({mode})")
        ax.grid(alpha=0.3)
    for k in range(len(axes), rows * columns):
        grid[k // columns][k % columns].set_visible(False)
    fig.suptitle(f"stage {summary['name']}: {metric} against each parameter"
                 f" ({len(trials)} completed trials; colour: trial order, yellow latest)")
    return _save(fig, path)
