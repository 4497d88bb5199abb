"""The `nestor` command.

Heavy packages (torch, Ray, MLflow) are imported inside the commands that
need them, so `nestor --help` and `nestor validate` answer at once.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from nestor.orchestrator import __version__
from nestor.orchestrator.commands.console import (
    EXIT_NO_RESULT,
    EXIT_SPEC_ERROR,
    console,
    print_errors,
    private_files,
    run_status,
    verbosity,
    verbosity_options,
)

TRIALS_SHOWN = 20  # `nestor results` lists the best 20 trials a stage; the CSV every one


COMMANDS_ENTRY_POINTS = "nestor.commands"
"""The entry-point group of commands that live outside nestor: each names a click
command, which `nestor NAME` runs and `nestor --help` lists beside the built-in ones."""


class _Nestor(click.Group):
    """`nestor`: the commands defined here, and those other packages declare under the
    ``nestor.commands`` entry point (read only when a name is not a built-in one, or
    when the commands are listed, so a built-in command starts no slower)."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        return found if found is not None else _plugin_commands().get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_plugin_commands()})


def _plugin_commands() -> dict[str, click.Command]:
    from importlib.metadata import entry_points

    return {point.name: point.load() for point in entry_points(group=COMMANDS_ENTRY_POINTS)}


@click.group(cls=_Nestor,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "-V", "--version", prog_name="nestor")
def cli() -> None:
    """nestor tunes and orchestrates deep-learning workflows on HPC allocations.

    A workflow is a YAML spec of stages (hpo, ensemble, transfer, train). Ray
    schedules each stage's trials on the allocation's slots, and each trial is
    itself a Horovod job of data-parallel x model-parallel ranks.

    \b
    Start with:
      nestor validate configs/mnist-combined.yaml   check a spec, see its plan
      nestor trainers                                built-in trainers and datasets
    """


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--slots",
    type=click.IntRange(min=1),
    help="Plan for this many slots when the spec gives no resources.slots"
    " (default: this machine's CPUs).",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only errors.")
def validate(files: tuple[Path, ...], slots: int | None, quiet: bool) -> None:
    """Check workflow specs and print the plan of each.

    FILES are YAML specs or directories of them. For each valid spec this
    prints its stages in the order they run, the trials planned per stage,
    the slots (ranks) per trial and how many trials fit at once. Every
    problem is reported with file, line, field and what is allowed; the exit
    status is 2 if any spec is invalid.
    """
    from nestor.orchestrator.commands.summary import render_plan
    from nestor.orchestrator.spec import SpecError, load_spec, spec_files

    out = console()
    err = console(stderr=True)
    failed = 0
    for path in spec_files(list(files)):
        try:
            workflow = load_spec(path)
        except SpecError as exc:
            failed += 1
            print_errors(err, exc.problems)
            continue
        if not quiet:
            render_plan(out, str(path), workflow, slots)
    if failed:
        err.print(f"{failed} invalid spec(s)")
        sys.exit(EXIT_SPEC_ERROR)


@cli.command()
@click.argument("spec", type=click.Path(path_type=Path))
@click.option("--slots", type=click.IntRange(min=1),
              help="The allocation's slots (default: resources.slots, else this machine's CPUs).")
@click.option("--stage", metavar="NAME", help="The stage to plan (default: the first planned one).")
@click.option("--profile", "do_profile", is_flag=True,
              help="Profile the trainer on this machine if no cached profile exists.")
@click.option("--measure", is_flag=True,
              help="Also run the shapes that fit this machine and show measured speed-ups"
              " (profiles first if needed; minutes).")
@click.option("--random-runs", type=click.IntRange(min=1),
              help="Runs random search needs for the same goal (default: the stage's runs).")
@click.option("--simulate", is_flag=True,
              help="Also run each row on a simulated cluster of these slots (8 per node) and"
              " show its times beside the predicted ones (seconds).")
