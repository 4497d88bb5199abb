"""MLflow tracking, written by the driver only.

One experiment per workflow, a parent run per stage and a nested run per
trial, all through ``MlflowClient`` (no global "active run" state, so runs
of concurrent trials never mix). By default the store is a SQLite file in
the run directory: nothing to start, and the run directory stays
self-contained. Run ids go into the journal, so a resumed workflow logs into
the same runs instead of duplicating them.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value


def default_tracking_uri(run_dir: Path) -> str:
    return f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"


def _param_value(value: Any) -> str:
    text = str(value)
    return text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."


class Tracker:
    """Creates and fills MLflow runs for a workflow's stages and trials."""

    def __init__(self, run_dir: Path, experiment: str, uri: str | None = None) -> None:
        from mlflow.tracking import MlflowClient

        self.run_dir = Path(run_dir)
        self.uri = uri or default_tracking_uri(self.run_dir)
        self.client = MlflowClient(tracking_uri=self.uri)
        existing = self.client.get_experiment_by_name(experiment)
        if existing is not None:
            self.experiment_id = existing.experiment_id
        else:
            artifacts = None
            if uri is None:  # keep artifacts beside the default store, in the run directory
                artifacts = (self.run_dir / "mlartifacts").resolve().as_uri()
            self.experiment_id = self.client.create_experiment(
                experiment, artifact_location=artifacts
            )

    def start_run(
        self,
        name: str,
        *,
        parent: str | None = None,
        tags: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> str:
        """Create a run (nested under ``parent`` if given); returns its id."""
        from mlflow.entities import Param

        all_tags = {k: _param_value(v) for k, v in (tags or {}).items()}
        if parent is not None:
            all_tags["mlflow.parentRunId"] = parent
        run = self.client.create_run(self.experiment_id, run_name=name, tags=all_tags)
        if params:
            self.client.log_batch(
                run.info.run_id,
                params=[Param(str(k), _param_value(v)) for k, v in params.items()],
            )
        return run.info.run_id

    def log_metrics(self, run_id: str, metrics: Mapping[str, Any], step: int = 0) -> None:
        """Log the finite numeric metrics; NaN and infinities are kept as tags instead."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        numbers = []
        odd = {}
        for key, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if math.isfinite(value):
                numbers.append(Metric(str(key), float(value), now, int(step)))
            else:
                odd[f"nestor.metric.{key}"] = str(value)
        if numbers:
            self.client.log_batch(run_id, metrics=numbers)
        self.set_tags(run_id, odd)

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        if tags:
            self.client.log_batch(
                run_id, tags=[RunTag(str(k), _param_value(v)) for k, v in tags.items()]
            )

    def log_artifact(self, run_id: str, path: Path, folder: str | None = None) -> None:
        self.client.log_artifact(run_id, str(path), folder)

    def finish(self, run_id: str, status: str) -> None:
        """End a run: FINISHED, FAILED or KILLED (MLflow's terminal states)."""
        self.client.set_terminated(run_id, status)
