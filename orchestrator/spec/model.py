"""The typed workflow spec: what a YAML file may say, and its defaults.

Pydantic checks each field's type and range (extra keys are errors); checks
that need several fields or several stages live in `checks.py` (a kind of
stage's own in its model's ``check``, which `checks.py` calls), where they can
point at the exact field that is wrong. Every model is frozen: a spec is
read once and then only consulted.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import typing
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from nestor.orchestrator.spec._derive import search_model
from nestor.orchestrator.spec.renamed import renamed_search_keys
from nestor.search import (
    AUTO,
    UNITS,
    UNLIMITED_TRIALS,
    AutoChoice,
    Expression,
    algorithm_names,
    choose_search,
    continues_trials,
    make_searcher,
    one_dimension,
    one_objective_only,
    parse_budget,
    parse_budget_text,
    plan_generations,
    renamed_settings,
    rung_budgets,
    settings_class,
    title,
)
from nestor.search.space import (
    CategoricalParam,
    ConstantParam,
    FloatParam,
    IntParam,
    Param,
    SearchSpace,
    name_problem,
)
from nestor.trainers import TrainerRef
from nestor.trainers.catalog import DATASETS, TRAINERS
from nestor.trainers.comm import BACKENDS, DEFAULT_BACKEND, backend_names

from .budget import say_deprecated, split_budget
from .errors import allowed, did_you_mean, option_mismatch, short
from .needs import Need

NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$"
Name = Annotated[str, Field(pattern=NAME_PATTERN)]
Scalar = bool | int | float | str
PositiveInt = Annotated[int, Field(ge=1)]


class Strict(BaseModel):
    """Unknown keys, NaN and infinity are errors; instances are immutable."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, populate_by_name=True
    )


# --- where results go, and on what -------------------------------------------------


class Tracking(Strict):
    uri: str | None = Field(
        None, description="MLflow tracking URI; default: a SQLite store inside the run directory"
    )
    experiment: str | None = Field(None, description="MLflow experiment; default: the name")


SIZE_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
              "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def parse_size(value: int | str) -> int:
    """Bytes in ``4GiB``, ``512 MiB``, ``2GB`` or a plain number of bytes.

    >>> parse_size("1.5KiB")
    1536
    """
    if isinstance(value, int) and not isinstance(value, bool):
        number, unit = float(value), "B"
    else:
        match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(value))
        number, unit = (float(match.group(1)), match.group(2) or "B") if match else (0.0, "?")
    if unit not in SIZE_UNITS or number <= 0:
        raise ValueError(
            f"must be a size such as 4GiB or 512MiB, but got {value!r}"
            f" (allowed units: {', '.join(SIZE_UNITS)})"
        )
    return int(number * SIZE_UNITS[unit])


class Resources(Strict):
    slots: PositiveInt | None = Field(
        None, description="slots to use (CPUs here, GPUs where present); default: all"
    )
    oversubscribe: bool = Field(False, description="allow more ranks than slots")
    memory_per_slot: PositiveInt | str | None = Field(
        None, description="memory one rank may use (4GiB, 512MiB); the planner keeps to it"
    )
    gpus_per_trial: float = Field(
        1.0, gt=0, le=1, description="share of a GPU each rank takes (1/k: 0.5, 0.25...) so"
        " small trials pack several to a GPU; slots then count shares; ignored without GPUs"
    )

    @field_validator("gpus_per_trial")
    @classmethod
    def _one_over_k(cls, value: float) -> float:
        if abs(round(1 / value) * value - 1) > 1e-6:
            raise ValueError(f"must be 1/k (1, 0.5, 0.25, ...), but got {value!r}")
        return value

    @field_validator("memory_per_slot")
    @classmethod
    def _size(cls, value: int | str | None) -> int | str | None:
        if value is not None:
            parse_size(value)
        return value

    @property
    def memory_bytes(self) -> int | None:
        return None if self.memory_per_slot is None else parse_size(self.memory_per_slot)


Auto = Literal["auto"]


class Parallel(Strict):
    """Ranks per trial; ``auto`` (both, or one factor) lets the planner choose from a
    measured profile, under the stage's ``batch.global_max``."""

    data: PositiveInt | Auto = Field(1, description="data-parallel ranks per trial, or auto")
    model: PositiveInt | Auto = Field(1, description="model-parallel ranks per trial, or auto")

    @model_validator(mode="before")
    @classmethod
    def _auto(cls, data: Any) -> Any:
        if isinstance(data, str):
            if data != "auto":
                raise ValueError(
                    f"parallel must be auto or a mapping of data and model, but got {data!r}"
                    " (allowed: auto, {data: N or auto, model: N or auto})"
                )
            return {"data": "auto", "model": "auto"}
        return data

    @property
    def is_auto(self) -> bool:
        return self.data == "auto" or self.model == "auto"

    @property
    def ranks(self) -> int:
        if self.is_auto:
            raise ValueError("an auto shape has no ranks until planned: use"
                             " Workflow.parallel_of(stage), which asks the planner")
        return int(self.data) * int(self.model)


class Batch(Strict):
    """The global minibatch: ``batch_size`` becomes per rank, ``global_max`` caps
    batch_size x data, and the learning rate follows ``lr_rule`` as data grows."""

    global_max: PositiveInt = Field(description="the largest global minibatch a trial may use")
    lr_rule: Literal["linear", "sqrt", "none"] = Field(
        "linear", description="lr x data (linear), x sqrt(data), or unchanged (none)"
    )


# --- the trainer --------------------------------------------------------------------


