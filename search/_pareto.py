"""The Pareto rule, and the best and ranked observations of a search.

Why apart from the searcher: the one dominance rule is shared by every search's
front and best, by the results' and plots' fronts, and by the algorithms that
select by it (NSGA-II's warm start); it is a function of observations and
objectives, not of any search's state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nestor.search._records import Objective, Observation


def dominates(a: Sequence[float], b: Sequence[float], signs: Sequence[float]) -> bool:
    """True if ``a`` is no worse than ``b`` in every objective and better in one."""
    better = False
    for x, y, s in zip(a, b, signs, strict=True):
        if s * x > s * y:
            return False
        if s * x < s * y:
            better = True
    return better


def non_dominated(points: Sequence[Sequence[float]], signs: Sequence[float]) -> list[int]:
    """Indices of the points no other point dominates, in input order; equal points are
    all kept. ``signs`` as :attr:`Objective.sign` (+1 minimised, -1 maximised). The one
    Pareto rule: the searchers' fronts and the results' and plots' fronts use it."""
    return [i for i, a in enumerate(points)
            if not any(dominates(b, a, signs) for j, b in enumerate(points) if j != i)]


def pareto_front(
    observations: Iterable[Observation], objectives: Sequence[Objective]
) -> list[Observation]:
    """The non-dominated successful observations, in the order they were told."""
    done = [o for o in observations if o.values is not None]
    front = non_dominated([o.values for o in done],  # type: ignore[misc]
                          [o.sign for o in objectives])
    return [done[i] for i in front]



def minimised(objectives: Sequence[Objective], values: Sequence[float]) -> tuple[float, ...]:
    """Values turned into a tuple to minimize."""
    return tuple(o.sign * v for o, v in zip(objectives, values, strict=True))


def best(observations: Sequence[Observation],
         objectives: Sequence[Objective]) -> Observation | None:
    """The best successful observation (see :meth:`Searcher.best`)."""
    sign = objectives[0].sign
    candidates = pareto_front(observations, objectives) if len(objectives) > 1 else observations
    done = [o for o in candidates if o.values is not None]
    if not done:
        return None
    budgets = [o.trial.budget for o in done if o.trial.budget is not None]
    if budgets:
        longest = max(budgets)
        done = [o for o in done if o.trial.budget == longest]
    return min(done, key=lambda o: sign * o.values[0])  # type: ignore[index]


def ranked(observations: Sequence[Observation],
           objectives: Sequence[Objective]) -> list[Observation]:
    """Successful observations best first (see :meth:`Searcher.ranked`)."""
    done = [o for o in observations if o.values is not None]
    return sorted(done, key=lambda o: (-(o.trial.budget or 0),
                                       minimised(objectives, o.values),  # type: ignore[arg-type]
                                       int(o.trial.id) if o.trial.id.isdigit() else 0))
