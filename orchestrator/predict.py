"""Predicting with what a workflow trained: an ensemble stage's weighted
members, or the one model of any other stage (the best trial of an hpo
stage, a train stage's run, a transfer stage's fine-tuned model).

    from nestor.orchestrator.predict import load_predictor
    model = load_predictor("runs/mnist-combined-...", stage="members")
    labels = model.predict(images)          # raw pixels, (N, 28, 28) or (N, 784)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nestor.orchestrator.projections.kinds import NoModel, report_of


class PredictError(Exception):
    """The run directory or stage holds nothing to predict with; the message says why."""


@dataclass
class StagePredictor:
    """Members (checkpoints) with weights; a single model is a one-member ensemble."""

    stage: str
    checkpoints: list[Path]
    weights: np.ndarray

    def __post_init__(self) -> None:
        from nestor.trainers.predict import Predictor

        self.members = [Predictor(path) for path in self.checkpoints]
        classes = self.members[0].options.get("classes")
        self.labels = np.asarray(classes if classes else
                                 range(self.members[0].arch["num_classes"]))

    def predict_proba(self, images: Any) -> np.ndarray:
        """Class probabilities, columns in the order of :attr:`labels`."""
        probs = np.stack([m.raw(images) for m in self.members])
        return np.tensordot(self.weights, probs, axes=1)

    def predict(self, images: Any) -> np.ndarray:
        """The dataset's own labels (a transfer target's classes map back to theirs)."""
        return self.labels[self.predict_proba(images).argmax(axis=1)]


def load_predictor(run_dir: str | Path, stage: str | None = None) -> StagePredictor:
    run_dir = Path(run_dir)
    results_path = run_dir / "results.json"
    if not results_path.exists():
        raise PredictError(f"{run_dir} has no results.json: not a finished nestor run"
                           f" (resume it with `nestor resume {run_dir}`)")
    stages = {s["name"]: s for s in json.loads(results_path.read_text())["stages"]}
    if stage is None:
        combined = [n for n, s in stages.items() if report_of(s).combines]
        stage = combined[-1] if combined else list(stages)[-1]
    if stage not in stages:
        raise PredictError(f"--stage must be one of {', '.join(stages)}, but got {stage!r}")
    try:
        checkpoints, weights = report_of(stages[stage]).model(run_dir, stages[stage])
    except NoModel as exc:
        raise PredictError(str(exc)) from None
    return StagePredictor(stage, checkpoints, np.asarray(weights))


def read_inputs(path: Path) -> np.ndarray:
    """Images from .npy, or .csv with one image per row (a header row is skipped)."""
    if not path.exists():
        raise PredictError(f"--input {path} does not exist")
    if path.suffix == ".npy":
        try:
            return np.load(path, allow_pickle=False)
        except ValueError as exc:
            raise PredictError(f"--input {path} is not a readable .npy array: {exc}") from None
    if path.suffix == ".csv":
        try:
            rows = np.genfromtxt(path, delimiter=",", dtype=np.float32)
        except ValueError as exc:
            raise PredictError(f"--input {path} must be numbers, one image per row: {exc}") \
                from None
        if rows.ndim == 1:
            rows = rows[None, :]
        rows = rows[~np.isnan(rows).all(axis=1)]  # a header row reads as NaN
        if np.isnan(rows).any():
            raise PredictError(f"--input {path} must hold only numbers, one image per row")
        return rows
    raise PredictError(f"--input must be a .npy or .csv file, but got {path.name}")