class Trainer(Strict):
    """Exactly one of a built-in ``name``, a Python ``function`` or a ``command``."""

    name: str | None = Field(None, description="a built-in trainer (see `nestor trainers`)")
    function: str | None = Field(None, description="a Python function, 'package.module:function'")
    command: str | list[str] | None = Field(
        None, description="a program and its arguments; run without a shell, once per trial"
        " (in rank 0); {np}, {hosts}, {hostfile}, {master_addr}, {master_port}, {nnodes} and"
        " {nproc_per_node} in its words say where the trial's slots are"
    )
    settings: dict[str, Scalar | list[Scalar]] = Field(
        default_factory=dict, description="fixed settings passed to every trial"
    )
    result_pattern: str | None = Field(
        None, description=r"command trainers: regex, group 1 the result; default 'FoM: (\S+)'"
    )
    flag_prefix: str | None = Field(
        None, description="command trainers: prefix of parameter flags; default '--'"
    )
    checkpoints: bool | None = Field(
        None, description="function and command trainers: it saves into its checkpoint"
        " folder and carries on from continue_from (and starts from init_from), so PBT,"
        " ASHA, Hyperband and transfer may use it (built-in trainers always do)"
    )
    predictions: bool | None = Field(
        None, description="function and command trainers: it writes predictions.npz"
        " (val and test class probabilities and labels) into its checkpoint folder, so an"
        " ensemble may combine it (built-in trainers always can)"
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> Trainer:
        given = [k for k in ("name", "function", "command") if getattr(self, k) is not None]
        if len(given) != 1:
            found = ", ".join(given) if given else "none"
            raise ValueError(
                f"a trainer needs exactly one of name, function, command, but got {found}"
            )
        if self.command is None:
            for option in ("result_pattern", "flag_prefix"):
                if getattr(self, option) is not None:
                    raise ValueError(f"{option} applies only to command trainers")
        if self.name is not None:
            for option in ("checkpoints", "predictions"):
                if getattr(self, option) is not None:
                    raise ValueError(f"{option} applies only to function and command trainers:"
                                     f" a built-in trainer always has its {option}")
        return self

    def can(self, capability: str) -> bool:
        """Whether the trainer gives ``checkpoints`` or ``predictions``: a built-in always
        does; user code where its spec says so (it cannot be known before it runs)."""
        return self.name is not None or bool(getattr(self, capability))

    # Each field is checked by the trainer reference the orchestrator will build
    # from it (trainers.TrainerRef), so spec and runtime accept exactly the same.
    @field_validator("function")
    @classmethod
    def _function_path(cls, value: str | None) -> str | None:
        if value is not None:
            TrainerRef.python(value)
        return value

    @field_validator("command")
    @classmethod
    def _command_words(cls, value: str | list[str] | None) -> str | list[str] | None:
        if value is not None:
            TrainerRef.command(value)
        return value

    @field_validator("result_pattern")
    @classmethod
    def _pattern_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            TrainerRef.command(["program"], result_pattern=value)
        return value

    @property
    def kind(self) -> Literal["builtin", "function", "command"]:
        if self.name is not None:
            return "builtin"
        return "function" if self.function is not None else "command"

    @property
    def argv(self) -> list[str]:
        """The command as an argument vector (never passed through a shell)."""
        if self.command is None:
            raise ValueError("not a command trainer")
        return shlex.split(self.command) if isinstance(self.command, str) else list(self.command)

    def describe(self) -> str:
        if self.name is not None:
            dataset = self.settings.get("dataset")
            return f"{self.name} ({dataset})" if dataset else self.name
        if self.function is not None:
            return self.function
        return shlex.join(self.argv)


# --- the search space ---------------------------------------------------------------


class _ParamSpec(Strict):
    when: dict[str, Scalar | list[Scalar]] | None = Field(
        None, description="the parameter exists only when these parameters take these"
        " values (a value or a list; all must hold), e.g. {optimizer: sgd}; a trial"
        " where it does not gets no value for it")

    def to_param(self, name: str) -> Param:  # pragma: no cover - abstract
        raise NotImplementedError

    @model_validator(mode="after")
    def _check(self) -> _ParamSpec:
        self.to_param("check")  # the search.space constructors say what is wrong
        return self


class FloatSpec(_ParamSpec):
    type: Literal["float"]
    low: float
    high: float
    log: bool = False

    def to_param(self, name: str) -> Param:
        return FloatParam(name, float(self.low), float(self.high), self.log)


class IntSpec(_ParamSpec):
    type: Literal["int"]
    low: int
    high: int
    log: bool = False

    def to_param(self, name: str) -> Param:
        return IntParam(name, self.low, self.high, self.log)


class CategoricalSpec(_ParamSpec):
    type: Literal["categorical"]
    values: list[Scalar] = Field(min_length=1)

    def to_param(self, name: str) -> Param:
        return CategoricalParam(name, tuple(self.values))


class ConstantSpec(_ParamSpec):
    type: Literal["constant"]
    value: Scalar

    def to_param(self, name: str) -> Param:
        return ConstantParam(name, self.value)


ParamSpec = Annotated[
    FloatSpec | IntSpec | CategoricalSpec | ConstantSpec, Field(discriminator="type")
]
PARAM_TYPES = ("float", "int", "categorical", "constant")


# --- search algorithms --------------------------------------------------------------
#
# A search block's fields are the searcher's own settings, declared once with the
# searcher (search/_settings.py) and made into fields by _derive.search_model. The
# classes here add only what the spec knows: where a searcher's rules across fields
# (its ``Settings.check``) are reported, the trials a search plans, and the stage's
# ``fidelity``.


def _check_budget(value: Any) -> Any:
    """A budget as trials or as one cost (``search._budget``), in the search's own words;
    a mapping with a wall-clock limit (``.budget``) that reaches this check is wrong,
    and the check says how, on the budget's line."""
    if isinstance(value, str):
        value = parse_budget_text(value)
    if isinstance(value, dict) and not (len(value) == 1 and next(iter(value)) in UNITS):
        split_budget(value)  # raises: _SearchBase._wall_apart splits what it can
    parse_budget(value)
    say_deprecated(value)
    return value


_STARTS = ("warm_start", "enqueue")  # how a search starts: the stage's, not the searcher's


FUNCTION_NAME = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
"""``package.module:function``: a constraint string that names a function."""


class ConstraintFunction(Strict):
    """A constraint written in Python: ``{function: pkg.mod:fn}`` (or the string
    ``pkg.mod:fn``; ``__main__:NAME``: one the Python API shipped), called with a
    configuration's active parameters; true where the configuration is allowed."""

    function: str = Field(min_length=1, description="package.module:function")


class _SearchBase(Strict):
    """What the spec adds to every search's declared settings. A search gets these
    rules alone unless its class's traits ask for more (``continues_trials``:
    :class:`_ContinuingSearch`) or a subclass here ``extends`` it with the spec's
    knowledge of that one algorithm (a label, a field's own check); a new algorithm
    needs neither."""

    # The algorithms whose search blocks these rules extend (see _rules).
    extends: ClassVar[tuple[str, ...]] = ()
    _extended: ClassVar[dict[str, type[_SearchBase]]] = {}

    if TYPE_CHECKING:  # the fields every search has (SearchSettings)
        algorithm: str
        seed: int
        budget: int | dict[str, float] | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for algorithm in cls.__dict__.get("extends", ()):
            _SearchBase._extended[algorithm] = cls

    warm_start: str | None = Field(
        None, description="earlier results the search learns from before its first ask: a"
        " run directory (its completed trials) or a CSV whose header names the parameters"
        " and the metric (or 'value'); every algorithm that can use them does")
    enqueue: list[dict[str, Any]] = Field(
        default_factory=list, description="configurations (parameter: value) the search"
        " asks first, in order, before its own")

    wall_s: float | None = Field(
        None, description="the stage's wall-clock limit in seconds, written in the budget:"
        " {wall: 2h}, {trials: 50, wall: 30m}: no trial starts that could not finish by it"
        " (judged by the median of the trials finished so far), and at it the running"
        " trials are stopped and the stage ends")

    @model_validator(mode="before")
    @classmethod
    def _wall_apart(cls, data: Any) -> Any:
        """``budget: {wall: 2h, ...}``: the wall clock to ``wall_s`` (the engine's), the
        rest to ``budget`` (the search's). A budget that does not split is left for its
        own check, which names it on its line."""
        if isinstance(data, dict) and isinstance(data.get("budget"), dict):
            budget = data["budget"]
            if "wall" in budget or "trials" in budget:
                try:
                    searched, wall = split_budget(budget)
                except ValueError:
                    return data
                return {**data, "budget": searched, "wall_s": wall}
        return data

    @field_validator("budget", mode="before", check_fields=False)
    @classmethod
    def _budget_form(cls, value: Any) -> Any:
        return _check_budget(value)

    constraints: list[str | ConstraintFunction] = Field(
        default_factory=list,
        description="expressions over the space's parameters that every configuration"
        " must satisfy, e.g. \"lr * batch_size <= 8\" (arithmetic, comparisons, and/or/not,"
        " abs/min/max/log/exp/sqrt; a constraint naming an inactive parameter holds), or"
        " \"pkg.mod:fn\" (or {function: pkg.mod:fn}), a Python function given the"
        " configuration (its active parameters) that returns true where it is allowed")

    @field_validator("constraints", mode="before", check_fields=False)
    @classmethod
    def _function_names(cls, value: Any) -> Any:
        """A string that is a ``package.module:function`` name (an expression has no
        ``:``) is that function, as ``{function: ...}`` says it."""
        if not isinstance(value, list):
            return value
        return [{"function": rule} if isinstance(rule, str) and FUNCTION_NAME.fullmatch(rule)
                else rule for rule in value]

    @field_validator("constraints", check_fields=False)
    @classmethod
    def _parsable(cls, value: list[Any]) -> list[Any]:
        for rule in value:
            if isinstance(rule, str):  # names are checked against the space by the stage
                Expression.parse(rule)
        return value

    def constraint_rules(self) -> list[Any]:
        """The constraints as ``SearchSpace`` takes them: expression strings, and each
        ``{function: ...}`` imported (on the driver, where the search runs)."""
        from nestor.orchestrator.spec.shipped_rules import MAIN, ShippedRule
        from nestor.trainers.function import resolve_function

        return [rule if isinstance(rule, str) else ShippedRule(rule.function)
                if rule.function.startswith(MAIN) else resolve_function(rule.function)
                for rule in self.constraints]

    def settings(self) -> dict[str, Any]:
        """The searcher's own settings (``search.make_searcher``'s keywords)."""
        return self.model_dump(exclude={"algorithm", "constraints", "wall_s", *_STARTS})

    def trials_budget(self) -> int | None:
        """The budget where it counts trials (None: none, or a cost budget)."""
        return self.budget if isinstance(self.budget, int) else None

    @model_validator(mode="after")
    def _searchers_rules(self) -> Any:
        """The searcher's own rules across its settings (``Settings.check``), in its
        words, on the search block: the same fields, so the same check."""
        settings_class(self.algorithm).check(self)
        return self

    def planned_trials(self, space: SearchSpace) -> int:
        """The trials a search plans where it says no more: its budget, else 20."""
        return self.trials_budget() or 20


class _GeneticRules(_SearchBase):
    extends = ("genetic",)

    @model_validator(mode="after")
    def _consistent(self) -> Any:
        self.planned_generations()  # a budget the generations cannot reach is an error
        return self

    def planned_generations(self) -> int:
        """``generations``, or as many as ``budget`` needs when it is left out."""
        s: Any = self
        return plan_generations(
            s.population, s.generations, self.trials_budget(), s.mode, s.offspring
        )

    def planned_trials(self, space: SearchSpace) -> int:
        s: Any = self
        generations = self.planned_generations()
        if s.mode == "mu_plus_lambda":
            planned = s.population + (s.offspring or s.population) * (generations - 1)
        else:
            planned = s.population * generations
        return min(planned, self.trials_budget() or planned)


class _BayesianRules(_SearchBase):
    extends = ("bayesian",)

    @field_validator("startup_trials", check_fields=False)
    @classmethod
    def _no_startup_for_lq(cls, value: int | None, info: ValidationInfo) -> int | None:
        if info.data.get("sampler") == "lq-cmaes":  # the searcher's rule, on this field
            settings_class("bayesian")(sampler="lq-cmaes", startup_trials=value)
        return value

    @field_validator("population", check_fields=False)
    @classmethod
    def _population_is_cmaes(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and "sampler" in info.data:  # the searcher's rule, on this field
            settings_class("bayesian")(sampler=info.data["sampler"], population=value)
        return value


class _GridRules(_SearchBase):
    extends = ("grid",)

    @field_validator("points", check_fields=False)
    @classmethod
    def _points_at_least_two(cls, value: int | dict[str, int]) -> int | dict[str, int]:
        settings_class("grid")(points=value)  # the searcher's rule, on this field
        return value

    def points_for(self, name: str) -> int:
        points: int | dict[str, int] = self.points  # type: ignore[attr-defined]
        if isinstance(points, dict):
            return points.get(name, 3)
        return points

    def planned_trials(self, space: SearchSpace) -> int:
        total = 1
        for param in space:
            if isinstance(param, FloatParam):
                total *= self.points_for(param.name)
            elif isinstance(param, IntParam):
                total *= min(self.points_for(param.name), param.high - param.low + 1)
            elif isinstance(param, CategoricalParam):
                total *= len(param.values)
        return min(total, self.trials_budget() or total)


FIDELITY_SETTINGS = ("epochs",)
"""Built-in trainer settings that set how long a trial trains and that the trainer
continues from a checkpoint (``trainers/builtin.py`` trains on up to them)."""


class _AutoRules(_SearchBase):
    """Let nestor pick the search from the space, the budget and the parallelism.

    The pick is a pure function of these (``search.choose_search``), so
    ``nestor validate`` shows it and a resumed run makes it again.
    """

    extends = (AUTO,)

    fidelity: str | None = Field(
        None,
        description="a trainer setting that sets how long a trial trains (epochs) and that"
        " the trainer continues from a checkpoint: auto may then pick a multi-fidelity"
        " search (ASHA with TPE) up to the trainer's value of it; budget still"
        " counts full trainings",
    )

    def settings(self) -> dict[str, Any]:
        """The fidelity is the stage's business: the searcher gets its full value
        (``HpoStage.search_settings``)."""
        return self.model_dump(exclude={"algorithm", "fidelity", "constraints", "wall_s",
                                        *_STARTS})

    def choose(
        self, space: SearchSpace, objectives: Any, max_fidelity: int | None = None,
        width: int | None = None,
    ) -> AutoChoice:
        """The pick for ``width`` trials at once where the spec leaves ``parallel``
        out (the stage's slots over a trial's ranks: ``orchestrator.spec.width``);
        1 where neither says."""
        parallel: int | None = self.parallel  # type: ignore[attr-defined]
        return choose_search(space, objectives, budget=self.budget,
                             parallel=parallel or width or 1, max_fidelity=max_fidelity,
                             prefer=self.prefer)  # type: ignore[attr-defined]

    def planned_trials(self, space: SearchSpace, objectives: Any = None,
                       max_fidelity: int | None = None) -> int:
        choice = self.choose(space, objectives or [("objective", "min")], max_fidelity)
        if choice.algorithm == "grid":
            return GridSearch(algorithm="grid", budget=self.budget).planned_trials(space)
        if isinstance(choice.settings.get("budget"), int):  # hyperband: its own trials
            return int(choice.settings["budget"])
        return self.trials_budget() or 20


class _ContinuingSearch(_SearchBase):
    """A search whose trials continue earlier trials' checkpoints up to a budget (its
    class says ``continues_trials``)."""

    fidelity: str = Field(
        "epochs", description="the trainer setting a trial's budget sets: it trains up to it"
    )

    def settings(self) -> dict[str, Any]:
        """The fidelity is the stage's business, not the searcher's."""
        return self.model_dump(exclude={"algorithm", "fidelity", "constraints", "wall_s",
                                        *_STARTS})

    def planned_trials(self, space: SearchSpace) -> int:
        return make_searcher(self.algorithm, space, [("objective", "max")],
                             **self.settings()).planned


class _HalvingSearch(_ContinuingSearch):
    extends = ("asha", "hyperband")

    @model_validator(mode="after")
    def _rungs(self) -> Any:
        s: Any = self
        rung_budgets(s.min_budget, s.max_budget, s.reduction_factor)
        return self


def _rules(algorithm: str) -> type[_SearchBase]:
    """What the spec adds to ``algorithm``'s declared settings: the rules that extend
    it by name, else those its traits ask for."""
    extended = _SearchBase._extended.get(algorithm)
    if extended is not None:
        return extended
    return _ContinuingSearch if continues_trials(algorithm) else _SearchBase


ALGORITHMS = algorithm_names()
"""Every ``search.algorithm``: ``auto`` and each registered searcher's (search/_registry.py)."""
SEARCH_RULES: dict[str, type[_SearchBase]] = {a: _rules(a) for a in ALGORITHMS}
SEARCH_MODELS: dict[str, Any] = {
    algorithm: search_model(f"{algorithm.capitalize()}Search", algorithm,
                            settings_class(algorithm), SEARCH_RULES[algorithm],
                            keys=renamed_settings(algorithm))
    for algorithm in ALGORITHMS
}
"""The model of a ``search:`` block, by algorithm, built from the searcher's settings."""

GeneticSearch = SEARCH_MODELS["genetic"]
BayesianSearch = SEARCH_MODELS["bayesian"]
RandomSearch = SEARCH_MODELS["random"]
GridSearch = SEARCH_MODELS["grid"]
AutoSearch = SEARCH_MODELS["auto"]
PbtSearch = SEARCH_MODELS["pbt"]
AshaSearch = SEARCH_MODELS["asha"]
HyperbandSearch = SEARCH_MODELS["hyperband"]

Search = Annotated[
    typing.Union[tuple(SEARCH_MODELS.values())],  # noqa: UP007 - built from the registry
    Field(discriminator="algorithm"),
]


DEFAULT_METRIC = "val_accuracy"
"""The one metric with a direction by default (max); any other needs ``mode``, in a
spec and in `nestor sweep` alike."""


class Objective(Strict):
    metric: str = Field(DEFAULT_METRIC, description="the metric a trial reports to optimize")
    mode: Literal["min", "max"] = Field(
        "max", description="max: higher is better; min: lower is better (required for"
        f" any metric but {DEFAULT_METRIC})")
    threshold: float | None = Field(None, description="stop the search once a trial reaches it")

    @model_validator(mode="before")
    @classmethod
    def _mode_needed_for_other_metrics(cls, data: Any) -> Any:
        # max is right for the default val_accuracy, wrong for a loss: make users say.
        if (
            isinstance(data, dict)
            and data.get("metric", DEFAULT_METRIC) != DEFAULT_METRIC
            and "mode" not in data
        ):
            raise ValueError(f"mode is required for metric {data['metric']!r}: allowed: min, max")
        return data


# A trial silent this long is hung: generous, since a batch, an evaluation or a
# command's quiet stretch may take minutes on a real model.
PROGRESS_TIMEOUT_S = 1800.0


class TrialPolicy(Strict):
    timeout: float | None = Field(None, gt=0, description="seconds before a trial is killed")
    retries: int = Field(1, ge=0, description="re-runs of a failed trial, from its checkpoint")
    retry_on: Literal["transient", "any"] = Field(
        "transient", description="transient: retry only failures a rerun may mend (a killed"
        " or crashed rank, a lost node, a NaN, a timeout, a hang); any: also those that"
        " repeat (exit status 2, 126 or 127, a command or file not found, an ImportError or"
        " SyntaxError, no metric reported)")
    progress_timeout: float | None = Field(
        PROGRESS_TIMEOUT_S, gt=0,
        description="seconds without progress from rank 0 (a batch, a report, a line of"
        " output) before a trial is killed as hung; null: never")
    env: dict[str, Scalar] = Field(
        default_factory=dict,
        description="environment variables set in every rank of a trial (and a command"
        " trainer's environment), over the site's NCCL_*, GLOO_SOCKET_IFNAME, UCX_* and FI_*"
        " handed on from where nestor starts; e.g. {NCCL_DEBUG: INFO}")

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, Scalar]) -> dict[str, Scalar]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"env names must be variable names (letters, digits, _),"
                                 f" but got {name!r}")
        return value

    def env_vars(self) -> dict[str, str]:
        """``env`` as the strings a process environment holds (true -> 1, false -> 0)."""
        return {k: str(int(v)) if isinstance(v, bool) else str(v) for k, v in self.env.items()}


