"""A new search's start: earlier results it learns from (``search.warm_start``: a run
directory or a CSV of configurations and values) and configurations it asks first
(``search.enqueue``). Both go into the searcher's own log before its first ask, so a
resumed driver replays them and never reads the warm-start source again."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from nestor.orchestrator.engine.workflow import JOURNAL_FILE
from nestor.orchestrator.journal.events import TrialFinished, kinds_of, parse
from nestor.orchestrator.journal.journal import iter_events
from nestor.orchestrator.journal.status import TrialStatus


class SeedError(ValueError):
    """A warm-start source that cannot be read; the message names it and why."""


def seed_search(runner: Any) -> None:
    """Warm-start and enqueue ``runner``'s new searcher as its stage's spec says; a
    source or configuration that cannot be used stops the run with the reason."""
    search = runner.stage.search
    source = getattr(search, "warm_start", None)
    enqueue = getattr(search, "enqueue", None) or []
    if source is None and not enqueue:
        return
    searcher = runner.searcher
    where = f"stage {runner.stage.name!r}"
    try:
        if source is not None:
            observations = read_observations(Path(source), searcher.space, searcher.objectives)
            searcher.warm_start(observations)
        if enqueue:
            searcher.enqueue(enqueue)
    except ValueError as exc:
        runner.broken = f"{where}: search.{'enqueue' if source is None else 'warm_start'}: {exc}"
        return
    runner.search_log.record()


def read_observations(source: Path, space: Any, objectives: Any) -> list[tuple[dict, Any]]:
    """(config, result) pairs from a run directory's journal (its completed trials,
    every stage's) or from a CSV whose header names the space's parameters and the
    objectives' metrics (or ``value``)."""
    if source.is_dir():
        return _from_run(source, objectives)
    if source.is_file():
        return _from_csv(source, space, objectives)
    raise SeedError(f"warm_start {str(source)!r} is neither a run directory nor a CSV file")


def _result(metrics: dict[str, Any], value: Any, objectives: Any) -> Any:
    wanted = [o.metric for o in objectives]
    if all(isinstance(metrics.get(m), int | float) for m in wanted):
        return {m: float(metrics[m]) for m in wanted}
    return value


def _from_run(run_dir: Path, objectives: Any) -> list[tuple[dict, Any]]:
    journal = run_dir / JOURNAL_FILE
    if not journal.is_file():
        raise SeedError(f"warm_start {str(run_dir)!r} is not a nestor run directory"
                        f" (no {JOURNAL_FILE})")
    found = []
    for record in iter_events(journal, kinds_of(TrialFinished)):
        event = parse(record)
        assert isinstance(event, TrialFinished)
        if event.status == TrialStatus.COMPLETED and event.value is not None:
            found.append((dict(event.trial.get("config") or {}),
                          _result(event.metrics or {}, event.value, objectives)))
    return found


def _cell(param: Any, text: str) -> Any:
    """A CSV cell as ``param``'s value (a choice by its text; numbers as their type)."""
    values = getattr(param, "values", None)
    if values is not None:
        return next((v for v in values if str(v) == text), text)
    if hasattr(param, "value"):  # a constant: the space's own value is taken
        return param.value
    number = float(text)
    if type(getattr(param, "low", 0.0)) is int and number.is_integer():
        return int(number)
    return number


def _from_csv(path: Path, space: Any, objectives: Any) -> list[tuple[dict, Any]]:
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        return []
    header = set(rows[0])
    names = [p.name for p in space.searched]
    missing = [n for n in names if n not in header]
    metrics = [o.metric for o in objectives]
    results = metrics if all(m in header for m in metrics) else ["value"]
    if missing or not set(results) <= header:
        raise SeedError(
            f"warm_start {str(path)!r}: its header must name the parameters {names} and the"
            f" metric(s) {metrics} (or 'value'), but lacks"
            f" {missing + [r for r in results if r not in header]}")
    by_name = {p.name: p for p in space.params}
    found = []
    for line, row in enumerate(rows, start=2):
        try:
            config = {n: _cell(by_name[n], row[n].strip()) for n in names}
            got = [float(row[r]) for r in results]
        except (ValueError, TypeError, AttributeError):
            raise SeedError(f"warm_start {str(path)!r}, line {line}: a value is not a"
                            " number or one of its parameter's choices") from None
        if not all(math.isfinite(v) for v in got):
            continue
        result = dict(zip(results, got, strict=True)) if results == metrics else got[0]
        found.append((config, result))
    return found
