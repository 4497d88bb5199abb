"""`nestor sweep`: a one-stage HPO from command-line flags, no YAML to write.

The flags become an ordinary workflow spec (saved as the run's spec.yaml),
so a sweep is validated, journalled, resumed and tracked exactly like
`nestor run`. Urika-HPO-style use is a command and its parameters:

    nestor sweep --command "python3 fit.py" --mode min --param=-a=float:-1:1 --param n=int:1:8 \
                 --budget 40          # auto (the default) picks the search
    nestor sweep ... --algorithm genetic --population 8 --generations 4 --budget 2slot-h

Searches that continue trials from checkpoints take the trainer setting their
budget sets (``--fidelity``, epochs by default) and their own schedule:

    nestor sweep --trainer cnn --param lr=float:1e-3:0.3:log --algorithm pbt \
                 --population 8 --interval 1 --intervals 6
    nestor sweep ... --algorithm pbt --explore pb2      # PB2: a GP bandit picks the numbers
    nestor sweep --trainer cnn --param lr=float:1e-3:0.3:log --algorithm hyperband \
                 --min-budget 1 --max-budget 9 --reduction-factor 3 --sampler tpe      # BOHB
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click
import yaml

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo

PARAM_FORMS = "NAME=float:LOW:HIGH[:log], NAME=int:LOW:HIGH[:log] or NAME=categorical:A,B,..."

OWN_FLAGS = ("seed", "budget", "parallel", "constraints")
"""Search fields that `nestor sweep` sets from flags of its own: --seed, --budget (with
units), auto's ``parallel`` from --parallel (or --slots / ranks per trial), and
``constraints`` from --constraint (one expression a flag)."""

DEPRECATED_FLAGS = {"--algo": "--algorithm", "--cmd": "--command",
                    "--eta": "--reduction-factor", "--genetic-mode": "--replacement",
                    "--fom-pattern": "--result-pattern"}
"""Old flag -> its name now: a flag is the spec key it sets (``search.algorithm``,
``trainer.command``, ``search.reduction_factor``, genetic ``search.replacement``,
``trainer.result_pattern``). The old spellings still work, with a notice."""


def renamed_args(args: list[str]) -> list[str]:
    """`nestor sweep`'s arguments with each deprecated flag (``--eta 3``, ``--eta=3``)
    spelt as its new name, saying so once (``orchestrator.spec.renamed.notice``)."""
    from nestor.orchestrator.spec.renamed import notice

    out = []
    for arg in args:
        if arg == "--":
            out += args[len(out):]
            break
        flag, eq, value = arg.partition("=")
        new = DEPRECATED_FLAGS.get(flag)
        if new is not None:
            notice(flag, new)
            arg = new + eq + value
        out.append(arg)
    return out


@dataclass(frozen=True)
class SearchFlag:
    """A `nestor sweep` flag for one field of the spec's search blocks.

    Made from the spec's search models, which are made from the searchers'
    declared settings (search/_settings.py): a setting added to a searcher gets
    its flag, type, bounds and help here with no other edit."""

    field: str
    flag: str
    owners: tuple[str, ...]  # the --algorithm values that have the field
    type: Any  # a click type
    help: str
    yaml: bool  # the value is read as YAML (lists, mappings, unions)

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


def search_flags() -> list[SearchFlag]:
    """One flag per search field, in the order the searches declare them. Owners
    are listed with the searches that give the field a value by default first."""
    from nestor.orchestrator.spec.model import SEARCH_MODELS

    by_field: dict[str, list[tuple[str, FieldInfo]]] = {}
    for algorithm, model in SEARCH_MODELS.items():
        for name, info in model.model_fields.items():
            key = info.alias or name  # the spec's key (genetic mode's is replacement)
            if key != "algorithm" and key not in OWN_FLAGS:
                by_field.setdefault(key, []).append((algorithm, info))
    flags = []
    for name, owners in by_field.items():
        owners.sort(key=lambda owner: owner[1].get_default(call_default_factory=True) is None)
        kind, yaml_value = _click_type([info for _, info in owners])
        flags.append(SearchFlag(name, "--" + name.replace("_", "-"),
                                tuple(a for a, _ in owners), kind, _help(owners), yaml_value))
    return flags


def _help(owners: list[tuple[str, FieldInfo]]) -> str:
    """Each owner's description and default, owners that agree named together."""
    parts: dict[str, list[str]] = {}
    for algorithm, info in owners:
        default = info.get_default(call_default_factory=True)
        if isinstance(default, list):
            default = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in default)
        elif isinstance(default, float):
            default = f"{default:g}"
        text = info.description or ""
        text += "" if default is None else f" (default {default})"
        parts.setdefault(text, []).append(algorithm)
    return ". ".join(f"{', '.join(algorithms)}: {text}" for text, algorithms in parts.items())


