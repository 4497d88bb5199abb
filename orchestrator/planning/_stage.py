"""From a workflow stage to the planner's inputs, and back to a concrete shape.

A stage with ``parallel: auto`` (or one factor auto) and ``batch:`` is
planned for the largest configuration its search may try: a searched
``width``, ``depth``, ``channels``, ``batch_size`` or ``epochs`` counts at its
upper bound, so the batch cap and the memory limit hold for every trial.
The per-rank batch is the trainer's ``batch_size``; a trial of dp ranks
trains with a global batch of ``batch_size x dp`` and its learning rate
scaled by ``batch.lr_rule`` (the built-in trainer's ``batch_per_rank`` and
``lr_scaling``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ._arch import ModelSize, model_size
from ._cost import CostModel, calibrate, prior_model
from ._planner import Goal, Limits, Plan, choose
from ._profile import Profile, load, machine, profile_key
from ._profiler import DEFAULT_BATCHES


class Workflow(Protocol):
    """What the planner reads of a spec's workflow (``orchestrator.spec.model.Workflow``).

    Planning sits below the spec in the layers: the spec asks the planner for a
    ``parallel: auto`` stage's shape and checks that a plan exists, so the planner
    knows the spec only by these methods (and a stage's fields by duck type), never by
    import: no import circle between the two packages."""

    resources: Any

    def stage(self, name: str) -> Any: ...
    def order(self) -> list[str]: ...
    def declared_parallel(self, name: str) -> Any: ...
    def batch_of(self, name: str) -> Any: ...
    def trainer_of(self, name: str) -> Any: ...
    def backend_of(self, name: str) -> Any: ...

SIZE_OPTIONS = ("width", "depth", "channels", "batch_size", "epochs")
DATASET_SIZES = {"mnist5k": 5000, "digits": 1797, "mnist": 60000, "synthetic": 1200}


@dataclass(frozen=True)
class StagePlanInputs:
    """Everything the planner needs about one stage."""

    stage: str
    trainer: str
    options: dict[str, Any]  # resolved options of the largest trial
    size: ModelSize
    limits: Limits
    goal: Goal
    backend: str = "horovod"  # what its ranks communicate over (profiled with it)


def reference_options(workflow: Workflow, name: str) -> tuple[str, dict[str, Any]]:
    """The built-in trainer's resolved options for the stage's largest trial."""
    from nestor.trainers.catalog import resolve_options

    stage = workflow.stage(name)
    trainer = workflow.trainer_of(name)
    if trainer.name is None:
        raise ValueError(f"parallel: auto needs a built-in trainer (name:), but stage {name!r}"
                         f" has a {trainer.kind} trainer")
    config: dict[str, Any] = {k: v for k, v in stage.fixed_config().items()
                              if k in SIZE_OPTIONS}
    for key, spec in stage.searched().items():
        kind = getattr(spec, "type", None)  # the spec's parameter types, by their tag
        if kind == "constant":
            config[key] = spec.value
        elif key in SIZE_OPTIONS and kind in ("int", "float"):
            config[key] = spec.high
        elif key in SIZE_OPTIONS and kind == "categorical":
            numbers = [v for v in spec.values if isinstance(v, int | float)
                       and not isinstance(v, bool)]
            if numbers:
                config[key] = max(numbers)
    settings = dict(trainer.settings)
    first = next(iter(stage.tasks().values()), None)  # a transfer's source: trained first
    if first is not None:
        settings.update({"dataset": first.dataset, **first.settings})
    return trainer.name, resolve_options(trainer.name, settings, config)


def estimated_train_samples(options: Mapping[str, Any]) -> int:
    """Training samples without loading the data (for the prior; a profile counts them)."""
    n = DATASET_SIZES.get(str(options.get("dataset")), 5000)
    val = round(options.get("val_fraction", 0.1) * n)
    test = 0 if options.get("dataset") == "mnist" else round(options.get("test_fraction", 0.1) * n)
    train = n - val - test
    if options.get("classes"):
        train = math.ceil(train * len(options["classes"]) / 10)
    if options.get("max_train_samples"):
        train = min(train, int(options["max_train_samples"]))
    if options.get("train_data") == "train+val":
        train += val
    return max(1, train)


def stage_inputs(workflow: Workflow, name: str, slots: int, *, runs: int | None = None
                 ) -> StagePlanInputs:
    """The planner's inputs for stage ``name`` on ``slots`` slots (``runs``: trials left)."""
    stage = workflow.stage(name)
    trainer, options = reference_options(workflow, name)
    declared = workflow.declared_parallel(name)
    batch = workflow.batch_of(name)
    limits = Limits(
        slots=slots, per_rank_batch=int(options["batch_size"]),
        global_batch_max=batch.global_max if batch is not None else None,
        memory_per_slot=workflow.resources.memory_bytes,
        data=declared.data if isinstance(declared.data, int) else None,
        model=declared.model if isinstance(declared.model, int) else None,
    )
    generation = None
    search = getattr(stage, "search", None)
    if getattr(search, "algorithm", None) == "genetic" and search.schedule == "generational":
        generation = (search.offspring or search.population) if (
            search.mode == "mu_plus_lambda") else search.population
    goal = Goal(runs=stage.planned_trials() if runs is None else runs,
                epochs=int(options["epochs"]), generation=generation)
    return StagePlanInputs(name, trainer, options, model_size(trainer, options), limits, goal,
                           backend=workflow.backend_of(name))


def stage_profile(inputs: StagePlanInputs, places: Sequence[Path] = ()) -> Profile | None:
    """The cached profile for this stage's trainer, settings and machine, if any."""
    key = profile_key(inputs.trainer, inputs.options, machine(inputs.backend), DEFAULT_BATCHES)
    return load(key, places)


def stage_model(inputs: StagePlanInputs, profile: Profile | None) -> CostModel:
    if profile is None:
        return prior_model(inputs.size, estimated_train_samples(inputs.options),
                           bool(inputs.options.get("fp16_allreduce")))
    return calibrate(profile, inputs.size)


def plan_stage(workflow: Workflow, name: str, slots: int, *, profile: Profile | None = None,
               places: Sequence[Path] = (), runs: int | None = None) -> Plan:
    """The stage's plan on ``slots`` slots: from ``profile``, the cached one, or the prior."""
    inputs = stage_inputs(workflow, name, slots, runs=runs)
    if profile is None:
        profile = stage_profile(inputs, places)
    return choose(stage_model(inputs, profile), inputs.limits, inputs.goal)


def trial_batch(trainer: str, settings: Mapping[str, Any], config: Mapping[str, Any],
                dp: int) -> tuple[int, float]:
    """The global batch and the learning rate a trial of built-in ``trainer`` trains
    with on ``dp`` data-parallel ranks (as ``trainers.builtin`` computes them).

    >>> trial_batch("cnn", trial_settings("sqrt"), {"batch_size": 32, "lr": 0.1}, 4)
    (128, 0.2)
    """
    from nestor.trainers.catalog import resolve_options

    options = resolve_options(trainer, settings, config)
    per_rank = bool(options.get("batch_per_rank"))
    factor = {"none": 1.0, "linear": float(dp), "sqrt": math.sqrt(dp)}[options["lr_scaling"]]
    return int(options["batch_size"]) * (dp if per_rank else 1), float(options["lr"]) * factor


def trial_settings(lr_rule: str) -> dict[str, Any]:
    """What a trial of a stage with ``batch:`` adds to its built-in trainer's settings:
    batch_size per rank, lr scaled with the data-parallel size by the rule."""
    return {"batch_per_rank": True, "lr_scaling": lr_rule}