def plan(spec: Path, slots: int | None, stage: str | None, do_profile: bool, measure: bool,
         random_runs: int | None, simulate: bool) -> None:
    """Show how a stage's slots would be split: trials at once x data x model parallel.

    Prints the cost model (fitted to a profile of the stage's trainer on this
    machine, or the unmeasured prior), its error on each profiled shape, the
    plan `parallel: auto` would choose and why, and the seed's combined table
    (random search, DP+MP, HPO, HPO+MP, HPO+DP, HPO+DP+MP) with predicted times
    and speed-ups; with --simulate, each row run by nestor's scheduler on a simulated
    cluster of the slots, and how much faster auto's pick is than each row; with
    --measure, measured ones beside them.
    """
    from nestor.orchestrator.planning import NoFeasibleShape, ProfileError
    from nestor.orchestrator.planning.report import render
    from nestor.orchestrator.spec import SpecError, default_slots, load_spec

    err = console(stderr=True)
    simulator = None
    if simulate:
        from nestor.orchestrator.commands.plan_simulation import row_simulator as simulator
    try:
        workflow = load_spec(spec)
        render(console(), workflow, stage=stage,
               slots=slots or workflow.resources.slots or default_slots(), measure=measure,
               do_profile=do_profile, random_runs=random_runs, simulator=simulator)
    except SpecError as exc:
        print_errors(err, exc.problems)
        sys.exit(EXIT_SPEC_ERROR)
    except (NoFeasibleShape, ProfileError, ValueError) as exc:
        print_errors(err, [exc])
        sys.exit(EXIT_SPEC_ERROR)


def _run_options(fn):  # shared by run, resume and sweep
    fn = verbosity_options(fn)
    fn = click.option("--slots", type=click.IntRange(min=1),
                      help="Slots to use when the spec gives no resources.slots"
                      " (default: all CPUs of the Ray cluster).")(fn)
    fn = click.option("--address", metavar="ADDR",
                      help="Join this Ray cluster (as `nestor submit` does) instead of"
                      " starting a local one.")(fn)
    return fn


@cli.command()
@click.argument("spec", type=click.Path(path_type=Path))
@click.option("--run-dir", type=click.Path(path_type=Path),
              help="Where results go (default: runs/NAME-TIMESTAMP).")
@click.option("--resume", is_flag=True,
              help="Continue the run in --run-dir instead of starting a new one.")
@_run_options
def run(spec: Path, run_dir: Path | None, resume: bool, slots: int | None,
        address: str | None, quiet: bool, verbose: bool) -> None:
    """Run a workflow spec: every stage, its trials on Ray, each trial a Horovod job.

    Results go to a self-contained run directory: the spec, an fsynced journal
    of every trial event, searcher state, checkpoints, logs, plots,
    results.json and the MLflow store (`nestor ui RUNDIR` shows it). If the
    driver is killed, `nestor resume RUNDIR` finishes the workflow without
    re-running finished trials. With --resume, SPEC must be the run's own spec, or
    differ only in one hpo stage's larger search.budget (the search is extended).
    """
    _run(spec, run_dir, resume, slots, address, talk=verbosity(quiet, verbose))


class Names(click.Choice):
    """A choice among a plug-in family's names, read from its registry when first
    needed, so `nestor --help` imports no searcher and every name listed is one that
    is registered (search/_registry.py, trainers/comm.py)."""

    def __init__(self, names: Any) -> None:  # a function returning the names
        self._names = names
        self.case_sensitive = True

    @property
    def choices(self) -> Any:
        return tuple(self._names())

    @choices.setter
    def choices(self, names: Any) -> None:  # fixed names, as click.Choice takes them
        fixed = tuple(names)
        self._names = lambda: fixed


def _algorithm_names() -> tuple[str, ...]:
    from nestor.orchestrator.spec.model import ALGORITHMS

    return ALGORITHMS


def _comm_names() -> tuple[str, ...]:
    from nestor.trainers.comm import backend_names

    return backend_names()


def _continuing() -> list[str]:
    """The algorithms whose trials continue earlier trials' checkpoints (their trait)."""
    from nestor.search import continues_trials

    return [a for a in _algorithm_names() if a != "auto" and continues_trials(a)]


def _and(names: list[str]) -> str:
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def _algorithm_help() -> str:
    return ("auto (the default) picks one from the space, the budget and the trials"
            f" at once, and says what and why as the run starts. {_and(_continuing())}"
            " train trials in stretches of --fidelity and continue them from their"
            " checkpoints (weights and optimizer state), so no epoch is paid twice.")


def _budget_help() -> str:
    return (f"Most trials to run (40; {', '.join(_continuing())}: each interval or"
            " promotion, continuing a checkpoint, is a trial of its own), or a cost the"
            " search spends until the next trial cannot fit: slot-hours (30slot-h; 30h, the"
            " older spelling, still means slot-hours), slot-seconds (600slot-s) or epochs of"
            " the --fidelity setting (300epochs).")


