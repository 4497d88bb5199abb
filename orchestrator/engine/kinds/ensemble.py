"""The ensemble kind: members chosen from an hpo stage (its top trials, or a
greedy selection on validation data), trained as ordinary trials, then
combined. The ensemble is the product, its best member the baseline."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from nestor.orchestrator.engine.kinds import StageError, StageKind
from nestor.orchestrator.engine.kinds._planned import PlannedTrials, completed
from nestor.orchestrator.engine.kinds.summaries import EnsembleMember, EnsembleSummary
from nestor.orchestrator.engine.plan import Plan, PlannedTrial
from nestor.orchestrator.engine.trials import TrialRunner
from nestor.orchestrator.journal.journal import write_atomic
from nestor.orchestrator.journal.safe import inside
from nestor.orchestrator.journal.status import TrialStatus
from nestor.orchestrator.spec import EnsembleStage, Workflow
from nestor.orchestrator.spec.needs import what_to_do

log = logging.getLogger(__name__)

STRUCTURE_SCALES = (1.0, 0.5, 1.5, 0.75, 1.25)  # widths of members that vary by structure
MEMBER_SEED = 1000  # members' seeds start here, apart from the search's default seed 0
GREEDY_CANDIDATES = 10  # source trials considered by greedy member selection


class EnsembleTrials(PlannedTrials):
    """Members chosen from an HPO stage, trained as ordinary trials, then combined."""

    def __init__(self, sources: list[dict[str, Any]]) -> None:
        super().__init__(sources)
        self._pool: list[dict[str, Any]] = []  # greedy candidates awaiting predictions
        self._val_predictions: Any = None

    def runner(self, workflow: Workflow, stage: EnsembleStage, **kwargs: Any) -> TrialRunner:
        trainer = workflow.trainer_of(stage.name)
        if not trainer.can("predictions"):  # `nestor validate` refuses it first
            raise StageError(f"ensemble stage {stage.name!r}: its {trainer.kind} trainer gives"
                             f" no predictions, and {what_to_do('predictions', 'an ensemble')}")
        runner = super().runner(workflow, stage, **kwargs)
        runner.preparing = bool(self._pool)
        return runner

    def preparing_task(self, runner: TrialRunner) -> tuple[Any, ...] | None:
        """Greedy selection needs the candidates' predictions on validation data:
        computed in a Ray task, not in the driver, before any member trains."""
        if not self._pool:
            return None
        return (val_predictions, [str(inside(runner.run_dir, t["checkpoint"])) for t in self._pool])

    def prepared(self, runner: TrialRunner, done: Any) -> None:
        stage = runner.stage
        if done.error is not None:
            log.warning("ensemble stage %s: predicting its candidates failed (%s); taking the"
                        " top %d distinct configurations instead", stage.name, done.error,
                        stage.members)
            self._val_predictions = ()
        else:
            self._val_predictions = done.value
        objective = runner.objectives[0]
        runner.searcher = Plan(self.phases(runner.workflow, stage, self.sources, objective),
                               objective)
        self._pool, runner.preparing = [], False

    def phases(self, workflow: Workflow, stage: EnsembleStage, sources: list[dict[str, Any]],
               objective: Any) -> list[list[PlannedTrial]]:
        candidates = [t for s in sources for t in completed(s, objective)]
        candidates.sort(key=lambda t: objective.sign * t["value"])
        if not candidates:
            raise StageError(f"ensemble stage {stage.name!r}: its sources"
                             f" ({', '.join(stage.from_)}) have no completed trial to take"
                             " members from")
        if stage.select == "greedy":
            chosen = self._greedy_select(candidates, stage.members)
        else:
            chosen = self._distinct(candidates)[: stage.members]
        if not chosen:
            return []
        members = []
        for i in range(stage.members):
            source = chosen[i % len(chosen)]
            config = dict(source["config"])
            if "seed" in stage.vary:
                config["seed"] = MEMBER_SEED + i
            if "data" in stage.vary:
                config["bootstrap"] = MEMBER_SEED + i
            if "structure" in stage.vary:
                width = int(config.get("width", 0) or _default(workflow, stage, "width"))
                config["width"] = max(1, round(width * STRUCTURE_SCALES[i % len(STRUCTURE_SCALES)]))
            members.append(PlannedTrial(f"member-{i}", config, origin="member",
                                        parents=(str(source["id"]),)))
        return [members]

    @staticmethod
    def _distinct(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen, out = set(), []
        for t in candidates:
            key = json.dumps(t["config"], sort_keys=True)
            if key not in seen:
                seen.add(key)
                out.append(t)
        return out

    def _greedy_select(self, candidates: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
        """Caruana selection over the source trials' own checkpoints, on validation data.

        The first call (the runner being built) only notes the candidates; their
        predictions come from ``preparing_task``, and ``prepared`` calls again."""
        from nestor.orchestrator.engine.kinds.combine import greedy_weights

        pool = [t for t in self._distinct(candidates) if _predicts(t.get("checkpoint"))
                ][:GREEDY_CANDIDATES]
        if len(pool) <= 1 or self._val_predictions == ():
            return self._distinct(candidates)[:k]
        if self._val_predictions is None:
            self._pool = pool
            return []  # no member yet: the stage waits for its preparing task
        probs, labels = self._val_predictions
        weights = greedy_weights(np.stack(probs), labels, rounds=k)
        order = [pool[i] for i in np.argsort(-weights, kind="stable") if weights[i] > 0]
        rest = [t for t in self._distinct(candidates) if t not in order]
        return (order + rest)[:k]

    @staticmethod
    def _members(runner: TrialRunner) -> list[Any]:
        members = [r for r in runner.records.values()
                   if r.status == TrialStatus.COMPLETED and r.checkpoint]
        return sorted(members, key=lambda r: r.id)

    def finishing_task(self, runner: TrialRunner) -> tuple[Any, ...] | None:
        members = self._members(runner)
        if not members:
            return None
        return (member_predictions, [str(inside(runner.run_dir, r.checkpoint)) for r in members])

    def finalize(self, runner: TrialRunner, done: Any) -> dict[str, Any]:
        from nestor.orchestrator.engine.kinds.combine import accuracy, blend, combine_weights

        summary = runner.summary()
        stage = runner.stage
        members = self._members(runner)
        if not members:
            summary["ensemble"] = None
            summary["stop_reason"] = "no member completed; there is no ensemble"
            return summary
        if done is None or done.error is not None:
            summary["ensemble"] = None
            summary["stop_reason"] = ("the members' predictions failed: "
                                      f"{getattr(done, 'error', None) or 'not run'}")
            return summary
        predictions = done.value
        val_p = np.stack([p[0] for p in predictions])
        test_p = np.stack([p[2] for p in predictions])
        val_labels, test_labels = predictions[0][1], predictions[0][3]
        weights = combine_weights(stage.combine, val_p, val_labels)
        member_val = [accuracy(p, val_labels) for p in val_p]
        member_test = [accuracy(p, test_labels) for p in test_p]
        best = int(np.argmax(member_val))  # chosen on validation, reported on test
        ensemble = EnsembleSummary(
            combine=stage.combine,
            val_value=accuracy(blend(val_p, weights), val_labels),
            test_value=accuracy(blend(test_p, weights), test_labels),
            best_member_val_value=member_val[best],
            best_member_test_value=member_test[best],
            mean_member_test_value=float(np.mean(member_test)),
            members=[
                EnsembleMember(
                    id=r.id, config=r.config, seed=r.config.get("seed"), weight=float(w),
                    val_value=mv, test_value=mt,
                    checkpoint=str(Path(r.checkpoint).resolve().relative_to(  # type: ignore[arg-type]
                        runner.run_dir.resolve())))
                for r, w, mv, mt in zip(members, weights, member_val, member_test, strict=True)
            ],
        ).to_json()
        write_atomic(ensemble_file(runner.run_dir, stage.name), json.dumps(ensemble, indent=2))
        summary["ensemble"] = ensemble
        return summary


def _predicts(checkpoint: str | None) -> bool:
    """Whether a trial's checkpoint gives predictions: a built-in trainer's file, or a
    user trainer's folder holding its predictions file."""
    from nestor.trainers.outputs import PREDICTIONS_FILE

    if not checkpoint:
        return False
    path = Path(checkpoint)
    return path.is_file() or (path / PREDICTIONS_FILE).is_file()


