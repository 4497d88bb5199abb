"""How a stage's slots are split: trials at once x data x model parallelism.

The pieces, one job each (none imports torch or Ray at import time):

- `_arch`: the built-in models' sizes, counted from their settings;
- `_profile`: what a profiling step measured (JSON-able: cached, journalled);
- `_profiler`: runs a few real training steps per shape (``trainers.probe``);
- `_cost`: the alpha-beta cost model, fitted to a profile, and its checks;
- `_planner`: the choice under the batch cap, memory and slots, and re-planning;
- `_stage`: a spec stage's inputs to the planner; `_table`: `nestor plan`'s table;
- `report`: `nestor plan`'s whole answer (public: the CLI renders it);
- `_simulated`: simulated trials that last what the cost model predicts.

>>> from nestor.orchestrator.planning import Goal, Limits, choose   # doctest: +SKIP
>>> choose(model, Limits(slots=8, per_rank_batch=64, global_batch_max=256),
...        Goal(runs=40, epochs=2)).shape                    # doctest: +SKIP
Shape(dp=1, mp=1)
"""

from __future__ import annotations

from ._arch import ModelSize, SplitLayer, model_size
from ._cost import (
    ALGORITHMS,
    Check,
    CommParams,
    ComputeParams,
    CostModel,
    calibrate,
    checks,
    coefficients,
    fit_comm,
    fit_compute,
    prior_model,
)
from ._planner import (
    GANG_START_S,
    HYSTERESIS,
    Candidate,
    Goal,
    Limits,
    NoFeasibleShape,
    Plan,
    Replan,
    Shape,
    choose,
    evaluate,
    replan,
)
from ._profile import CommSample, Profile, StepSample, profile_key
from ._profiler import ProfileError, default_shapes, profile
from ._runtime import StagePlanner, shape_of
from ._simulated import cost_model_trials, predicted_run_s
from ._stage import (
    StagePlanInputs,
    plan_stage,
    stage_inputs,
    stage_model,
    trial_batch,
    trial_settings,
)

__all__ = [
    "ALGORITHMS", "GANG_START_S", "HYSTERESIS", "Candidate", "Check", "CommParams",
    "CommSample", "ComputeParams", "CostModel", "Goal", "Limits", "ModelSize",
    "NoFeasibleShape", "Plan", "Profile", "ProfileError", "Replan", "Shape", "SplitLayer",
    "StagePlanInputs", "StagePlanner", "StepSample", "calibrate", "checks", "choose",
    "coefficients", "cost_model_trials",
    "default_shapes", "evaluate", "fit_comm", "fit_compute", "model_size", "plan_stage",
    "predicted_run_s", "prior_model", "profile", "profile_key", "replan", "shape_of",
    "stage_inputs", "stage_model", "trial_batch", "trial_settings",
]