def _checkpoints_help() -> str:
    return ("--command: the command saves its model to the folder NESTOR_CHECKPOINT_DIR"
            " names and, when NESTOR_CONTINUE_FROM names one, starts from it;"
            f" {_and(_continuing())} need this.")


def _backend_help() -> str:
    from nestor.trainers.comm import BACKENDS

    said = "; ".join(f"{name}: {comm.about}" for name, comm in BACKENDS.items())
    return (f"What a trial's ranks communicate over ({said}). Matters when --dp or --mp"
            " is above 1.")


class _SweepCommand(click.Command):
    """`nestor sweep`, whose search flags come from the searchers' declared settings
    (:func:`orchestrator.commands.sweep.search_options`). They are added when the
    command is first used, so `nestor --help` does not import the searchers."""

    _derived = False

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if not self._derived:
            from nestor.orchestrator.commands.sweep import search_options

            at = next(i for i, p in enumerate(self.params) if p.name == "search_settings")
            self.params[at:at] = search_options()
            helps = {"algorithm": _algorithm_help, "backend": _backend_help,
                     "budget": _budget_help, "checkpoints": _checkpoints_help}
            for param in self.params:  # texts that list a registry's names
                if isinstance(param, click.Option) and param.name in helps:
                    param.help = helps[param.name]()
            self._derived = True
        return super().get_params(ctx)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Deprecated flags (``--algo``, ``--eta``...) read as their names now, noticed."""
        from nestor.orchestrator.commands.sweep import renamed_args

        return super().parse_args(ctx, renamed_args(args))

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The common options, then each algorithm's settings under its own heading
        (settings several algorithms share under one naming them all)."""
        from nestor.orchestrator.commands.sweep import search_flags
        from nestor.orchestrator.spec.model import ALGORITHMS

        owners = {f.dest: f.owners for f in search_flags()}
        common: list[tuple[str, str]] = []
        groups: dict[tuple[str, ...], list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                key = owners.get(param.name or "")
                (common if key is None else groups.setdefault(key, [])).append(record)
        with formatter.section("Options"):
            formatter.write_dl(common)
        for key in sorted(groups, key=lambda k: (len(k) > 1, ALGORITHMS.index(k[0]), k)):
            title = (f"{key[0]} settings (--algorithm {key[0]})" if len(key) == 1 else
                     "Settings of every --algorithm" if set(key) == set(ALGORITHMS) else
                     f"Settings of --algorithm {', '.join(key)}")
            with formatter.section(title):
                formatter.write_dl(groups[key])


@cli.command(cls=_SweepCommand)
@click.option("--trainer", metavar="NAME", help="A built-in trainer (see `nestor trainers`).")
@click.option("--command", "command", metavar="COMMAND",
              help="A program run per trial with --NAME=VALUE flags (never through a shell);"
              " it prints its result as 'FoM: <number>'.")
@click.option("--param", "params", multiple=True, metavar="SPEC",
              help="A searched parameter: NAME=float:LOW:HIGH[:log], NAME=int:LOW:HIGH[:log]"
              " or NAME=categorical:A,B,C. Repeat for each. Names may start with dashes:"
              " --param=-a=float:-1:1 passes -a=VALUE.")
@click.option("--when", "whens", multiple=True, metavar="NAME:PARENT=V[,V]",
              help="NAME exists only when PARENT takes one of these values, e.g."
              " --when momentum:optimizer=sgd (repeat for another parent: all must hold).")
@click.option("--constraint", "constraints", multiple=True, metavar="EXPR",
              help="An expression every configuration must meet, e.g."
              " --constraint 'lr * batch_size <= 8'. Repeat for each.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="A fixed trainer setting, e.g. --set dataset=mnist5k --set epochs=2.")
@click.option("--algorithm", "algorithm", type=Names(_algorithm_names),
              default="auto", show_default=True)  # help: _SweepCommand.get_params
@click.option("--budget", metavar="AMOUNT")  # help: _SweepCommand.get_params
@click.option("--wall", metavar="DURATION",
              help="A wall-clock limit beside --budget (whichever comes first): 90s, 30m,"
              " 2h. No trial starts that could not finish by it (judged by the median of"
              " the trials finished so far); at it the running trials are stopped and the"
              " sweep ends, exit 0. A resumed sweep counts the time already spent.")
@click.option("--search-set", "search_settings", multiple=True, metavar="KEY=VALUE",
              help="A setting of the spec's search block by its name (each has its flag"
              " too), value read as YAML; repeat for each: --search-set quantile=0.5 (pbt),"
              " --search-set"
              " startup_trials=5 (bayesian), --search-set replacement=mu_plus_lambda (genetic),"
              " --search-set iterations=2 (hyperband); the README's spec table lists each"
              " algorithm's.")
@click.option("--keep-checkpoints", type=click.IntRange(min=1), metavar="N",
              help="Keep the N best trials' checkpoints and those the search may still"
              " continue from (PBT's donors, promotable trials); remove the rest as the"
              " search goes (default: keep all).")
@click.option("--checkpoints", is_flag=True)  # help: _SweepCommand.get_params
@click.option("--metric", help="Metric to optimize (default: val_accuracy; fom, the number"
              " a --command prints, for --command).")
@click.option("--mode", type=click.Choice(["min", "max"]),
              help="Direction: max (higher is better) or min (lower is better). Required for"
              " every metric but val_accuracy (max), as in a spec, so --command needs it.")
@click.option("--result-pattern", metavar="REGEX",
              help=r"Regex whose group 1 is a command's result (default 'FoM: (\S+)').")
@click.option("--dp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Data-parallel ranks per trial.")
@click.option("--mp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Model-parallel ranks per trial.")
@click.option("--backend", type=Names(_comm_names), default="horovod",
              show_default=True)  # help: _SweepCommand.get_params
@click.option("--parallel", type=click.IntRange(min=1),
              help="Trials at once (uses parallel x dp x mp slots).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--run-dir", type=click.Path(path_type=Path),
              help="Where results go (default: runs/sweep-TIMESTAMP).")
@_run_options
def sweep(trainer: str | None, command: str | None, params: tuple[str, ...],
          whens: tuple[str, ...], constraints: tuple[str, ...], settings: tuple[str, ...],
          algorithm: str, budget: str | None, wall: str | None,
          keep_checkpoints: int | None, search_settings: tuple[str, ...], checkpoints: bool,
          metric: str | None,
          mode: str | None, result_pattern: str | None, dp: int, mp: int, backend: str,
          parallel: int | None, seed: int, run_dir: Path | None, slots: int | None,
          address: str | None, quiet: bool, verbose: bool, **search_options: Any) -> None:
    """Run a one-stage HPO sweep from flags, without writing a spec.

    \b
    nestor sweep --trainer cnn --set dataset=mnist5k --set epochs=1 --dp 2 \\
        --param lr=float:1e-3:0.2:log --param batch_size=int:32:128:log --budget 8
        [--backend torch]
    nestor sweep --command "python3 fit.py" --mode min --param=-a=float:-1:1 --algorithm bayesian \\
        --budget 20
    nestor sweep --trainer cnn --param lr=float:1e-3:0.3:log --algorithm pbt \\
        --population 8 --interval 1 --intervals 6 --parallel 2 [--explore pb2]
    nestor sweep --trainer cnn --param lr=float:1e-3:0.3:log --algorithm hyperband \\
        --min-budget 1 --max-budget 9 --reduction-factor 3 --sampler tpe --parallel 2

    An option of another --algorithm than the one asked for is an error, not
    ignored. The flags become a spec, saved in the run directory as spec.yaml, so the
    sweep can be resumed and rerun like any workflow.
    """
    from nestor.orchestrator.commands.sweep import build_spec, spec_yaml
    from nestor.orchestrator.engine.workflow import new_run_dir
    from nestor.orchestrator.spec import SpecError, load_spec_text
    from nestor.orchestrator.spec.budget import with_wall
    from nestor.search import parse_budget_text

    err = console(stderr=True)
    talk = verbosity(quiet, verbose)
    try:
        amount = with_wall(None if budget is None else parse_budget_text(budget), wall)
        text = spec_yaml(build_spec(
            trainer=trainer, command=command, params=list(params), settings=list(settings),
            algorithm=algorithm, budget=amount, metric=metric, mode=mode,
            result_pattern=result_pattern, dp=dp, mp=mp, backend=backend, parallel=parallel,
            slots=slots, seed=seed, keep_checkpoints=keep_checkpoints,
            search_settings=list(search_settings), checkpoints=checkpoints,
            whens=list(whens), constraints=list(constraints), **search_options,
        ))
        load_spec_text(text, "<nestor sweep>")
    except ValueError as exc:
        print_errors(err, [exc])
        sys.exit(EXIT_SPEC_ERROR)
    except SpecError as exc:
        print_errors(err, exc.problems)
        sys.exit(EXIT_SPEC_ERROR)
    # The spec is written into the run directory (as spec.yaml) only once it is
    # known to be new and locked: a refused sweep writes nothing.
    _run(None, run_dir or new_run_dir(Path("runs"), "sweep"), False, None, address,
         spec_text=text, talk=talk)


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--budget", type=click.IntRange(min=1), metavar="N",
              help="Extend a search, finished or not, to N trials in all: the same search"
              " goes on, its state restored, N minus those run so far added.")
@click.option("--stage", metavar="NAME",
              help="The hpo stage --budget extends (default: the workflow's one hpo stage).")
@click.option("--retry", is_flag=True,
              help="Run the failed trials of finished train, ensemble and transfer stages"
              " again, and the stages after them; the stages before are kept.")
@_run_options
def resume(run_dir: Path, budget: int | None, stage: str | None, retry: bool,
           slots: int | None, address: str | None, quiet: bool, verbose: bool) -> None:
    """Finish an interrupted workflow run from its journal, or go on with a finished one.

    Finished trials are not run again; trials that were running when the
    driver stopped are run again. Their MLflow runs are continued, not copied.
    --budget extends a search and --retry runs failed stages again; what cannot
    be honoured is refused before anything runs.
    """
    if stage is not None and budget is None:
        print_errors(console(stderr=True), ["--stage names the stage --budget extends:"
                                            " give --budget N too"])
        sys.exit(EXIT_SPEC_ERROR)
    reopen = {"budget": budget, "stage": stage, "retry": retry} if budget or retry else None
    _run(None, run_dir, True, slots, address, reopen=reopen, talk=verbosity(quiet, verbose))


def _run(spec: Path | None, run_dir: Path | None, resume: bool, slots: int | None,
         address: str | None, spec_text: str | None = None,
         reopen: dict[str, Any] | None = None, talk: int = 0) -> None:
    with private_files():
        _run_privately(spec, run_dir, resume, slots, address, spec_text, reopen, talk)


def _run_privately(spec: Path | None, run_dir: Path | None, resume: bool, slots: int | None,
                   address: str | None, spec_text: str | None,
                   reopen: dict[str, Any] | None = None, talk: int = 0) -> None:
    from nestor.orchestrator.commands.execute import RunFailed, execute, stages_without_result
    from nestor.orchestrator.projections.results import render_results

    out = console()
    err = console(stderr=True)
    printed: list[Path] = []

    def show(run_dir: Path, results: dict[str, Any]) -> None:
        """The results, at once: before Ray's shutdown and MLflow's catching up."""
        render_results(out, results)
        out.print(f"run directory: {run_dir}")
        printed.append(run_dir)

    try:
        run_dir, results = execute(spec, run_dir=run_dir, resume=resume, slots=slots,
                                   address=address, err=err, spec_text=spec_text,
                                   reopen=reopen, on_results=show, verbosity=talk)
    except RunFailed as exc:
        if exc.errors:
            print_errors(err, exc.problems)
        else:
            for line in exc.problems:
                err.print(line, soft_wrap=True)
        sys.exit(exc.code)
    if not printed:
        render_results(out, results)
        out.print(f"run directory: {run_dir}")
    empty = stages_without_result(results, run_dir)
    if empty:
        print_errors(console(stderr=True), empty)
        sys.exit(EXIT_NO_RESULT)


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table",
              show_default=True, help="table for people; json or csv for programs.")
