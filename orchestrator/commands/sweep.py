"""`nestor sweep`: a one-stage HPO from command-line flags, no YAML to write.

The flags become an ordinary workflow spec (saved as the run's spec.yaml),
so a sweep is validated, journalled, resumed and tracked exactly like
`nestor run`. Urika-HPO-style use is a command and its parameters:

    nestor sweep --cmd "python3 fit.py" --param=-a=float:-1:1 --param n=int:1:8 \
                 --budget 40          # auto (the default) picks the search
    nestor sweep ... --algo genetic --population 8 --generations 4 --budget 2h

Searches that continue trials from checkpoints take the trainer setting their
budget sets (``--fidelity``, epochs by default) and their own schedule:

    nestor sweep --trainer cnn --param lr=float:1e-3:0.3:log --algo pbt \
                 --population 8 --interval 1 --intervals 6
    nestor sweep ... --algo pbt --explore pb2      # PB2: a GP bandit picks the numbers
    nestor sweep --trainer cnn --param lr=float:1e-3:0.3:log --algo hyperband \
                 --min-budget 1 --max-budget 9 --eta 3 --sampler tpe      # BOHB
"""

from __future__ import annotations

from typing import Any

import yaml

PARAM_FORMS = "NAME=float:LOW:HIGH[:log], NAME=int:LOW:HIGH[:log] or NAME=choice:A,B,..."

OPTION_OWNERS: dict[str, tuple[str, ...]] = {
    "sampler": ("bayesian", "asha", "hyperband"),
    "population": ("genetic", "pbt", "bayesian"),
    "generations": ("genetic",),
    "schedule": ("genetic",),
    "demes": ("genetic",),
    "interval": ("pbt",),
    "intervals": ("pbt",),
    "explore": ("pbt",),
    "min_budget": ("asha", "hyperband"),
    "max_budget": ("asha", "hyperband"),
    "reduction_factor": ("asha", "hyperband"),
    "fidelity": ("pbt", "asha", "hyperband", "auto"),
}
"""Which ``--algo`` each search option belongs to (the spec's field names)."""

FLAGS = {"min_budget": "--min-budget", "max_budget": "--max-budget",
         "reduction_factor": "--eta"}
"""Spec field -> its flag, where the two are spelled differently."""


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
    if kind == "choice":
        values = [yaml.safe_load(v) for v in body.split(",") if v != ""]
        if not values:
            raise ValueError(f"--param {name}: choice needs values A,B,..., but got none")
        return name, {"type": "categorical", "values": values}
    raise ValueError(
        f"--param {name}: the type must be float, int or choice, but got {kind!r}"
        f" ({PARAM_FORMS})"
    )


