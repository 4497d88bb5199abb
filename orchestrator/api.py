"""nestor from Python: ``tune`` a function, ``run`` a spec, ``resume`` a run.

The same engine as the command line, by the same path (`nestor run`'s:
:func:`orchestrator.commands.execute.execute`): the run directory's lock, its
journal, its MLflow store and the progress bars are the CLI's, so a run started
here is looked at with `nestor ui RUN` and continued with `nestor resume RUN`, and
one started by the CLI is resumed here. ::

    import nestor

    def train(config, ctx):
        ...
        return {"val_accuracy": acc}

    result = nestor.tune(train, space={"lr": {"type": "float", "low": 1e-4, "high": 0.1,
                                              "log": True}},
                         metric="val_accuracy", mode="max", budget=20, parallel=2)
    result.best_config, result.best_value, result.run_dir
    result.dataframe()  # pandas, one row per trial

The space is the spec's own ``space:`` form. A function defined in a script's
``__main__`` or a notebook is shipped to Ray's workers by value (cloudpickle) and
kept in the run directory (``functions/``) for a resume. Every failure is a
:class:`NestorError` carrying the CLI's message.
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["NestorError", "Result", "resume", "run", "tune"]


class NestorError(Exception):
    """Anything that stops a run from Python, with the message the CLI prints
    (``problems``: one line each; ``run_dir``: the run it concerns, if any;
    ``result``: a finished run's :class:`Result` where a stage got no result)."""

    def __init__(self, problems: list[str], *, run_dir: Path | None = None,
                 result: Result | None = None) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
        self.run_dir = run_dir
        self.result = result


@dataclass
class Result:
    """A finished run: its stage's best configuration and value, every trial, and
    where it lies (``run_dir``: `nestor ui`, `nestor results`, `nestor resume`)."""

    run_dir: Path
    stage: str
    best_config: dict[str, Any] | None
    best_value: Any
    trials: list[dict[str, Any]]
    results: dict[str, Any] = field(repr=False)

    def dataframe(self) -> Any:
        """The trials as a pandas DataFrame (one row each: trial, status, value, the
        parameters, reason)."""
        import pandas as pd

        return pd.DataFrame(self.trials)


def _rows(stage: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for trial in stage.get("trials") or []:
        row: dict[str, Any] = {"trial": trial.get("id"), "status": trial.get("status"),
                               "value": trial.get("value")}
        for name, value in (trial.get("config") or {}).items():
            row[name if name not in row else f"config.{name}"] = value
        row["reason"] = trial.get("reason")
        rows.append(row)
    return rows


def _result(run_dir: Path, results: dict[str, Any], stage: str | None) -> Result:
    stages = results["stages"]
    chosen = next((s for s in stages if s["name"] == stage), None) if stage else None
    if chosen is None:  # the last hpo stage, else the last stage
        from nestor.orchestrator.projections.kinds import report_of

        chosen = next((s for s in reversed(stages) if report_of(s).searched), stages[-1])
    best = chosen.get("best") or {}
    return Result(run_dir=Path(run_dir), stage=chosen["name"], best_config=best.get("config"),
                  best_value=best.get("value"), trials=_rows(chosen), results=results)


def _function_name(fn: Callable[..., Any]) -> tuple[str, bytes | None]:
    """The trainer's ``module:function`` name, and its pickled bytes where no worker
    could import it by that name (``__main__``, a notebook, a nested function)."""
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise NestorError([f"train must be a named function, but got {fn!r}"])
    if module and module != "__main__" and getattr(fn, "__qualname__", name) == name:
        with contextlib.suppress(ImportError):
            if getattr(importlib.import_module(module), name, None) is fn:
                return f"{module}:{name}", None
    import cloudpickle  # Ray's own: it pickles a __main__ function by value

    return f"__main__:{name}", cloudpickle.dumps(fn)


def _trainer(train: Any, settings: Mapping[str, Any] | None
             ) -> tuple[dict[str, Any], dict[str, bytes]]:
    """A spec's trainer from a function, ``"module:function"``, a built-in's name or a
    trainer mapping; and the functions to ship by value."""
    code: dict[str, bytes] = {}
    if callable(train):
        name, blob = _function_name(train)
        trainer: dict[str, Any] = {"function": name}
        if blob is not None:
            code[name] = blob
    elif isinstance(train, str):
        trainer = {"function": train} if ":" in train else {"name": train}
    elif isinstance(train, Mapping):
        trainer = dict(train)
        if callable(trainer.get("function")):
            name, blob = _function_name(trainer["function"])
            trainer["function"] = name
            if blob is not None:
                code[name] = blob
    else:
        raise NestorError([f"train must be a function, 'module:function', a built-in"
                           f" trainer's name or a trainer mapping, but got {train!r}"])
    if settings:
        trainer["settings"] = {**trainer.get("settings", {}), **dict(settings)}
    return trainer, code


def _constraint_rules(rules: Sequence[Any], code: dict[str, bytes]) -> list[Any]:
    """``constraints=`` as the spec's ``search.constraints``: an expression string as it
    is; a callable as ``{function: "module:name"}`` where its module imports it by that
    name, else (a lambda, a function of ``__main__`` or a notebook) shipped by value
    into the run directory like a trainer, as ``__main__:NAME`` (``constraint_I`` for
    a lambda), and evaluated on the driver, where the search asks."""
    if isinstance(rules, str) or callable(rules):
        rules = [rules]
    out: list[Any] = []
    for index, rule in enumerate(rules):
        if isinstance(rule, str) or not callable(rule):
            out.append(rule)  # the spec reports anything else, as for a YAML value
            continue
        name = getattr(rule, "__name__", "")
        if not (isinstance(name, str) and name.isidentifier()):  # a lambda, a partial
            rule_name = f"__main__:constraint_{index}"
            import cloudpickle

            code[rule_name] = cloudpickle.dumps(rule)
        else:
            rule_name, blob = _function_name(rule)
            if blob is not None:
                code[rule_name] = blob
        from nestor.orchestrator.spec.shipped_rules import register

        register(rule_name, rule)  # the spec's checks may call it before the run registers
        out.append({"function": rule_name})
    return out


def _shipped_in(spec: dict[str, Any]) -> dict[str, bytes]:
    """A spec dict's trainers given as functions: named, and their code to ship."""
    code: dict[str, bytes] = {}
    for stage in spec.get("stages") or []:
        if isinstance(stage, dict) and isinstance(stage.get("trainer"), Mapping):
            trainer, shipped = _trainer(stage["trainer"], None)
            stage["trainer"] = trainer
            code.update(shipped)
    return code


@contextlib.contextmanager
def _signals_kept() -> Iterator[None]:
    """The run turns Ctrl-C into a clean stop as the CLI does; the caller's handlers
    (a notebook's) are put back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
    previous = {signum: signal.getsignal(signum) for signum in signals}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _execute(spec: Path | None, *, run_dir: Path | None, resume: bool = False,
             spec_text: str | None = None, reopen: dict[str, Any] | None = None,
             code: dict[str, bytes] | None = None, slots: int | None = None,
             address: str | None = None, quiet: bool = False, stage: str | None = None,
             verbose: bool = False) -> Result:
    from nestor.orchestrator.commands.console import console, private_files
    from nestor.orchestrator.commands.execute import RunFailed, execute, stages_without_result

    if quiet and verbose:
        raise NestorError(["give at most one of quiet=True and verbose=True"])
    try:
        with private_files(), _signals_kept():
            done_dir, results = execute(spec, run_dir=run_dir, resume=resume, slots=slots,
                                        address=address, err=console(stderr=True),
                                        spec_text=spec_text, reopen=reopen, function_code=code,
                                        verbosity=-1 if quiet else 1 if verbose else 0)
    except RunFailed as exc:
        raise NestorError(exc.problems, run_dir=exc.run_dir) from None
    result = _result(done_dir, results, stage)
    empty = stages_without_result(results, done_dir)
    if empty:
        raise NestorError(empty, run_dir=done_dir, result=result)
    return result


def tune(train: Any, space: Mapping[str, Any], *, metric: str = "val_accuracy",
         mode: str | None = None, budget: int | str | Mapping[str, float] | None = 20,
         parallel: int | None = None, algorithm: str = "auto",
         search: Mapping[str, Any] | None = None, settings: Mapping[str, Any] | None = None,
         name: str = "tune", run_dir: str | Path | None = None, seed: int = 0,
         slots: int | None = None, address: str | None = None, quiet: bool = False,
         verbose: bool = False, wall: str | None = None,
         constraints: Sequence[str | Callable[[dict[str, Any]], Any]] | None = None) -> Result:
    """Search ``space`` (the spec's ``space:`` form) for the best ``metric`` of
    ``train``: a function ``train(config, ctx)`` returning its metrics, a
    ``"module:function"``, a built-in trainer's name or a spec trainer mapping.

    ``mode``: "max" or "min" (required but for val_accuracy); ``budget``: trials (or a
    cost, as in a spec); ``wall``: a wall-clock limit beside it ("90s", "30m", "2h";
    whichever comes first: ``budget=None`` for the wall clock alone); ``parallel``:
    trials at once; ``algorithm`` and ``search``:
    the spec's ``search:`` block (``warm_start``, ``enqueue`` and each algorithm's
    settings); ``settings``: the trainer's fixed settings; ``constraints``: rules every
    configuration must meet, expressions (``"lr * batch_size <= 8"``) or callables
    given the configuration (its active parameters) and returning true where it is
    allowed (``lambda c: c["a"] < c["b"]``), called on this process (the driver), never
    on a worker; ``quiet``/``verbose``: the CLI's ``-q``/``-v``. It runs as a one-stage
    spec (saved in the run directory as spec.yaml) on a local Ray cluster, or the
    one at ``address``. Returns the :class:`Result`; raises :class:`NestorError`."""
    import yaml

    trainer, code = _trainer(train, settings)
    if mode is None:
        if metric != "val_accuracy":
            raise NestorError([f"mode is required: is {metric} better higher (mode='max') or"
                               " lower (mode='min')? Only val_accuracy defaults to max"])
        mode = "max"
    block: dict[str, Any] = {"algorithm": algorithm, "seed": seed}
    if wall is not None:
        from nestor.orchestrator.spec.budget import with_wall

        try:
            budget = with_wall(budget, wall)
        except ValueError as exc:
            raise NestorError([str(exc)]) from None
    if budget is not None:
        block["budget"] = dict(budget) if isinstance(budget, Mapping) else budget
    block.update(dict(search or {}))
    if constraints is not None:
        block["constraints"] = [*block.get("constraints", []),
                                *_constraint_rules(constraints, code)]
    if parallel is not None and block["algorithm"] == "auto":
        block.setdefault("parallel", parallel)
    stage = {"name": "tune", "kind": "hpo", "trainer": trainer,
             "objective": {"metric": metric, "mode": mode},
             "space": {k: dict(v) if isinstance(v, Mapping) else v for k, v in space.items()},
             "search": block}
    spec: dict[str, Any] = {"name": name, "stages": [stage]}
    if slots or parallel:
        spec["resources"] = {"slots": slots or parallel}
    text = "# written by nestor.tune; run it again with `nestor run` on this file\n" + \
        yaml.safe_dump(spec, sort_keys=False)
    return _execute(None, run_dir=_new_dir(run_dir, name), spec_text=text, code=code,
                    address=address, quiet=quiet, verbose=verbose, stage="tune")


def _new_dir(run_dir: str | Path | None, name: str) -> Path:
    from nestor.orchestrator.engine.workflow import new_run_dir

    return Path(run_dir) if run_dir is not None else new_run_dir(Path("runs"), name)


def run(spec: str | Path | Mapping[str, Any], *, run_dir: str | Path | None = None,
        slots: int | None = None, address: str | None = None, stage: str | None = None,
        quiet: bool = False, verbose: bool = False) -> Result:
    """Run a workflow spec: a YAML file's path, or the spec as a dict (whose trainers
    may be given as functions: ``{"function": train}``). ``stage``: the stage whose
    best the Result gives (default: the last hpo stage, else the last)."""
    if isinstance(spec, Mapping):
        import copy

        import yaml

        data = copy.deepcopy(dict(spec))
        code = _shipped_in(data)
        text = "# written by nestor.run; run it again with `nestor run` on this file\n" + \
            yaml.safe_dump(data, sort_keys=False)
        name = str(data.get("name") or "run")
        return _execute(None, run_dir=_new_dir(run_dir, name), spec_text=text, code=code,
                        slots=slots, address=address, quiet=quiet, verbose=verbose,
                        stage=stage)
    return _execute(Path(spec), run_dir=Path(run_dir) if run_dir else None, slots=slots,
                    address=address, quiet=quiet, verbose=verbose, stage=stage)


def resume(run_dir: str | Path, *, budget: int | None = None, stage: str | None = None,
           retry: bool = False, train: Callable[..., Any] | None = None,
           slots: int | None = None, address: str | None = None, quiet: bool = False,
           verbose: bool = False) -> Result:
    """Go on with a run (`nestor resume`'s ``--budget``, ``--stage`` and ``--retry``):
    an interrupted one is finished, a search extended to ``budget`` trials, failed
    planned stages run again. ``train``: the ``__main__`` function again, to ship
    as it is now (by default, the one the run directory keeps)."""
    code: dict[str, bytes] = {}
    if train is not None:
        name, blob = _function_name(train)
        if blob is not None:
            code[name] = blob
    reopen = {"budget": budget, "stage": stage, "retry": retry} if budget or retry else None
    return _execute(None, run_dir=Path(run_dir), resume=True, reopen=reopen, code=code,
                    slots=slots, address=address, quiet=quiet, verbose=verbose, stage=stage)