@click.option("--trials", "shown", type=click.IntRange(min=0), default=TRIALS_SHOWN,
              show_default=True, metavar="N",
              help="Trials listed per stage in the table, best first (0: all).")
def results(run_dir: Path, fmt: str, shown: int) -> None:
    """Show the results of a finished run: what each stage produced (its validation
    value and test accuracy, against its baseline), what it cost, and its trials,
    best first, with their status and why any failed (the CSV has every trial and
    its reason)."""
    from nestor.orchestrator.journal.journal import DamagedRun
    from nestor.orchestrator.projections.results import (
        load_results,
        render_results,
        render_trials,
        with_products,
        write_csv,
    )

    try:
        data = load_results(run_dir, lazy=fmt == "table")  # the tables: trials when read
    except (FileNotFoundError, DamagedRun) as exc:
        print_errors(console(stderr=True), [exc])
        sys.exit(EXIT_SPEC_ERROR)
    if fmt == "json":
        import json

        click.echo(json.dumps(with_products(data), indent=2))
    elif fmt == "csv":
        write_csv(data, sys.stdout)
    else:
        render_results(console(), data)
        render_trials(console(), data, shown)


def _finished_stages(run_dir: Path, stage: str | None, lazy: bool = False) -> dict[str, Any]:
    """The run's results, narrowed to ``stage`` when named; a clear error (exit 2) for a
    damaged run or a stage it does not have."""
    from nestor.orchestrator.journal.journal import DamagedRun
    from nestor.orchestrator.projections.results import load_results

    try:
        data = load_results(run_dir, lazy=lazy)
    except (FileNotFoundError, DamagedRun) as exc:
        print_errors(console(stderr=True), [exc])
        sys.exit(EXIT_SPEC_ERROR)
    if stage is not None:
        names = [s["name"] for s in data["stages"]]
        if stage not in names:
            console(stderr=True).print(f"error: {run_dir} has no stage {stage!r}; its stages:"
                                       f" {', '.join(names) or 'none yet'}", soft_wrap=True)
            sys.exit(EXIT_SPEC_ERROR)
        data = {**data, "stages": [s for s in data["stages"] if s["name"] == stage]}
    return data