def parse_setting(text: str, flag: str = "--set") -> tuple[str, Any]:
    """``epochs=2`` -> ("epochs", 2): values read as YAML (numbers, booleans, lists)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"{flag} must look like KEY=VALUE, but got {text!r}")
    try:
        return key, yaml.safe_load(value) if value else ""
    except yaml.YAMLError:
        raise ValueError(f"{flag} {key}= must be a YAML value, but got {value!r}") from None


def _search_settings(texts: list[str], search: dict[str, Any]) -> dict[str, Any]:
    """``--search-set KEY=VALUE``: any field of the stage's ``search`` block that has
    no flag of its own (``quantile=0.5``, ``startup_trials=5``, ``mode=mu_plus_lambda``,
    ``perturbation_factors=[0.7,1.3]``); the spec's own validation names a field
    the algorithm does not have, or a value it does not allow."""
    extra: dict[str, Any] = {}
    for text in texts:
        key, value = parse_setting(text, "--search-set")
        if key == "algorithm":
            raise ValueError("--search-set cannot set algorithm: use --algo")
        if key in search or key in extra:
            flag = "--search-set" if key in extra else FLAGS.get(key, f"--{key}")
            raise ValueError(f"--search-set {key}= is given twice (also by {flag})")
        extra[key] = value
    return extra


def build_spec(
    *,
    trainer: str | None,
    command: str | None,
    params: list[str],
    settings: list[str],
    algorithm: str,
    budget: int | dict[str, float] | None,
    population: int | None,
    generations: int | None,
    metric: str | None,
    mode: str | None,
    fom_pattern: str | None,
    dp: int,
    mp: int,
    parallel: int | None,
    slots: int | None,
    seed: int,
    name: str = "sweep",
    sampler: str | None = None,
    schedule: str | None = None,
    demes: int | None = None,
    interval: float | None = None,
    intervals: int | None = None,
    explore: str | None = None,
    min_budget: float | None = None,
    max_budget: float | None = None,
    eta: int | None = None,
    fidelity: str | None = None,
    backend: str = "horovod",
    keep_checkpoints: int | None = None,
    search_settings: list[str] | None = None,
) -> dict[str, Any]:
    """The workflow spec (as data) that these sweep flags describe.

    Algorithm options must belong to the algorithm asked for (see
    :data:`OPTION_OWNERS`: ``--sampler`` to bayesian and, as tpe, to
    hyperband and asha (BOHB-style); ``--population`` to genetic, pbt and
    bayesian (CMA-ES's generation);
    ``--interval``, ``--intervals`` and ``--explore`` to pbt; ``--min-budget``,
    ``--max-budget`` and ``--eta`` to asha and hyperband; ``--fidelity`` to those
    three, and to auto, which may then pick Hyperband over it): silently
    dropping one would run another search than the one the command line reads
    as. ``--algo auto`` plans for the trials ``--parallel``
    (or ``--slots`` / ranks per trial) runs at once. ``--search-set KEY=VALUE``
    sets any other field of the spec's search block, so a sweep can say
    everything a spec can.
    """
    if (trainer is None) == (command is None):
        raise ValueError("give exactly one of --trainer NAME or --cmd COMMAND")
    if not params:
        raise ValueError(f"give at least one --param ({PARAM_FORMS})")
    space = dict(parse_param(p) for p in params)
    fixed = dict(parse_setting(s) for s in settings)
    if command is not None:
        spec_trainer: dict[str, Any] = {"command": command}
        if fom_pattern:
            spec_trainer["result_pattern"] = fom_pattern
        # Urika HPO's convention: a command prints a figure of merit to minimize.
        objective = {"metric": metric or "fom", "mode": mode or "min"}
    else:
        spec_trainer = {"name": trainer}
        objective = {"metric": metric or "val_accuracy", "mode": mode or "max"}
    if fixed:
        spec_trainer["settings"] = fixed
    search: dict[str, Any] = {"algorithm": algorithm, "seed": seed}
    if budget is not None:
        search["budget"] = budget
    options: dict[str, Any] = {
        "sampler": sampler, "population": population, "generations": generations,
        "schedule": schedule, "demes": demes, "interval": interval, "intervals": intervals,
        "explore": explore, "min_budget": min_budget, "max_budget": max_budget,
        "reduction_factor": eta, "fidelity": fidelity,
    }
    misplaced = [k for k, v in options.items() if v is not None
                 and algorithm not in OPTION_OWNERS[k]]
    if misplaced:
        by_owners: dict[tuple[str, ...], list[str]] = {}
        for key in misplaced:
            by_owners.setdefault(OPTION_OWNERS[key], []).append(FLAGS.get(key, f"--{key}"))
        clauses = [
            f"{' and '.join(flags)} {'applies' if len(flags) == 1 else 'apply'} to --algo"
            f" {' or '.join(owners)}" for owners, flags in by_owners.items()
        ]
        raise ValueError(f"{', '.join(clauses)}, not {algorithm}")
    if sampler is not None and algorithm in ("asha", "hyperband") and sampler != "tpe":
        raise ValueError(
            f"--sampler for --algo {algorithm} must be tpe (BOHB-style; leave it out for"
            f" random configurations), but got {sampler}"
        )
    search.update({k: v for k, v in options.items() if v is not None})
    search.update(_search_settings(search_settings or [], search))
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