def val_predictions(checkpoints: list[str]) -> tuple[list[Any], Any]:
    """Each checkpoint's class probabilities on validation data, and the labels
    (for greedy member selection); runs as a Ray task, like member_predictions."""
    from nestor.trainers.predict import split_predictions

    probs, labels = [], None
    for checkpoint in checkpoints:
        p, own = split_predictions(checkpoint, "val")
        labels = _same_labels(labels, own, checkpoint, "val")
        probs.append(p)
    return probs, labels


def member_predictions(checkpoints: list[str]) -> list[tuple[Any, Any, Any, Any]]:
    """Each member's class probabilities and the labels, on validation and test data:
    (val_p, val_labels, test_p, test_labels) per checkpoint (a built-in trainer's
    model predicts them; a function or command trainer left them in its
    ``predictions.npz``). Runs as a Ray task (the backend's ``run_task``), not in the
    driver: loading models and predicting takes seconds that the scheduling loop
    must not wait."""
    from nestor.trainers.predict import split_predictions

    out = []
    labels: dict[str, Any] = {"val": None, "test": None}
    for checkpoint in checkpoints:
        val_p, val_labels = split_predictions(checkpoint, "val")
        test_p, test_labels = split_predictions(checkpoint, "test")
        labels["val"] = _same_labels(labels["val"], val_labels, checkpoint, "val")
        labels["test"] = _same_labels(labels["test"], test_labels, checkpoint, "test")
        out.append((val_p, val_labels, test_p, test_labels))
    return out


def _same_labels(first: Any, labels: Any, checkpoint: str, split: str) -> Any:
    """Members are combined row by row: each must predict the same rows, in order."""
    if first is not None and (len(first) != len(labels) or not np.array_equal(first, labels)):
        raise ValueError(f"{checkpoint}: its {split} labels differ from the first member's"
                         f" ({len(labels)} rows against {len(first)}): every member must"
                         f" predict the same {split} rows in the same order")
    return labels


def ensemble_file(run_dir: Path, stage: str) -> Path:
    return run_dir / "ensembles" / stage / "ensemble.json"


class EnsembleKind(StageKind):
    name = "ensemble"

    def runner(self, workflow: Any, stage: Any, sources: list[dict[str, Any]],
               **kwargs: Any) -> TrialRunner:
        return EnsembleTrials(sources).runner(workflow, stage, **kwargs)


def _default(workflow: Workflow, stage: Any, key: str) -> Any:
    from nestor.trainers.catalog import resolve_options

    trainer = workflow.trainer_of(stage.name)
    if trainer.name is None:  # a user trainer's own setting (`nestor validate` checks it)
        return trainer.settings[key]
    return resolve_options(trainer.name, dict(trainer.settings), {})[key]


KIND = EnsembleKind()