STAGE_OPTION = click.option("--stage", default=None, metavar="NAME",
                            help="Only this stage (default: every stage).")


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@STAGE_OPTION
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="table for people; json for programs.")
def best(run_dir: Path, stage: str | None, fmt: str) -> None:
    """The best trial of each search stage: its id, value (with the direction), test
    accuracy, configuration and checkpoint; with several objectives, the Pareto front
    (the trials no other beats in every objective)."""
    from nestor.orchestrator.projections.explain import goals, pareto_trials
    from nestor.orchestrator.projections.kinds import report_of

    data = _finished_stages(run_dir, stage)
    found = []
    for s in data["stages"]:
        if not report_of(s).searched:
            continue
        objectives = [{"metric": g.metric, "mode": g.mode} for g in goals(s)]
        found.append({"stage": s["name"], "objectives": objectives, "best": s.get("best"),
                      "pareto_front": pareto_trials(s) if len(objectives) > 1 else []})
    if fmt == "json":
        import json

        click.echo(json.dumps(found, indent=2))
        return
    out = console()
    if not found:
        out.print(f"{run_dir} has no search stage (hpo) to take a best trial from")
        return
    for entry in found:
        label = ", ".join(f"{o['metric']} ({o['mode']})" for o in entry["objectives"])
        top = entry["best"]
        if not top:
            out.print(f"stage {entry['stage']}: no completed trial", soft_wrap=True)
            continue
        config = ", ".join(f"{k}={v}" for k, v in (top.get("config") or {}).items())
        out.print(f"stage {entry['stage']}: best trial {top['id']}, {label} = {top['value']}"
                  + (f", test accuracy {top['test_value']}" if top.get("test_value")
                     is not None else ""), soft_wrap=True)
        out.print(f"  config: {config or '-'}", soft_wrap=True)
        if top.get("checkpoint"):
            out.print(f"  checkpoint: {top['checkpoint']}", soft_wrap=True)
        for trial in entry["pareto_front"]:
            out.print(f"  Pareto front: {trial['id']} {trial['value']}"
                      f" ({', '.join(f'{k}={v}' for k, v in trial['config'].items())})",
                      soft_wrap=True)


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@STAGE_OPTION
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True, help="table for people; csv or json for programs.")
@click.option("--limit", type=click.IntRange(min=0), default=0, show_default=True, metavar="N",
              help="Trials listed per stage in the table, best first (0: all).")