def _shape(annotation: Any, metadata: list[Any]) -> tuple[Any, dict[str, float]]:
    """(the type without None and bounds, the bounds)."""
    bounds = {k: getattr(m, k) for m in metadata for k in ("ge", "gt", "le", "lt")
              if getattr(m, k, None) is not None}
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [m for m in typing.get_args(annotation) if m is not type(None)]
        if len(members) != 1:
            return annotation, bounds
        annotation = members[0]
    if typing.get_origin(annotation) is typing.Annotated:
        inner, *extra = typing.get_args(annotation)
        for item in extra:
            inner, more = _shape(inner, list(getattr(item, "metadata", [item])))
            bounds.update(more)
        annotation = inner
    return annotation, bounds


def _click_type(infos: list[FieldInfo]) -> tuple[Any, bool]:
    """The flag's click type for fields of these types; (STRING, True): read as YAML."""
    shapes = [_shape(info.annotation, info.metadata) for info in infos]
    kinds = [kind for kind, _ in shapes]
    if all(typing.get_origin(k) is typing.Literal for k in kinds):
        values = [v for k in kinds for v in typing.get_args(k)]
        return click.Choice(list(dict.fromkeys(values))), False
    if len(set(kinds)) == 1 and kinds[0] in (int, float):
        bounds = shapes[0][1] if all(b == shapes[0][1] for _, b in shapes) else {}
        if not bounds:  # none, or the owners' differ: the spec checks each
            return (click.INT if kinds[0] is int else click.FLOAT), False
        low, high = bounds.get("ge", bounds.get("gt")), bounds.get("le", bounds.get("lt"))
        ranged = click.IntRange if kinds[0] is int else click.FloatRange
        return ranged(min=low, max=high, min_open="gt" in bounds, max_open="lt" in bounds), False
    if len(set(kinds)) == 1 and kinds[0] in (str, bool):
        return (click.STRING if kinds[0] is str else click.BOOL), False
    return click.STRING, True


def search_options() -> list[click.Option]:
    """The click options of :func:`search_flags`, for `nestor sweep`."""
    return [click.Option([f.flag, f.dest], type=f.type, help=f"{f.help}.",
                         metavar="YAML" if f.yaml else None) for f in search_flags()]


