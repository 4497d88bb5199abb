"""Early stopping of poor trials from their per-epoch metrics (Optuna's pruners).

A small Ray actor holds an in-memory Optuna study whose only job is pruning:
rank 0 of each trial reports its metric after every epoch and asks at once
whether to stop, so the decision takes effect at the next epoch boundary
without waiting on the driver. The searcher is untouched: pruning decides
how long a trial trains, the search decides what to try.
"""

from __future__ import annotations

from typing import Any

from nestor.orchestrator.backends.interface import EarlyStopping


class EarlyStopper:
    """Ray actor: per-trial report/should_stop against a median or ASHA pruner."""

    def __init__(self, rule: str, metric: str, mode: str, warmup_epochs: int,
                 reduction_factor: int, startup_trials: int) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        if rule == "median":
            pruner: Any = optuna.pruners.MedianPruner(
                n_startup_trials=startup_trials, n_warmup_steps=warmup_epochs
            )
        else:
            pruner = optuna.pruners.SuccessiveHalvingPruner(
                min_resource=max(1, warmup_epochs), reduction_factor=reduction_factor
            )
        direction = "maximize" if mode == "max" else "minimize"
        self.study = optuna.create_study(direction=direction, pruner=pruner)
        self.metric = metric
        self.trials: dict[str, Any] = {}
        self.stopped: set[str] = set()

    def start(self, key: str) -> None:
        """An attempt begins. The driver does not wait for this call, so the
        attempt's first report may come first: whichever arrives first starts it."""
        if key not in self.trials:
            self.trials[key] = self.study.ask()

    def report(self, key: str, metrics: dict[str, float], step: int) -> None:
        value = metrics.get(self.metric)
        if value is None:
            return
        self.start(key)
        trial = self.trials[key]
        trial.report(float(value), int(step))
        if trial.should_prune():
            self.stopped.add(key)

    def should_stop(self, key: str) -> bool:
        return key in self.stopped

    def finish(self, key: str, value: float | None, pruned: bool) -> None:
        import optuna

        self.stopped.discard(key)  # a retry starts with a clean slate
        trial = self.trials.pop(key, None)
        if trial is None:
            return
        if pruned:
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        elif value is None:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(trial, value)


class ReportTo:
    """Picklable ``report(metrics, step)`` that forwards to the actor."""

    def __init__(self, actor: Any, key: str) -> None:
        self.actor, self.key = actor, key

    def __call__(self, metrics: dict[str, float], step: int) -> None:
        import ray

        ray.get(self.actor.report.remote(self.key, metrics, step))


class AskToStop:
    """Picklable ``should_stop()`` that asks the actor."""

    def __init__(self, actor: Any, key: str) -> None:
        self.actor, self.key = actor, key

    def __call__(self) -> bool:
        import ray

        return bool(ray.get(self.actor.should_stop.remote(self.key)))


class RayEarlyStopping(EarlyStopping):
    """The driver's side of an :class:`EarlyStopper` actor: the loop never waits on it."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def begin(self, trial_id: str) -> dict[str, Any]:
        self.actor.start.remote(trial_id)  # not waited for: the loop never blocks
        return {"report": ReportTo(self.actor, trial_id),
                "should_stop": AskToStop(self.actor, trial_id)}

    def finish(self, trial_id: str, value: float | None, pruned: bool) -> None:
        self.actor.finish.remote(trial_id, value, pruned)


def start_early_stopper(spec: Any, objective: Any) -> RayEarlyStopping | None:
    """The actor for a stage's ``early_stopping`` spec (None when it has none)."""
    if spec is None:
        return None
    import ray

    actor_cls = ray.remote(num_cpus=0)(EarlyStopper)
    return RayEarlyStopping(actor_cls.remote(
        spec.rule, objective.metric, objective.mode, spec.warmup_epochs,
        spec.reduction_factor, spec.startup_trials))