def trials(run_dir: Path, stage: str | None, fmt: str, limit: int) -> None:
    """Every trial of a run, best first: status, value, configuration, attempts,
    slot-seconds and why a failed one failed."""
    from nestor.orchestrator.projections.explain import goals
    from nestor.orchestrator.projections.results import render_trials, write_csv
    from nestor.orchestrator.projections.tables import best_first

    data = _finished_stages(run_dir, stage)
    if fmt == "csv":
        write_csv(data, sys.stdout)
    elif fmt == "json":
        import json

        rows = []
        for s in data["stages"]:
            mode = next((g.mode for g in goals(s)), "max")
            rows += [{"stage": s["name"], **t} for t in best_first(list(s.get("trials") or []),
                                                                   mode)]
        click.echo(json.dumps(rows, indent=2))
    else:
        render_trials(console(), data, limit)


@cli.command()
@click.argument("target", metavar="JOBID|RUNDIR")
def status(target: str) -> None:
    """Show a run's progress from its journal: running, finished or interrupted.

    Works while the driver runs and after it was killed; an interrupted run is
    finished with `nestor resume RUNDIR`. Given a Slurm job id (from `nestor
    submit`), shows the job's Slurm state first, then its run's progress.
    """
    from nestor.orchestrator.slurm import is_job_id

    if is_job_id(target) and not Path(target).is_dir():
        from nestor.orchestrator.commands.submit import job_status

        job_status(target)
        return
    if not Path(target).is_dir():
        print_errors(console(stderr=True), [
            f"JOBID|RUNDIR must be a Slurm job id or a run directory, but got {target!r}"])
        sys.exit(EXIT_SPEC_ERROR)
    run_status(Path(target))


