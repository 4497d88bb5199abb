"""Why a search found what it found: which parameters mattered, and, with several
objectives, which trials no other trial beats in all of them.

Both are read off a finished (or interrupted) stage's summary, never computed on
the scheduling loop: ``nestor results``, ``nestor best``, the stage's MLflow run
and its plots call them.

Parameter importance is fANOVA (Hutter et al. 2014) as Optuna implements it
(``optuna.importance.FanovaImportanceEvaluator``: a random forest fitted to the
completed trials, its variance split over the parameters): the share of the
objective's variance each parameter explains on its own. It needs a few trials
(:data:`MIN_TRIALS`), and every rated parameter in every trial it uses: a
parameter some trials lack (a conditional one) is left out and named as not rated.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nestor.orchestrator.journal.status import TrialStatus
from nestor.search import Objective, non_dominated

# fewer completed trials than this and a forest says little: no importance is given
MIN_TRIALS = 8
# more than this and the forest is fitted to an even sample of them (every k-th in
# trial order): a run of 100,000 trials explains itself in seconds, not minutes
MAX_TRIALS = 2000


@dataclass(frozen=True)
class Goal:
    """One objective of a stage: the metric and its direction."""

    metric: str
    mode: str


def goals(summary: dict[str, Any]) -> list[Goal]:
    """The stage's objectives, every one (older summaries name the first only)."""
    listed = summary.get("objectives") or ([summary["objective"]] if summary.get("objective")
                                           else [])
    return [Goal(str(o["metric"]), str(o.get("mode") or "max")) for o in listed]


def completed(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The completed trials with a finite value (a list with several objectives)."""
    out = []
    for trial in summary.get("trials") or []:
        value = trial.get("value")
        values = value if isinstance(value, list) else [value]
        if trial.get("status") == TrialStatus.COMPLETED and values and all(
                isinstance(v, int | float) and math.isfinite(v) for v in values):
            out.append(trial)
    return out


def first_value(trial: dict[str, Any]) -> float:
    value = trial["value"]
    return float(value[0] if isinstance(value, list) else value)


def pareto_front(points: Sequence[Sequence[float]], modes: Sequence[str]) -> list[int]:
    """Indices of the points no other point dominates (at least as good in every
    objective and better in one), in input order: the searchers' own rule."""
    return non_dominated(points, [Objective(mode=mode).sign for mode in modes])


def pareto_trials(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """A multi-objective stage's Pareto front: its completed trials that no other
    completed trial dominates, ordered by the first objective (best first). Empty
    for a stage of one objective."""
    objectives = goals(summary)
    if len(objectives) < 2:
        return []
    trials = [t for t in completed(summary) if isinstance(t["value"], list)
              and len(t["value"]) == len(objectives)]
    front = [trials[i] for i in pareto_front([[float(v) for v in t["value"]] for t in trials],
                                             [g.mode for g in objectives])]
    reverse = objectives[0].mode == "max"
    return sorted(front, key=first_value, reverse=reverse)


@dataclass(frozen=True)
class Importance:
    """fANOVA's share of the first objective's variance per parameter (they sum to
    1), largest first; ``unrated`` are parameters left out (absent from some trials,
    or constant), with why."""

    shares: dict[str, float]
    trials: int
    unrated: dict[str, str]


def importance(summary: dict[str, Any], seed: int = 0) -> Importance | None:
    """The parameters' importance for the stage's first objective, or None when fewer
    than :data:`MIN_TRIALS` trials completed or no parameter varied."""
    trials = completed(summary)
    if len(trials) < MIN_TRIALS:
        return None
    if len(trials) > MAX_TRIALS:
        step = math.ceil(len(trials) / MAX_TRIALS)
        trials = trials[::step]
    names = sorted({k for t in trials for k in t.get("config") or {}})
    unrated: dict[str, str] = {}
    rated: list[str] = []
    for name in names:
        values = [t["config"].get(name) for t in trials if name in (t.get("config") or {})]
        if len(values) < len(trials):
            unrated[name] = f"set in {len(values)} of {len(trials)} trials (conditional)"
        elif len({repr(v) for v in values}) < 2:
            unrated[name] = "one value in every trial"
        else:
            rated.append(name)
    if not rated or len({first_value(t) for t in trials}) < 2:
        return None  # nothing varied, or every trial scored alike: nothing to apportion
    if len(rated) == 1:
        # One parameter varied: it explains whatever the forest would apportion, so its
        # normalised share is 1 without fitting one (seconds of the stage's publication,
        # which a run's exit waits for, at a few thousand trials).
        shares = {rated[0]: 1.0}
    else:
        try:
            shares = _fanova_once(trials, rated, seed)
        except (RuntimeError, ValueError):  # a forest with no variance to split, say
            return None
    return Importance(dict(sorted(shares.items(), key=lambda kv: -kv[1])), len(trials), unrated)


def _numeric(values: list[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


_FITTED: dict[str, dict[str, float]] = {}
"""fANOVA's shares by a digest of what they were fitted on: a stage's publication asks
for them for its MLflow metrics and again for its summary, and `nestor results` for the
lines and the JSON; the forest (about a second at 2,000 trials) is fitted once."""


def _fanova_once(trials: list[dict[str, Any]], names: list[str], seed: int) -> dict[str, float]:
    key = hashlib.sha256(json.dumps(
        [names, seed, [[t["config"][n] for n in names] + [first_value(t)] for t in trials]],
        sort_keys=True, default=repr).encode()).hexdigest()
    if key not in _FITTED:
        if len(_FITTED) >= 16:
            _FITTED.pop(next(iter(_FITTED)))
        _FITTED[key] = _fanova(trials, names, seed)
    return dict(_FITTED[key])


def _fanova(trials: list[dict[str, Any]], names: list[str], seed: int) -> dict[str, float]:
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions: dict[str, Any] = {}
    for name in names:
        values = [t["config"][name] for t in trials]
        if _numeric(values):
            low, high = float(min(values)), float(max(values))
            distributions[name] = FloatDistribution(low, high)
        else:
            distributions[name] = CategoricalDistribution(sorted({str(v) for v in values}))
    study = optuna.create_study(direction="minimize")  # the direction does not change shares
    study.add_trials([optuna.trial.create_trial(
        params={n: (float(t["config"][n]) if isinstance(distributions[n], FloatDistribution)
                    else str(t["config"][n])) for n in names},
        distributions=distributions, value=first_value(t)) for t in trials])
    found = get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=seed),
                                  params=names, normalize=True)
    return {name: float(share) for name, share in found.items()}


def importance_line(found: Importance | None) -> str | None:
    """One line for ``nestor results``: the parameters by their share."""
    if found is None:
        return None
    shares = ", ".join(f"{name} {share:.0%}" for name, share in found.shares.items())
    line = f"parameter importance (fANOVA over {found.trials} completed trials): {shares}"
    if found.unrated:
        line += "; not rated: " + ", ".join(f"{k} ({why})" for k, why in found.unrated.items())
    return line
