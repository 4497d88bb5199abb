"""How nestor's values become MLflow's: metrics (NaN and infinity as tags, which MLflow
refuses as metrics), parameter and tag values cut to MLflow's length, and the tag that
keys each run. Shared by the client writer (``tracking``) and the direct SQL writer
(``sql_store``), so that both write a value the same way; neither imports the other
for it."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
KEY_TAG = "nestor.key"  # each run's key (trial, stage, workflow): what finds it again


def metric_entities(values: Mapping[str, Any], step: int,
                    at: float | None) -> tuple[list[Any], dict[str, str]]:
    """The finite numbers of ``values`` as MLflow metrics at ``at`` (unix seconds;
    now if None), and the NaNs and infinities as tags (MLflow would refuse them)."""
    from mlflow.entities import Metric

    stamp = int((time.time() if at is None else at) * 1000)
    numbers, odd = [], {}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            numbers.append(Metric(str(key), float(value), stamp, int(step)))
        else:
            odd[f"nestor.metric.{key}"] = str(value)
    return numbers, odd


def param_value(value: Any) -> str:
    """A parameter's or tag's value as MLflow keeps it: text, cut to its limit."""
    text = str(value)
    return text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."