class EarlyStopping(Strict):
    rule: Literal["median", "asha"]
    warmup_epochs: int = Field(1, ge=0, description="epochs before a trial may be stopped")
    reduction_factor: int = Field(3, ge=2, description="asha: keep 1 in this many per rung")
    startup_trials: int = Field(3, ge=0, description="median: trials that finish before any stop")


# --- stages -------------------------------------------------------------------------


Finding = tuple[tuple[Any, ...], str]  # (where in the spec, what is wrong)


class _StageBase(Strict):
    """What the spec knows of a kind of stage: its name (``kind``), its fields, and
    its checks; the engine's kind of the same name (orchestrator/engine/kinds) adds
    how it runs and what it makes."""

    # Its trials come from a search, so its best trial is its product and other
    # stages (an ensemble) may draw members from it.
    searches: ClassVar[bool] = False
    # Its product combines its trials' predicted class probabilities (an ensemble), so
    # its trainer must give them (spec/needs.py: a user trainer declares predictions: true).
    combines_predictions: ClassVar[bool] = False

    name: Name
    from_: list[str] = Field(default_factory=list, alias="from")
    trainer: Trainer | None = None
    parallel: Parallel = Parallel()
    backend: Literal[backend_names()] = Field(  # type: ignore[valid-type]
        DEFAULT_BACKEND, description="what a trial's ranks communicate over: "
        + "; ".join(f"{name}, {cls.about}" for name, cls in BACKENDS.items()))
    batch: Batch | None = Field(
        None, description="global batch cap and lr rule; batch_size becomes per rank"
    )
    trial: TrialPolicy = TrialPolicy()

    @model_validator(mode="before")
    @classmethod
    def _batch_settings(cls, data: Any) -> Any:
        """Under ``batch:`` the stage's own built-in trainer gets ``batch_per_rank`` and
        ``lr_scaling`` from it, so every runner that reads ``stage.trainer`` trains
        as planned (`Workflow.trainer_of` does the same for an inherited trainer).
        Values the user wrote stay, for checks.py to report if they disagree."""
        if not isinstance(data, dict) or not isinstance(data.get("batch"), dict):
            return data
        trainer = data.get("trainer")
        if not isinstance(trainer, dict) or "name" not in trainer:
            return data
        settings = trainer.get("settings") or {}
        if not isinstance(settings, dict):
            return data
        rule = data["batch"].get("lr_rule", "linear")
        added = {"batch_per_rank": True, "lr_scaling": rule}
        data = dict(data)
        data["trainer"] = {**trainer, "settings": {**added, **settings}}
        return data

    def planned_trials(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def check(self, workflow: Workflow, here: tuple[Any, ...]) -> Iterator[Finding]:
        """Spec errors of this kind that span several fields or stages (pydantic checks
        one value at a time), each at its place ``here`` + the field's path."""
        return iter(())

    def _config_findings(self, workflow: Workflow, here: tuple[Any, ...],
                         config: dict[str, Scalar]) -> Iterator[Finding]:
        """Fixed hyperparameters (a train or transfer stage's), against its (inherited)
        trainer."""
        try:
            trainer = workflow.trainer_of(self.name)
        except (KeyError, IndexError, ValueError):
            return  # a missing or cyclic from: is reported on its own
        if trainer.name not in TRAINERS:
            return
        info = TRAINERS[trainer.name]
        known = {**info.hyperparameters, **info.settings}
        for key, value in config.items():
            option = known.get(key)
            if option is None:
                yield (*here, "config", key), (
                    f"{trainer.name} takes no hyperparameter {key!r}{did_you_mean(key, known)}"
                    f" ({allowed(info.hyperparameters)})"
                )
            elif (message := option_mismatch(option, value)) is not None:
                yield (*here, "config", key), message

    # What checks, the planner and `nestor validate` read of any kind of stage, so
    # that none of them asks which kind it is.

    def needs(self, workflow: Workflow) -> list[Need]:
        """What its trainer must give besides a result: checkpoints (its trials carry on
        from, or start from, others'), predictions (an ensemble's members)."""
        return []

    def fixed_config(self) -> dict[str, Scalar]:
        """Hyperparameters the stage fixes for its trials (a train or transfer stage's
        ``config``); a search's come from its space."""
        return {}

    def searched(self) -> dict[str, Any]:
        """The hyperparameters it searches, by name, with their specs (a search's space)."""
        return {}

    @property
    def objectives(self) -> list[Objective]:
        """What it optimizes (a search); other kinds judge by their sources'."""
        return []

    def tasks(self) -> dict[str, Task]:
        """Tasks the stage trains on besides its trainer's own (a transfer stage's
        source and target), by field name."""
        return {}

    def scored_task(self) -> Task | None:
        """The task its models are scored on, when not the trainer's own."""
        return None

    def auto_choice(self, width: int | None = None) -> AutoChoice | None:
        """What ``algorithm: auto`` picks for this stage at ``width`` trials at once
        (None: no automatic search)."""
        return None

    def search_label(self, width: int | None = None) -> str:
        """The search, as `nestor validate` names it ("-": none)."""
        return "-"


class HpoStage(_StageBase):
    searches: ClassVar[bool] = True

    kind: Literal["hpo"]
    trainer: Trainer
    search: Search
    space: dict[str, ParamSpec] = Field(min_length=1)
    objective: list[Objective] = Field(
        default_factory=lambda: [Objective()],
        description="one metric to optimize, or a list of them for a multi-objective search",
    )
    early_stopping: EarlyStopping | None = None
    keep_checkpoints: PositiveInt | None = Field(
        None, description="checkpoints kept: the best N trials' and those the search may"
        " still continue from (PBT's donors, promotable trials); the rest are removed as"
        " the search goes. null: all")

    @field_validator("space", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        """`name: [a, b]` means categorical and `name: 0.9` constant, as people write."""
        if not isinstance(value, dict):
            return value
        expanded = dict(value)
        for key, item in value.items():
            if isinstance(item, list):
                expanded[key] = {"type": "categorical", "values": item}
            elif isinstance(item, Scalar):
                expanded[key] = {"type": "constant", "value": item}
        return expanded

    @field_validator("space", mode="after")
    @classmethod
    def _names_pass_as_arguments(cls, value: dict[str, Any]) -> dict[str, Any]:
        """Each parameter's name reaches a trial as ``--NAME=VALUE`` or a keyword."""
        for name in value:
            problem = name_problem(name)
            if problem:
                raise ValueError(f"space names a parameter {name!r}, but a parameter's"
                                 f" name {problem}")
        conditions = {name: spec.when for name, spec in value.items()
                      if isinstance(spec, _ParamSpec) and spec.when}
        if conditions:  # unknown parents, values they never take, cycles
            try:
                SearchSpace(tuple(spec.to_param(name) for name, spec in value.items()),
                            conditions=conditions)
            except ValueError as exc:
                raise ValueError(f"space.{exc}" if ".when" in str(exc).split(":")[0]
                                 else str(exc)) from None
        return value

    @field_validator("objective", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @field_validator("search", mode="before")
    @classmethod
    def _auto_by_default(cls, value: Any) -> Any:
        """A search block that names no algorithm lets nestor pick one (``auto``): on
        held-out problems auto ranked 2nd of 16 searchers where the genetic search,
        the old default, ranked 11th."""
        if isinstance(value, dict) and "algorithm" not in value:
            return {"algorithm": "auto", **value}
        return renamed_search_keys(value)

    @model_validator(mode="after")
    def _fidelity_is_honoured(self) -> HpoStage:
        """An auto search's fidelity must be a setting the trainer trains a trial's
        length by, and continues from a checkpoint, with a full value to split."""
        fidelity = getattr(self.search, "fidelity", None)
        if not isinstance(self.search, AutoSearch) or fidelity is None:
            return self
        where = f"search.fidelity {fidelity!r}"
        name = self.trainer.name
        if name in TRAINERS:
            lengths = [s for s in FIDELITY_SETTINGS if s in TRAINERS[name].settings]
            if fidelity not in lengths:
                raise ValueError(
                    f"search.fidelity must be a setting that sets how long a {name} trial"
                    f" trains and that it continues from a checkpoint, but got {fidelity!r}"
                    f" (allowed: {', '.join(lengths)})")
        elif fidelity not in self.trainer.settings:
            raise ValueError(
                f"{where} needs trainer.settings.{fidelity}: a trial's full length, which the"
                f" {self.trainer.kind} trainer must honour (and continue from the checkpoint"
                " it is given), but the settings have none")
        value = self.max_fidelity()
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"trainer.settings.{fidelity}, the full length {where} splits,"
                             f" must be a positive integer, but got {value!r}")
        if fidelity in self.space:
            raise ValueError(f"{where} is what a multi-fidelity search sets per trial, so it"
                             " cannot be searched in space too, but space has it")
        return self

    @model_validator(mode="after")
    def _epochs_budget_is_countable(self) -> HpoStage:
        """A budget in epochs needs to know what a trial trains: a continuing search
        says so per trial; a trial trained in full trains the trainer's setting."""
        budget = self.search.budget
        if not isinstance(budget, dict) or "epochs" not in budget:
            return self
        if isinstance(self.search, _ContinuingSearch) or self.max_fidelity() is not None:
            return self
        name = self.trainer.name
        known = name in TRAINERS and "epochs" in TRAINERS[name].settings
        if "epochs" not in self.trainer.settings and not known:
            raise ValueError(
                "search.budget.epochs must count something a trial trains, but the trainer"
                " has no settings.epochs and the search trains every trial in full: give"
                " trainer.settings.epochs, or a budget in trials, slot_seconds or hours")
        return self

    @model_validator(mode="after")
    def _pb2_has_numbers(self) -> HpoStage:
        """PB2's GP bandit chooses numbers: a space of categoricals leaves it nothing."""
        if isinstance(self.search, PbtSearch) and self.search.explore == "pb2":
            kinds = {name: spec.type for name, spec in self.space.items()}
            if not any(kind in ("float", "int") for kind in kinds.values()):
                searched = ", ".join(n for n, k in kinds.items() if k != "constant") or "none"
                raise ValueError(
                    "search.explore pb2 needs a float or int parameter in space for its GP"
                    f" bandit to choose, but the searched ones are categorical ({searched});"
                    " use explore: perturb"
                )
        return self

    @model_validator(mode="after")
    def _lq_cmaes_has_numbers_only(self) -> HpoStage:
        """lq-CMA-ES models numbers: a categorical has no place in its quadratic."""
        search = self.search
        if not isinstance(search, BayesianSearch) or search.sampler != "lq-cmaes":
            return self
        categorical = [name for name, spec in self.space.items() if spec.type == "categorical"]
        if categorical:
            raise ValueError(
                "search.sampler lq-cmaes searches floats and ints only, but space has"
                f" categorical {', '.join(categorical)}: use sampler tpe, or fix it in"
                " trainer.settings")
        return self  # several objectives: HpoStage.check, as for every such search

    @model_validator(mode="after")
    def _pbt_keeps_the_model_shape(self) -> HpoStage:
        """PBT's exploit loads a top member's weights into the exploiting member's
        model: a searched option that shapes the weights would make every load fail."""
        if not isinstance(self.search, PbtSearch) or self.trainer.name not in TRAINERS:
            return self
        options = TRAINERS[self.trainer.name].options
        shaping = [name for name, spec in self.space.items()
                   if spec.type != "constant" and name in options
                   and options[name].shapes_model]
        if shaping:
            raise ValueError(
                f"search.algorithm pbt copies one member's weights into another's model,"
                f" so space cannot search {', '.join(shaping)}: it sets the shape of the"
                f" {self.trainer.name} trainer's weights. Fix it in trainer.settings, or search"
                " it with hyperband, asha, bayesian or genetic")
        return self

    @property
    def objectives(self) -> list[Objective]:
        return self.objective

    def searched(self) -> dict[str, Any]:
        return dict(self.space)

    def search_space(self) -> SearchSpace:
        return SearchSpace(
            tuple(spec.to_param(name) for name, spec in self.space.items()),
            conditions={name: spec.when for name, spec in self.space.items() if spec.when},
            constraints=tuple(self.search.constraint_rules()))

    def planned_trials(self) -> int:
        if isinstance(self.search, AutoSearch):
            return self.search.planned_trials(self.search_space(),
                                              [o.model_dump() for o in self.objectives],
                                              self.max_fidelity())
        return self.search.planned_trials(self.search_space())

    def check(self, workflow: Workflow, here: tuple[Any, ...]) -> Iterator[Finding]:
        """The space and grid points against the trainer's hyperparameters; objectives."""
        if self.trainer.name in TRAINERS:
            info = TRAINERS[self.trainer.name]
            known = {**info.hyperparameters, **info.settings}
            for name, spec in self.space.items():
                loc = (*here, "space", name)
                option = known.get(name)
                if option is None:
                    yield loc, (
                        f"{self.trainer.name} takes no hyperparameter {name!r}"
                        f"{did_you_mean(name, known)} ({allowed(info.hyperparameters)})"
                    )
                    continue
                values: list[Any] = []
                if isinstance(spec, CategoricalSpec):
                    values = list(spec.values)
                elif isinstance(spec, ConstantSpec):
                    values = [spec.value]
                for value in values:
                    message = option_mismatch(option, value)
                    if message:
                        yield loc, message
        names = list(self.space)
        for index, rule in enumerate(self.search.constraints):
            if not isinstance(rule, str):
                continue  # a function: check_imports finds it
            unknown = sorted(Expression.parse(rule).names - set(names))
            if unknown:
                yield (*here, "search", "constraints", index), (
                    f"constraint {rule!r} names {', '.join(map(repr, unknown))}, which is no"
                    f" parameter in space{did_you_mean(unknown[0], names)} ({allowed(names)})")
        if isinstance(self.search, GridSearch) and isinstance(self.search.points, dict):
            for name in self.search.points:
                if name not in self.space:
                    yield (*here, "search", "points", name), (
                        f"no parameter {name!r} in space{did_you_mean(name, self.space)}"
                        f" ({allowed(self.space)})"
                    )
        objectives = self.objectives
        if not objectives:
            yield (*here, "objective"), "must name at least one metric, but got an empty list"
        metrics = [o.metric for o in objectives]
        if len(set(metrics)) != len(metrics):
            yield (*here, "objective"), f"names a metric twice: {metrics}"
        yield from self._one_objective(here)
        searched = [name for name, spec in self.space.items() if spec.type != "constant"]
        if (isinstance(self.search, BayesianSearch) and self.search.sampler == "lq-cmaes"
                and len(searched) == 1):
            yield (*here, "search", "sampler"), f"search.{one_dimension(searched[0])}"

    def _one_objective(self, here: tuple[Any, ...]) -> Iterator[Finding]:
        """A search that ranks or models trials by one number (ASHA, Hyperband, PBT,
        CMA-ES) refuses several objectives when it is made: refused here instead, at
        the objective's line, before any stage runs."""
        if len(self.objectives) < 2:
            return
        algorithm, settings = self.search.algorithm, self.search.settings()
        why = one_objective_only(algorithm, settings)
        if why is None:
            return
        named = f"sampler {settings['sampler']}" if algorithm == "bayesian" else algorithm
        several = [a for a in ALGORITHMS if one_objective_only(a, {}) is None]
        yield (*here, "objective"), (
            f"search {named} optimizes exactly one objective ({why}), but objective lists"
            f" {len(self.objectives)}: {', '.join(o.metric for o in self.objectives)}; keep"
            f" one, or use an algorithm that takes several ({', '.join(several)})")

    def needs(self, workflow: Workflow) -> list[Need]:
        """A search that continues trials (PBT, PB2, ASHA, Hyperband, BOHB; auto where it
        picks one) hands each a checkpoint of an earlier trial."""
        choice = self.auto_choice()
        if choice is not None:
            algorithm, where, settings = choice.algorithm, ("search", "fidelity"), choice.settings
        else:
            algorithm, where = self.search.algorithm, ("search", "algorithm")
            settings = self.search.model_dump()
        if not continues_trials(algorithm):
            return []
        name = title(algorithm, settings)
        if choice is not None:
            name = f"search.algorithm auto, which picks {name} here,"
        return [Need("checkpoints", where, name)]

    def max_fidelity(self) -> int | None:
        """An auto search's fidelity at its full value: the trainer's setting (for a
        built-in trainer, its default where the spec leaves it out); None without one."""
        fidelity = getattr(self.search, "fidelity", None)
        if not isinstance(self.search, AutoSearch) or fidelity is None:
            return None
        value = self.trainer.settings.get(fidelity)
        if value is None and self.trainer.name in TRAINERS:
            value = TRAINERS[self.trainer.name].settings[fidelity].default
        return value  # type: ignore[return-value]

    def search_settings(self, width: int | None = None) -> dict[str, Any]:
        """``search.make_searcher``'s keywords for this stage's search: the search's
        own settings, for auto with a fidelity its full value, and ``width`` (the
        trials the stage runs at once) as the ``parallel`` of a search that sizes
        itself by it where the spec leaves that out."""
        settings = self.search.settings()
        if self.search.wall_s is not None and settings.get("budget") is None:
            settings["budget"] = UNLIMITED_TRIALS  # the wall clock ends it
        if isinstance(self.search, AutoSearch) and self.search.fidelity is not None:
            settings["max_fidelity"] = self.max_fidelity()
        if width is not None and "parallel" in settings and settings["parallel"] is None:
            settings["parallel"] = width
        return settings

    def search_label(self, width: int | None = None) -> str:
        choice = self.auto_choice(width)
        if choice is not None:
            return f"auto: {choice.label()}"
        search = self.search
        if isinstance(search, GeneticSearch):
            size = f"{search.population}x{search.planned_generations()}"
            demes = f", {search.demes} demes" if search.demes > 1 else ""
            return f"genetic {search.schedule} {size}{demes}"
        if isinstance(search, BayesianSearch):
            return f"bayesian {search.sampler}"
        if isinstance(search, PbtSearch):
            name = "pb2" if search.explore == "pb2" else "pbt"  # pb2: pbt, GP-bandit explore
            return (f"{name} {search.population} members, exploit every"
                    f" {search.interval:g} {search.fidelity}")
        if isinstance(search, _HalvingSearch):
            bohb = ", TPE" if search.sampler == "tpe" else ""
            return (f"{search.algorithm} {search.min_budget:g}-{search.max_budget:g}"
                    f" {search.fidelity}, eta {search.reduction_factor}{bohb}")
        return str(search.algorithm)

    def auto_choice(self, width: int | None = None) -> AutoChoice | None:
        """What ``algorithm: auto`` picks for this stage (None for a named algorithm),
        planning for ``width`` trials at once where the spec sets no ``parallel``."""
        if not isinstance(self.search, AutoSearch):
            return None
        return self.search.choose(self.search_space(), [o.model_dump() for o in self.objectives],
                                  self.max_fidelity(), width)


class EnsembleStage(_StageBase):
    combines_predictions: ClassVar[bool] = True

    kind: Literal["ensemble"]
    members: PositiveInt = Field(3, description="ensemble size")
    select: Literal["top_k", "greedy"] = Field(
        "top_k", description="how members are chosen from the HPO stage's trials"
    )
    vary: list[Literal["seed", "data", "structure"]] = Field(
        default_factory=lambda: ["seed"], description="what differs between members"
    )
    combine: Literal["mean", "weighted", "greedy"] = "mean"

    def planned_trials(self) -> int:
        return self.members

    def needs(self, workflow: Workflow) -> list[Need]:
        return [Need("predictions", ("kind",), "an ensemble")]

    def check(self, workflow: Workflow, here: tuple[Any, ...]) -> Iterator[Finding]:
        if not any(workflow.stage(ref).searches for ref in self.from_):
            yield (*here, "from"), "an ensemble stage needs from: an hpo stage to draw members from"
        try:
            trainer = workflow.trainer_of(self.name)
        except (KeyError, IndexError, ValueError):
            return  # a missing or cyclic from: is reported on its own
        searched = {n for ref in self.from_ for n in workflow.stage(ref).searched()}
        if ("structure" in self.vary and trainer.name is None
                and "width" not in trainer.settings and "width" not in searched):
            yield (*here, "vary"), (
                "vary: structure scales each member's width, but the"
                f" {trainer.kind} trainer has no width (not in trainer.settings nor searched):"
                " add one, or vary seed or data")


class Task(Strict):
    dataset: str
    classes: list[int] | None = None
    settings: dict[str, Scalar | list[Scalar]] = Field(default_factory=dict)

    @field_validator("classes")
    @classmethod
    def _distinct(cls, value: list[int] | None) -> list[int] | None:
        if value is not None:
            if not value:
                raise ValueError("classes must list at least one class, but got none")
            if len(set(value)) != len(value):
                raise ValueError(f"classes must be distinct, but got {value}")
        return value


class TransferStage(_StageBase):
    kind: Literal["transfer"]
    source: Task
    target: Task
    mode: Literal["finetune", "hierarchical"] = "finetune"
    groups: list[list[int]] | None = Field(
        None, description="hierarchical: class groups trained as sub-models"
    )
    freeze: list[str] = Field(default_factory=list, description="layer groups frozen to fine-tune")
    lr_scale: float = Field(0.1, gt=0, le=1, description="fine-tuning lr as a share of the lr")
    config: dict[str, Scalar] = Field(
        default_factory=dict, description="hyperparameters; default: the best of the from: stage"
    )
    scratch_baseline: bool = Field(True, description="also train the target from scratch")

    @model_validator(mode="after")
    def _groups_for_hierarchical(self) -> TransferStage:
        if self.mode == "hierarchical" and not self.groups:
            raise ValueError("groups are required when mode is hierarchical, e.g. [[0,1,2],[3,4]]")
        if self.mode == "finetune" and self.groups:
            raise ValueError("groups apply only to mode: hierarchical")
        return self

    def planned_trials(self) -> int:
        pretrain = len(self.groups) if self.mode == "hierarchical" and self.groups else 1
        return pretrain + 1 + int(self.scratch_baseline)

    def fixed_config(self) -> dict[str, Scalar]:
        return dict(self.config)

    def tasks(self) -> dict[str, Task]:
        return {"source": self.source, "target": self.target}

    def scored_task(self) -> Task | None:
        return self.target

    def needs(self, workflow: Workflow) -> list[Need]:
        return [Need("checkpoints", ("kind",), "transfer")]

    def check(self, workflow: Workflow, here: tuple[Any, ...]) -> Iterator[Finding]:
        yield from self._config_findings(workflow, here, self.config)
        try:
            user = workflow.trainer_of(self.name).name is None
        except (KeyError, IndexError, ValueError):
            user = False  # a missing or cyclic from: is reported on its own
        if user and self.freeze:
            yield (*here, "freeze"), (
                "freeze names layer groups of a built-in trainer's model, but this stage's"
                " trainer is a function or command: freeze what it loads from ctx.init_from"
                " (NESTOR_INIT_FROM) in its own code, and remove freeze")
        for side in ("source", "target"):
            dataset = getattr(self, side).dataset
            if dataset not in DATASETS:
                yield (*here, side, "dataset"), (
                    f"unknown dataset {short(dataset)}{did_you_mean(dataset, DATASETS)}"
                    f" ({allowed(DATASETS)})"
                )


class TrainStage(_StageBase):
    kind: Literal["train"]
    config: dict[str, Scalar] = Field(
        default_factory=dict, description="hyperparameters; default: the best of the from: stage"
    )
    data: Literal["train", "train+val"] = Field(
        "train", description="train+val retrains on the validation data too"
    )
    replay: bool = Field(
        True, description="from: a pbt stage: train through its winner's whole hyperparameter"
        " schedule, each step carrying on from the last (false: its last config only)"
    )

    def planned_trials(self) -> int:
        return 1

    def fixed_config(self) -> dict[str, Scalar]:
        return dict(self.config)

    def needs(self, workflow: Workflow) -> list[Need]:
        """Replaying a PBT winner's schedule carries each step on from the last."""
        if self.replay and any(isinstance(getattr(workflow.stage(ref), "search", None),
                                          PbtSearch) for ref in self.from_):
            return [Need("checkpoints", ("from",), "replaying a PBT schedule")]
        return []

    def check(self, workflow: Workflow, here: tuple[Any, ...]) -> Iterator[Finding]:
        return self._config_findings(workflow, here, self.config)


Stage = Annotated[
    HpoStage | EnsembleStage | TransferStage | TrainStage, Field(discriminator="kind")
]
# What a stage may be: the kinds of the models in Stage (orchestrator/engine/kinds
# has a kind of each name, which runs it).
STAGE_KINDS = tuple(typing.get_args(model.model_fields["kind"].annotation)[0]
                    for model in typing.get_args(typing.get_args(Stage)[0]))
DISCRIMINATORS = {"kind": STAGE_KINDS, "algorithm": ALGORITHMS, "type": PARAM_TYPES}


class Workflow(Strict):
    name: Name
    tracking: Tracking = Tracking()
    resources: Resources = Resources()
    stages: list[Stage] = Field(min_length=1)

    def stage(self, name: str) -> HpoStage | EnsembleStage | TransferStage | TrainStage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)

    def trainer_of(self, name: str) -> Trainer:
        """A stage's trainer, inherited through `from:` when it names none.

        Under ``batch:`` a built-in trainer's ``batch_size`` is per rank and its
        lr follows ``batch.lr_rule`` (its ``batch_per_rank``/``lr_scaling``).
        """
        stage = self.stage(name)
        seen = {name}
        while stage.trainer is None:
            stage = self.stage(stage.from_[0])
            if stage.name in seen:  # checks.py reports cycles; never loop here
                raise ValueError(f"stage {name!r} inherits its trainer through a cycle")
            seen.add(stage.name)
        trainer = stage.trainer
        batch = self.batch_of(name)
        if batch is not None and trainer.name is not None:
            settings = {**trainer.settings, "batch_per_rank": True, "lr_scaling": batch.lr_rule}
            trainer = trainer.model_copy(update={"settings": settings})
        return trainer

    def planned_trials(self, name: str) -> int:
        """Trials the stage plans; a train stage that replays a pbt source's winning
        schedule runs one chained trial per interval of it."""
        stage = self.stage(name)
        if getattr(stage, "replay", False):
            for ref in stage.from_:
                source = self.stage(ref)
                search = getattr(source, "search", None)
                if isinstance(search, PbtSearch):
                    from nestor.search import make_searcher

                    return int(make_searcher("pbt", source.search_space(),  # type: ignore[union-attr]
                                             [("objective", "max")],
                                             **search.settings()).intervals)
        return stage.planned_trials()

    def declared_parallel(self, name: str) -> Parallel:
        """The stage's parallel as written (inherited through `from:`), auto included."""
        stage = self.stage(name)
        if "parallel" in stage.model_fields_set or not stage.from_:
            return stage.parallel
        return self.declared_parallel(stage.from_[0])

    def backend_of(self, name: str) -> str:
        """The stage's communication backend, inherited through `from:` with its parallel."""
        stage = self.stage(name)
        if "backend" in stage.model_fields_set or not stage.from_:
            return stage.backend
        return self.backend_of(stage.from_[0])

    def batch_of(self, name: str) -> Batch | None:
        stage = self.stage(name)
        if "batch" in stage.model_fields_set or not stage.from_:
            return stage.batch
        return self.batch_of(stage.from_[0])

    def parallel_of(self, name: str, slots: int | None = None) -> Parallel:
        """The stage's concrete shape: as written, or the planner's choice for ``auto``
        on ``slots`` (default: resources.slots, else this machine's CPUs), from the
        cached profile of its trainer on this machine (the prior if none)."""
        declared = self.declared_parallel(name)
        if not declared.is_auto:
            return declared
        from nestor.orchestrator.planning import plan_stage
        plan = plan_stage(self, name, slots or self.resources.slots or default_slots())
        return Parallel(data=plan.shape.dp, model=plan.shape.mp)

    def order(self) -> list[str]:
        """Stage names in dependency order, ties kept in the order written."""
        done: list[str] = []
        pending = [s.name for s in self.stages]
        while pending:
            ready = [n for n in pending if all(d in done for d in self.stage(n).from_)]
            if not ready:  # a cycle; checks.py reports it with its path
                return done + pending
            done.append(ready[0])
            pending.remove(ready[0])
        return done


def concurrent_trials(slots: int, ranks: int) -> int:
    """How many trials of ``ranks`` ranks fit on ``slots`` slots at once."""
    return max(0, math.floor(slots / ranks))


def default_slots() -> int:
    """Slots of this machine when a spec gives none: its CPUs (GPUs are counted by Ray)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