@cli.command()
@click.argument("run_dir", required=False, type=click.Path(path_type=Path))
@click.option("--tracking-uri", metavar="URI",
              help="An MLflow store to show instead of RUN_DIR's (e.g. sqlite:///path/mlflow.db).")
@click.option("--port", type=click.IntRange(min=1, max=65535), default=5000, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on; 0.0.0.0 lets other machines in.")
@click.option("--allow-writes", is_flag=True,
              help="Let the UI change the store (delete or edit runs, upload artifacts);"
              " it serves reads only otherwise.")
@click.option("--no-token", is_flag=True,
              help="Ask no token: anyone who can connect sees the runs (on a login node,"
              " every user of it).")
def ui(run_dir: Path | None, tracking_uri: str | None, port: int, host: str,
       allow_writes: bool, no_token: bool) -> None:
    """Open a run's results in the MLflow UI: one experiment per workflow, a run
    per stage with its trials nested under it, plots and tables as artifacts.

    Serves RUN_DIR's MLflow store (or --tracking-uri) until Ctrl-C and prints
    the URL to open, which carries a token drawn for this session: other users
    of the machine get nothing without it. Only this machine can connect unless
    --host says otherwise; the UI only reads unless --allow-writes.
    """
    from nestor.orchestrator.commands.ui import (
        Access,
        UiError,
        private_copy,
        resolve_store,
        serve,
        writable,
    )

    try:
        read_only = run_dir is not None and tracking_uri is None and not writable(run_dir)
        if run_dir is not None and tracking_uri is None and not read_only:
            write_mlflow_behind(run_dir)
        store = resolve_store(run_dir, tracking_uri)
        if read_only and store.own_db is not None:
            console(stderr=True).print(
                f"{run_dir} cannot be written: showing a private copy of its MLflow store"
                " as it is (what its journal holds beyond it is not shown)", soft_wrap=True)
            store = private_copy(store)
        access = Access.new(token=not no_token, writes=allow_writes)
        sys.exit(serve(store, host, port, echo=lambda line: console().print(line, soft_wrap=True),
                       access=access))
    except UiError as exc:
        print_errors(console(stderr=True), [exc])
        sys.exit(EXIT_SPEC_ERROR)


def write_mlflow_behind(run_dir: Path) -> None:
    """Project what a run's journal holds that its MLflow store lacks (a command
    stopped while it waited for MLflow), showing the wait, before the UI shows it."""
    import signal

    from nestor.orchestrator.backends.stopping import clear, install_handlers
    from nestor.orchestrator.commands.progress import wait_for_mlflow
    from nestor.orchestrator.engine.workflow import JOURNAL_FILE, SPEC_FILE
    from nestor.orchestrator.projections.projector import Projector
    from nestor.orchestrator.spec import SpecError, load_spec

    if not (run_dir / JOURNAL_FILE).is_file() or not (run_dir / SPEC_FILE).is_file():
        return
    try:
        workflow = load_spec(run_dir / SPEC_FILE)
    except SpecError:
        return
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
    previous = {signum: signal.getsignal(signum) for signum in signals}
    clear()
    install_handlers()  # a Ctrl-C ends the wait, and the UI still starts
    try:
        wait_for_mlflow(Projector(run_dir, workflow), console(stderr=True))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        clear()


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--stage", metavar="NAME",
              help="The stage whose model predicts (default: the last ensemble stage, else"
              " the last stage).")
@click.option("--input", "input_path", required=True, type=click.Path(path_type=Path),
              help="Images as .npy (N,H,W or N,H*W) or .csv (one image per row), raw pixels"
              " (0-255 grey levels for the built-in datasets).")
