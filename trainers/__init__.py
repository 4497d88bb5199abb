"""What runs inside one trial: datasets, models and the Horovod training loop.

The public surface, for the orchestrator and for people::

    from nestor.trainers import TrainerRef, TrialRequest, run_trial
    request = TrialRequest("t1", TrainerRef.builtin("cnn"),
                           settings={"dataset": "mnist5k", "epochs": 2},
                           config={"lr": 0.05}, data_parallel=2)
    result = run_trial(request)          # in every rank of a 2-rank Horovod gang

or from a shell: ``horovodrun -np 2 python -m nestor.trainers --trainer cnn --dp 2``.
Importing this package does not import torch or Horovod (``nestor --help``
stays instant); `run_trial` imports them when a trial needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nestor.trainers._types import (
    DEFAULT_FLAG_PREFIX,
    DEFAULT_RESULT_PATTERN,
    ResultStatus,
    TrainerRef,
    TrialRequest,
    TrialResult,
)

if TYPE_CHECKING:
    from nestor.trainers._run import run_trial
    from nestor.trainers.function import TrialContext

__all__ = [
    "DEFAULT_FLAG_PREFIX",
    "DEFAULT_RESULT_PATTERN",
    "ResultStatus",
    "TrainerRef",
    "TrialContext",
    "TrialRequest",
    "TrialResult",
    "run_trial",
]


def __getattr__(name: str) -> Any:
    if name == "run_trial":
        from nestor.trainers._run import run_trial

        return run_trial
    if name == "TrialContext":
        from nestor.trainers.function import TrialContext

        return TrialContext
    raise AttributeError(f"module 'nestor.trainers' has no attribute {name!r}")
