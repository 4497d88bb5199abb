"""The arithmetic behind the benchmark tables, kept pure so that it is tested.

Nothing here runs a trial or imports Ray or torch: the benchmarks measure,
these functions turn what was measured into the figures REPORT.md shows.

>>> top_fraction_threshold([0.5, 0.9, 0.7, 0.8], fraction=0.25)
0.9
>>> speedup(100.0, 25.0), scaling_efficiency(3.0, 4)
(4.0, 0.75)
>>> cumulative_products([2.0, 1.5, 2.0])
[2.0, 3.0, 6.0]
>>> utilization([(0.0, 2.0, 1), (0.0, 1.0, 1)], slots=2, start=0.0, end=2.0)
0.75
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def _finite(value: float | None) -> bool:
    return value is not None and not isinstance(value, bool) and math.isfinite(value)


def top_fraction_threshold(
    values: Sequence[float | None], fraction: float = 0.01, mode: str = "max"
) -> float:
    """The value that only the best ``fraction`` of configurations reach.

    With n values, k = ceil(fraction * n) (at least 1) of them reach the
    returned threshold: it is the k-th best. Failed configurations (None,
    NaN) count in n and never reach it, as a failed random configuration
    counts against random search. So 5,000 random configurations at 1 %
    give the 50th best; 100 give the best one.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], but got {fraction!r}")
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be max or min, but got {mode!r}")
    good = sorted((float(v) for v in values if _finite(v)), reverse=mode == "max")
    if not good:
        raise ValueError("values must contain at least one finite value, but got none")
    k = max(1, math.ceil(fraction * len(values)))
    if k > len(good):
        raise ValueError(
            f"only {len(good)} of {len(values)} configurations succeeded, fewer than the"
            f" {k} that the top {fraction:.1%} needs"
        )
    return good[k - 1]


def reached(value: float | None, threshold: float, mode: str = "max") -> bool:
    """Whether one result reaches the threshold (failed results never do)."""
    if not _finite(value):
        return False
    return value >= threshold if mode == "max" else value <= threshold


def runs_to_threshold(
    values_in_finish_order: Iterable[float | None], threshold: float, mode: str = "max"
) -> int | None:
    """How many runs had finished when the first one reached the threshold
    (failed runs count), or None if none did."""
    for n, value in enumerate(values_in_finish_order, start=1):
        if reached(value, threshold, mode):
            return n
    return None


def speedup(baseline_s: float, time_s: float) -> float:
    """How many times faster than the baseline: baseline time / time."""
    if not (_finite(baseline_s) and baseline_s > 0):
        raise ValueError(f"baseline_s must be a positive number, but got {baseline_s!r}")
    if not (_finite(time_s) and time_s > 0):
        raise ValueError(f"time_s must be a positive number, but got {time_s!r}")
    return baseline_s / time_s


def scaling_efficiency(speedup_value: float, ranks: int) -> float:
    """Speed-up per rank: 1.0 is perfect scaling; the seed's 3.5x on 4 nodes is 0.875."""
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1:
        raise ValueError(f"ranks must be a positive integer, but got {ranks!r}")
    return speedup_value / ranks


def throughput_efficiency(samples_per_s: float, base_samples_per_s: float, ranks: int) -> float:
    """throughput(k) / (k x throughput(1)): the scaling efficiency of samples/s."""
    return scaling_efficiency(speedup(1.0 / base_samples_per_s, 1.0 / samples_per_s), ranks)


def cumulative_products(speedups: Sequence[float]) -> list[float]:
    """The seed's combined estimate: each row's speed-up is the product of the
    individual speed-ups of every technique it adds (random 1x, HPO a, +DP b,
    +MP c give 1, a, ab, abc)."""
    out: list[float] = []
    product = 1.0
    for value in speedups:
        if not _finite(value) or value <= 0:
            raise ValueError(f"speed-ups must be positive numbers, but got {value!r}")
        product *= value
        out.append(product)
    return out


Interval = tuple[float, float, int]
"""A trial's (start, end, slots it held)."""


def busy_slot_seconds(intervals: Iterable[Interval], start: float, end: float) -> float:
    """Slot-seconds the trials held inside the window [start, end]."""
    total = 0.0
    for s, e, slots in intervals:
        if e < s:
            raise ValueError(f"a trial must end after it starts, but got start {s}, end {e}")
        overlap = min(e, end) - max(s, start)
        if overlap > 0:
            total += overlap * slots
    return total


def utilization(intervals: Iterable[Interval], slots: int, start: float, end: float) -> float:
    """Busy slot-seconds / available slot-seconds (slots x wall time)."""
    if slots < 1:
        raise ValueError(f"slots must be at least 1, but got {slots!r}")
    if end <= start:
        raise ValueError(f"end must be after start, but got start {start}, end {end}")
    return busy_slot_seconds(intervals, start, end) / (slots * (end - start))


def occupancy(intervals: Sequence[Interval], times: Iterable[float]) -> list[int]:
    """Slots busy at each time (a trial holds its slots on [start, end)), for plots."""
    events = sorted([(s, slots) for s, _, slots in intervals]
                    + [(e, -slots) for _, e, slots in intervals])
    out: list[int] = []
    busy = 0
    i = 0
    for t in sorted(times):
        while i < len(events) and events[i][0] <= t:
            busy += events[i][1]
            i += 1
        out.append(busy)
    return out