@click.option("--output", type=click.Path(path_type=Path),
              help="Write label and class probabilities as CSV here (default: stdout).")
def predict(run_dir: Path, stage: str | None, input_path: Path, output: Path | None) -> None:
    """Predict labels with a finished run's ensemble (or any stage's model).

    An ensemble stage weights its members as it was combined (mean,
    validation-weighted or greedy); other stages use their one model: the
    best trial of an hpo stage, a train stage's run, a transfer stage's
    fine-tuned model. Prints one CSV row per image: label, then the
    probability of each class.
    """
    import csv

    from nestor.orchestrator.journal.journal import DamagedRun
    from nestor.orchestrator.predict import PredictError, load_predictor, read_inputs

    try:
        model = load_predictor(run_dir, stage)
        images = read_inputs(input_path)
        probs = model.predict_proba(images)
    except (PredictError, ValueError, DamagedRun) as exc:
        print_errors(console(stderr=True), [exc])
        sys.exit(EXIT_SPEC_ERROR)
    handle = output.open("w", newline="") if output else sys.stdout
    writer = csv.writer(handle)
    writer.writerow(["label", *[f"p_{label}" for label in model.labels]])
    for row in probs:
        writer.writerow([model.labels[row.argmax()], *[f"{p:.6f}" for p in row]])
    if output:
        handle.close()
        console(stderr=True).print(f"{len(probs)} predictions of stage {model.stage} in {output}")


@cli.command()
def trainers() -> None:
    """List the built-in trainers and datasets, and the settings each accepts.

    Settings are fixed for a stage (`trainer.settings`); hyperparameters are
    what a search may vary (`space`). Besides these, a stage may name a Python
    function (`trainer: {function: "pkg.module:train"}`) or a command
    (`trainer: {command: "python3 fit.py"}`).
    """
    from nestor.orchestrator.commands.summary import render_catalog

    render_catalog(console())


@cli.command()
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--address", metavar="HOST:PORT",
              help="The Ray cluster to ask (default: RAY_ADDRESS, else one started on this"
              " machine); none is started.")
@click.option("--no-ray", is_flag=True, help="Do not look for a Ray cluster.")
@click.option("--run-dir", type=click.Path(path_type=Path, exists=True, file_okay=False),
              help="Check that every node of the Ray cluster sees this directory.")
@click.option("--strict", is_flag=True,
              help="Exit with status 1 when there is a warning (e.g. a GPU but a CPU-only build).")
def doctor(fmt: str, address: str | None, no_ray: bool, run_dir: Path | None,
           strict: bool) -> None:
    """Show what this machine will train with: torch's build (CPU or CUDA), CUDA,
    NCCL, Horovod's operations, the GPUs on this node and the Ray cluster.

    Warns in red when a GPU is here but torch or Horovod cannot use it.
    """
    from nestor.orchestrator.commands.doctor import gather, render

    report = gather(address, ray=not no_ray, run_dir=run_dir)
    if fmt == "json":
        import json

        click.echo(json.dumps(report, indent=2))
        for warning in report["warnings"]:  # stdout stays JSON; the warning is still loud
            click.echo(click.style(f"WARNING: {warning}", fg="red", bold=True), err=True)
    else:
        render(report, console(markup=True))  # its every outside string escaped
    if strict and report["warnings"]:
        sys.exit(1)


def _slurm_commands() -> None:
    from nestor.orchestrator.commands.submit import submit

    cli.add_command(submit)


_slurm_commands()


def main() -> None:
    _quick_exit()
    try:
        cli(prog_name="nestor")
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)


def _quick_exit() -> None:
    """Spare the command's exit a full garbage collection of everything it imported.

    Once the command is done, Python's teardown collects the whole heap (Ray,
    MLflow, SQLAlchemy, matplotlib and a sweep's state): 6 to 11 s at the end of a
    trivial sweep on a busy 2-core machine, after every result was printed and
    written. ``gc.freeze``, registered before the command runs, so run after every
    exit handler the command's libraries register (Ray's, MLflow's, the node-local
    store's copy), moves what is alive then out of the collector's sight: objects
    are still released by their reference counts and the handlers registered at
    import (``logging``'s flush) still run; only the cycle search over the frozen
    heap is skipped, whose garbage the ending process would never use again."""
    import atexit
    import gc

    atexit.register(gc.freeze)


if __name__ == "__main__":
    main()
