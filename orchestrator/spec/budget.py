"""A search's budget in a spec: what the search spends, and the stage's wall clock.

``search.budget`` is what ``search._budget`` reads (trials, or one cost:
slot-seconds, slot-hours, epochs), or a mapping that adds a wall-clock limit,
``{wall: 2h}``, ``{trials: 50, wall: 2h}`` or ``{slot_hours: 30, wall: 2h}``:
whichever comes first ends the stage. The wall clock is the engine's business
(``orchestrator.engine.wall``), never the search's, so the spec splits it off
here and the searcher sees only its own part.

``{hours: H}`` and ``30h`` were the first spellings of slot-hours; they keep
working, with a one-line notice naming ``slot_hours`` (an ``h`` that reads
like a wall clock is exactly what ``wall:`` now is).

>>> split_budget({"trials": 50, "wall": "2h"})
(50, 7200.0)
>>> split_budget({"wall": "90s"}), describe_wall(5400.0), describe_wall(150.0)
((None, 90.0), '90m', '150s')
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

WALL_FORMS = "a duration with its unit: 90s, 30m or 2h"
FORMS = ("a positive integer (trials), {slot_seconds: S}, {slot_hours: H}, {epochs: E},"
         " or a mapping with a wall-clock limit: {wall: 2h}, {trials: 50, wall: 2h},"
         " {slot_hours: 30, wall: 2h}")
_DURATION = re.compile(r"^\s*(?P<number>[0-9]*\.?[0-9]+)\s*(?P<unit>s|m|h)\s*$")
_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_SAID: set[str] = set()  # the deprecation notices said in this process


def parse_wall(value: Any) -> float:
    """Seconds of a ``wall:`` duration (``90s``, ``30m``, ``2h``); ValueError else."""
    match = _DURATION.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"budget.wall must be {WALL_FORMS}, but got {value!r}")
    seconds = float(match["number"]) * _SECONDS[match["unit"]]
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"budget.wall must be positive ({WALL_FORMS}), but got {value!r}")
    return seconds


def describe_wall(seconds: float) -> str:
    """A wall-clock limit as a person writes it: 2h, 30m, 1.5h, 8s."""
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def split_budget(value: Mapping[str, Any]) -> tuple[int | dict[str, Any] | None, float | None]:
    """(the search's budget, the wall-clock limit in seconds) of a mapping budget;
    ValueError naming what is wrong."""
    from nestor.search import UNITS

    rest = {k: v for k, v in value.items() if k not in ("wall", "trials")}
    wall = parse_wall(value["wall"]) if "wall" in value else None
    costs = [k for k in rest if k in UNITS]
    unknown = [str(k) for k in rest if k not in UNITS]
    if unknown or len(costs) > 1 or (costs and "trials" in value) or not value:
        keys = ", ".join(map(str, value)) or "none"
        why = (f"{', '.join(unknown)}: not one of trials, slot_seconds, slot_hours, epochs,"
               " wall" if unknown else "at most one of trials, slot_seconds, slot_hours or"
               " epochs, beside wall")
        raise ValueError(f"budget must be {FORMS}, but got {{{keys}}} ({why})")
    if "trials" in value:
        trials = value["trials"]
        if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
            raise ValueError(f"budget.trials must be a positive integer, but got {trials!r}")
        return trials, wall
    return (dict(rest) if rest else None), wall


def say_deprecated(budget: Any) -> None:
    """The notice, once a process, for slot-hours spelt ``hours`` (or ``30h``)."""
    if not (isinstance(budget, Mapping) and "hours" in budget):
        return
    amount = budget["hours"]
    notice = (f"budget {{hours: {amount:g}}} (or {amount:g}h) means {amount:g} slot-hours;"
              f" write {{slot_hours: {amount:g}}} (or --budget {amount:g}slot-h). A limit on"
              f" the wall clock is {{wall: {amount:g}h}}") if isinstance(
                  amount, int | float) else None
    if notice is not None and notice not in _SAID:
        _SAID.add(notice)
        log.warning("%s", notice)


def with_wall(budget: Any, wall: str | None) -> Any:
    """``budget`` (trials, a cost, or their text: ``40``, ``30slot-h``) with a wall-clock
    limit added, as ``nestor sweep --wall`` and ``nestor.tune(wall=...)`` write it."""
    from nestor.search import parse_budget_text

    if wall is None:
        return budget
    if isinstance(budget, str):
        budget = parse_budget_text(budget)
    if budget is None:
        return {"wall": wall}
    if isinstance(budget, int):
        return {"trials": budget, "wall": wall}
    return {**dict(budget), "wall": wall}