@dataclass(frozen=True)
class SeedSummary:
    """Runs (or seconds) to a threshold over seeds, every seed counted.

    A seed that never reached the threshold counts at its whole budget (the runs
    or seconds it spent without getting there): a lower bound on what it would
    have needed. The median, min and max are then over all seeds, and each is
    marked a lower bound (``≥``) when a seed that never got there decides it.
    So a search that failed half its seeds cannot look fastest by the seeds it
    was lucky with.
    """

    reached: int
    seeds: int
    median: float | None
    low: float | None
    high: float | None
    median_is_lower_bound: bool = False
    low_is_lower_bound: bool = False
    high_is_lower_bound: bool = False

    def cell(self, fmt: str = "{:.0f}") -> str:
        if self.median is None:
            return f"no seeds (0/{self.seeds})"

        def shown(value: float | None, bound: bool) -> str:
            return ("≥ " if bound else "") + fmt.format(value)

        text = shown(self.median, self.median_is_lower_bound)
        if self.seeds > 1:
            text += (f" [{shown(self.low, self.low_is_lower_bound)}–"
                     f"{shown(self.high, self.high_is_lower_bound)}]")
        if self.reached < self.seeds:
            text += f", {self.reached}/{self.seeds} reached"
        return text


def summarize_seeds(values: Sequence[float | None],
                    budgets: Sequence[float | None] | None = None) -> SeedSummary:
    """Median, min and max over every seed: a seed that reached the threshold
    counts at its value; one that did not (None or NaN) counts at its budget
    (``budgets[i]``: the runs or seconds it spent in all), as a lower bound.

    >>> summarize_seeds([12, None, 30], budgets=[40, 50, 40]).cell()
    '30 [12–≥ 50], 2/3 reached'
    >>> summarize_seeds([10, None, None], budgets=[20, 20, 20]).cell()
    '≥ 20 [10–≥ 20], 1/3 reached'

    Without budgets, seeds that never reached cannot be counted, so nothing is
    summarized over them: a median of the lucky seeds would look better than the
    search is. Ranking searches is by ``rank_key``.
    """
    if budgets is not None and len(budgets) != len(values):
        raise ValueError(f"budgets must give one budget per seed ({len(values)}), but got"
                         f" {len(budgets)}")
    entries: list[tuple[float, bool]] = []  # (value, is a lower bound)
    for i, value in enumerate(values):
        if _finite(value):
            entries.append((float(value), False))  # type: ignore[arg-type]
        else:
            budget = budgets[i] if budgets is not None else None
            if not _finite(budget):
                raise ValueError(
                    f"a seed that never reached the threshold must have its budget (the runs"
                    f" or seconds it spent), but seed {i} got {budget!r}: leaving it out"
                    " would make the search look faster than it is")
            entries.append((float(budget), True))  # type: ignore[arg-type]
    reached = sum(1 for _, bound in entries if not bound)
    if not entries:
        return SeedSummary(0, 0, None, None, None)
    # Ties: an exact value sorts before a bound, so a bound decides only where it must.
    ordered = sorted(entries, key=lambda e: (e[0], e[1]))
    n = len(ordered)
    middle = ordered[(n - 1) // 2: n // 2 + 1]
    median = statistics.fmean(v for v, _ in middle)
    # The true value of a bound is at least its budget: the median is exact only when
    # no bound sits at or below the middle.
    median_bound = any(bound for _, bound in ordered[: n // 2 + 1])
    low, low_bound = ordered[0]
    high_bound = any(bound for _, bound in ordered)
    return SeedSummary(reached, n, median, low, ordered[-1][0], median_bound, low_bound,
                       high_bound)


def rank_key(summary: SeedSummary) -> tuple[float, int]:
    """Order searches by their median over all seeds (fewest runs or seconds first);
    at equal medians an exact one ranks before a lower bound. A median that is a
    lower bound may be larger still, so such a search can only be worse than its
    place says, never better."""
    if summary.median is None:
        return (math.inf, 1)
    return (summary.median, int(summary.median_is_lower_bound))


@dataclass(frozen=True)
class Spread:
    """Median, min and max of a figure over the seeds that have one (``n`` of ``seeds``).

    For figures that are not times to a threshold (a best model's test accuracy,
    runs counted): a seed without one (no completed trial) is not a lower bound
    of anything, so it is left out, and ``n < seeds`` says so beside the figure.
    """

    n: int
    seeds: int
    median: float | None
    low: float | None
    high: float | None

    def cell(self, fmt: str = "{:.3f}") -> str:
        if self.median is None:
            return f"none (0/{self.seeds})"
        text = fmt.format(self.median)
        if self.seeds > 1:
            text += f" [{fmt.format(self.low)}–{fmt.format(self.high)}]"
        if self.n < self.seeds:
            text += f", {self.n}/{self.seeds} seeds"
        return text


def spread(values: Sequence[float | None]) -> Spread:
    """The spread of a figure over seeds, those without one (None, NaN) counted apart.

    >>> spread([0.95, None, 0.97, 0.96]).cell()
    '0.960 [0.950–0.970], 3/4 seeds'
    """
    finite = sorted(float(v) for v in values if _finite(v))  # type: ignore[arg-type]
    if not finite:
        return Spread(0, len(values), None, None, None)
    return Spread(len(finite), len(values), statistics.median(finite), finite[0], finite[-1])