def _number(text: str, kind: type, where: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        noun = "an integer" if kind is int else "a number"
        raise ValueError(f"{where} must be {noun}, but got {text!r}") from None


def parse_param(text: str) -> tuple[str, dict[str, Any]]:
    """``lr=float:1e-4:0.1:log`` -> ("lr", {type: float, low, high, log}).

    The name is everything before the first '=', so names may start with
    dashes (``-a=float:-1:1``) for commands that take such flags.
    """
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise ValueError(f"--param must look like {PARAM_FORMS}, but got {text!r}")
    kind, _, body = rest.partition(":")
    if kind in ("float", "int"):
        parts = body.split(":")
        log = len(parts) == 3 and parts[2] == "log"
        if len(parts) not in (2, 3) or (len(parts) == 3 and not log):
            raise ValueError(
                f"--param {name}: {kind} needs LOW:HIGH or LOW:HIGH:log, but got {body!r}"
            )
        number = float if kind == "float" else int
        low = _number(parts[0], number, f"--param {name} low")
        high = _number(parts[1], number, f"--param {name} high")
        return name, {"type": kind, "low": low, "high": high, "log": log}
    if kind in ("categorical", "choice"):  # choice: the old spelling
        if kind == "choice":
            from nestor.orchestrator.spec.renamed import notice

            notice("--param NAME=choice:A,B", "--param NAME=categorical:A,B")
        values = [yaml.safe_load(v) for v in body.split(",") if v != ""]
        if not values:
            raise ValueError(f"--param {name}: categorical needs values A,B,..., but got none")
        return name, {"type": "categorical", "values": values}
    raise ValueError(
        f"--param {name}: the type must be float, int or categorical, but got {kind!r}"
        f" ({PARAM_FORMS})"
    )


WHEN_FORM = "NAME:PARENT=VALUE[,VALUE...]"


def parse_when(text: str) -> tuple[str, str, Any]:
    """``momentum:optimizer=sgd`` -> ("momentum", "optimizer", "sgd"): the parameter
    exists only when PARENT takes one of the values (read as YAML, as categorical values
    are); repeat --when for a second parent (all must hold)."""
    child, sep, rest = text.partition(":")
    parent, sep2, body = rest.partition("=")
    if not sep or not sep2 or not child or not parent or not body:
        raise ValueError(f"--when must look like {WHEN_FORM} (e.g. momentum:optimizer=sgd),"
                         f" but got {text!r}")
    values = [yaml.safe_load(v) for v in body.split(",") if v != ""]
    return child, parent, values[0] if len(values) == 1 else values


def parse_setting(text: str, flag: str = "--set") -> tuple[str, Any]:
    """``epochs=2`` -> ("epochs", 2): values read as YAML (numbers, booleans, lists)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"{flag} must look like KEY=VALUE, but got {text!r}")
    try:
        return key, yaml.safe_load(value) if value else ""
    except yaml.YAMLError:
        raise ValueError(f"{flag} {key}= must be a YAML value, but got {value!r}") from None


def _search_settings(texts: list[str], search: dict[str, Any],
                     flags: dict[str, str]) -> dict[str, Any]:
    """``--search-set KEY=VALUE``: any field of the stage's ``search`` block that has
    no flag of its own (``quantile=0.5``, ``startup_trials=5``, ``replacement=mu_plus_lambda``,
    ``perturbation_factors=[0.7,1.3]``); the spec's own validation names a field
    the algorithm does not have, or a value it does not allow."""
    extra: dict[str, Any] = {}
    for text in texts:
        key, value = parse_setting(text, "--search-set")
        if key == "algorithm":
            raise ValueError("--search-set cannot set algorithm: use --algorithm")
        if key in search or key in extra:
            flag = "--search-set" if key in extra else flags.get(key, f"--{key}")
            raise ValueError(f"--search-set {key}= is given twice (also by {flag})")
        extra[key] = value
    return extra


COMMAND_METRIC = "fom"
"""The metric a command's result line (``FoM: <number>``) is reported as."""


def sweep_objective(metric: str | None, mode: str | None, *, command: bool) -> dict[str, str]:
    """The sweep's objective, by the rule a spec's ``objective:`` follows: only
    ``val_accuracy`` has a direction by default (max); any other metric, and so a
    command's figure of merit, needs ``--mode``. A direction that differed by entry
    point (``--command`` once minimised silently) turns an accuracy search upside down."""
    from nestor.orchestrator.spec.model import DEFAULT_METRIC

    name = metric or (COMMAND_METRIC if command else DEFAULT_METRIC)
    if mode is not None:
        return {"metric": name, "mode": mode}
    if name == DEFAULT_METRIC:
        return {"metric": name, "mode": "max"}
    what = (f"the number the command prints ({name})" if command and metric is None
            else f"--metric {name}")
    raise ValueError(
        f"--mode is required: is {what} better higher (--mode max, e.g. an accuracy) or"
        f" lower (--mode min, e.g. a loss or an error)? Only {DEFAULT_METRIC} defaults"
        " to max, as in a spec")


def build_spec(
    *,
    trainer: str | None,
    command: str | None,
    params: list[str],
    settings: list[str],
    algorithm: str,
    budget: int | dict[str, float] | None,
    metric: str | None,
    mode: str | None,
    result_pattern: str | None,
    dp: int,
    mp: int,
    parallel: int | None,
    slots: int | None,
    seed: int,
    name: str = "sweep",
    backend: str = "horovod",
    keep_checkpoints: int | None = None,
    search_settings: list[str] | None = None,
    checkpoints: bool = False,
    whens: list[str] | None = None,
    constraints: list[str] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """The workflow spec (as data) that these sweep flags describe.

    ``options`` are the search flags (:func:`search_flags`, by their ``dest``:
    ``population=8``, ``eta=3``); each must belong to the algorithm asked for
    (``--sampler`` to bayesian and, as tpe, to hyperband and asha (BOHB-style);
    ``--population`` to genetic, pbt and bayesian (CMA-ES's generation);
    ``--fidelity`` to pbt, asha, hyperband and auto, which may then pick ASHA
    over it): silently dropping one would run another search than the one the
    command line reads as. ``--algorithm auto`` plans for the trials ``--parallel``
    (or ``--slots`` / ranks per trial) runs at once. ``--search-set KEY=VALUE``
    sets any field of the spec's search block too, so a sweep can say
    everything a spec can. ``checkpoints``: the command saves to its checkpoint
    folder and carries on from the one it is handed (``--checkpoints``), which pbt,
    asha and hyperband need of it.
    """
    from nestor.search import continues_trials

    flags = {f.dest: f for f in search_flags()}
    unknown = sorted(set(options) - set(flags))
    if unknown:
        raise TypeError(f"build_spec() got unexpected keyword arguments {unknown}")
    if (trainer is None) == (command is None):
        raise ValueError("give exactly one of --trainer NAME or --command COMMAND")
    if not params:
        raise ValueError(f"give at least one --param ({PARAM_FORMS})")
    space = dict(parse_param(p) for p in params)
    for text in whens or []:
        child, parent, values = parse_when(text)
        if child not in space:
            raise ValueError(f"--when {text}: no --param declares {child!r}"
                             f" (declared: {', '.join(space)})")
        space[child].setdefault("when", {})[parent] = values
    fixed = dict(parse_setting(s) for s in settings)
    if command is not None:
        spec_trainer: dict[str, Any] = {"command": command}
        if result_pattern:
            spec_trainer["result_pattern"] = result_pattern
    else:
        spec_trainer = {"name": trainer}
    objective = sweep_objective(metric, mode, command=command is not None)
    if fixed:
        spec_trainer["settings"] = fixed
    if command is not None and checkpoints:
        spec_trainer["checkpoints"] = True
    elif command is not None and continues_trials(algorithm):
        raise ValueError(
            f"--algorithm {algorithm} continues trials from their checkpoints: the command must"
            " save to the folder NESTOR_CHECKPOINT_DIR names and load the one"
            " NESTOR_CONTINUE_FROM names (when set); give --checkpoints to say it does")
    elif checkpoints:
        raise ValueError("--checkpoints applies to --command: a built-in trainer always saves"
                         " checkpoints")
    search: dict[str, Any] = {"algorithm": algorithm, "seed": seed}
    if budget is not None:
        search["budget"] = budget
    if constraints:
        search["constraints"] = list(constraints)
    given = {dest: value for dest, value in options.items() if value is not None}
    misplaced = [f for dest, f in flags.items() if dest in given and algorithm not in f.owners]
    if misplaced:
        by_owners: dict[tuple[str, ...], list[str]] = {}
        for flag in misplaced:
            by_owners.setdefault(flag.owners, []).append(flag.flag)
        clauses = [
            f"{' and '.join(names)} {'applies' if len(names) == 1 else 'apply'} to --algorithm"
            f" {' or '.join(owners)}" for owners, names in by_owners.items()
        ]
        raise ValueError(f"{', '.join(clauses)}, not {algorithm}")
    sampler = given.get("sampler")
    if sampler is not None and algorithm in ("asha", "hyperband") and sampler != "tpe":
        raise ValueError(
            f"--sampler for --algorithm {algorithm} must be tpe (BOHB-style; leave it out for"
            f" random configurations), but got {sampler}"
        )
    for dest, flag in flags.items():
        if dest in given:
            value = given[dest]
            search[flag.field] = (parse_setting(f"{flag.field}={value}", flag.flag)[1]
                                  if flag.yaml and isinstance(value, str) else value)
    search.update(_search_settings(search_settings or [], search,
                                   {f.field: f.flag for f in flags.values()}))
    if algorithm == "auto":
        at_once = parallel if parallel is not None else slots // (dp * mp) if slots else None
        if at_once:
            search["parallel"] = at_once
    resources: dict[str, Any] = {}
    if slots is not None:
        resources["slots"] = slots
    elif parallel is not None:
        resources["slots"] = parallel * dp * mp
    spec: dict[str, Any] = {"name": name}
    if resources:
        spec["resources"] = resources
    spec["stages"] = [
        {
            "name": "sweep",
            "kind": "hpo",
            "trainer": spec_trainer,
            "parallel": {"data": dp, "model": mp},
            **({} if backend == "horovod" else {"backend": backend}),
            "search": search,
            "space": space,
            "objective": objective,
            **({} if keep_checkpoints is None else {"keep_checkpoints": keep_checkpoints}),
        }
    ]
    return spec


def spec_yaml(spec: dict[str, Any]) -> str:
    header = "# written by `nestor sweep`; run it again with `nestor run` on this file\n"
    return header + yaml.safe_dump(spec, sort_keys=False)
