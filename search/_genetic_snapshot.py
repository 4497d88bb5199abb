"""A genetic search's population as JSON data, and back: its snapshot's internals.

Why: at a million events, replaying a genetic search's 280,000 log entries was a
third of a resume; a snapshot lets :meth:`Searcher.restore` put the population in
place instead (search/_persistence.py checks it against the log). Apart from the
algorithm because writing and reading the population is not breeding it: this
module only needs to know where the search keeps what.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from nestor.search._genetic_genome import Individual
from nestor.search._genetic_view import GeneticView


def internals(s: GeneticView) -> dict[str, Any] | None:
    """Every individual the search can still reach (each once, by its place in a
    table, so the demes, halls of fame, queue and batch share them as here), the
    RNG's state and the counters. Not kept: caches rebuilt on use (each deme's
    order and best, decoded configs), a told child's DE target (read only when it
    is told) and members no structure holds (only looked up as parents of a
    child bred from the current demes, which the table holds)."""
    table: list[Individual] = []
    places: dict[int, int] = {}

    def place(ind: Individual) -> int:
        at = places.get(id(ind))
        if at is None:
            at = places[id(ind)] = len(table)
            table.append(ind)
        return at

    pending = s._book.pending
    for hall in s._halls:
        items = list(reversed(hall.items))
        if len(hall.keys) != len(items) or any(
                k is not i.fitness for k, i in zip(hall.keys, items, strict=True)):
            return None  # DEAP's hall of fame kept otherwise: replay the log instead
    parents = [[place(i) for i in deme] for deme in s._parents]
    halls = [[place(i) for i in hall.items] for hall in s._halls]
    queue, batch = [place(i) for i in s._queue], [place(i) for i in s._batch]
    waiting = [place(s._members[t]) for t in pending]
    members = {t: place(s._members[t])
               for t in dict.fromkeys(i.trial_id for i in list(table) if i.trial_id)}
    untold = [i.trial_id is None or i.trial_id in pending for i in table]
    targets = [place(i.target) if told and i.target is not None else None
               for i, told in zip(list(table), untold, strict=True)]
    rows = [[list(i), list(i.fitness.wvalues), i.trial_id, i.deme, list(i.parents),
             i.origin, i.failed, target, None if i.de is None else list(i.de)]
            for i, target in zip(table, targets + [None] * (len(table) - len(targets)),
                                 strict=True)]
    version, internal, gauss = s._rng.getstate()
    mark = s._best_mark
    steps, steady = s._steps, s._steady
    return {
        "individuals": rows, "parents": parents, "halls": halls, "queue": queue,
        "batch": batch, "waiting": waiting, "members": members,
        "rng": [version, list(internal), gauss],
        "step_scale": steps.scale, "mutated": steps.mutated,
        "successes": steps.successes,
        "de": [steps.de.mu_f, steps.de.mu_cr, list(steps.de._f), list(steps.de._cr)],
        "generation": s._generation, "started": s._started, "stall": s._stall,
        "best_mark": (None if mark is None else {"front": sorted(mark)}
                      if isinstance(mark, frozenset) else {"key": list(mark)}),
        "failures_in_row": s._failures_in_row, "last_failure": s._last_failure,
        "births": list(steady.births), "next_deme": steady.next_deme,
        "results": s._results, "seeds": list(s._seeds),
        "parents_changed": s._parents_changed,
    }


def resume(s: GeneticView, internals: Any) -> Callable[[], None]:
    """Decode :func:`internals`' data (raising on malformed data before anything
    changes); returns the callable that puts it in place."""
    data = dict(internals)
    table = []
    for genes, wvalues, trial_id, deme, parents, origin, failed, _, de in data["individuals"]:
        ind = s._individual(list(genes), int(deme), tuple(parents), str(origin))
        ind.fitness.wvalues = tuple(float(v) for v in wvalues)
        ind.trial_id, ind.failed = trial_id, bool(failed)
        if de is not None:
            ind.de = (float(de[0]), float(de[1]))
        table.append(ind)
    for ind, row in zip(table, data["individuals"], strict=True):
        if row[7] is not None:
            ind.target = table[row[7]]
    parents = [[table[k] for k in deme] for deme in data["parents"]]
    halls = [[table[k] for k in hall] for hall in data["halls"]]
    if len(parents) != s.demes or len(halls) != len(s._halls):
        raise ValueError(f"a snapshot must have {s.demes} demes, but got {len(parents)}")
    queue, batch = [table[k] for k in data["queue"]], [table[k] for k in data["batch"]]
    members = {str(t): table[k] for t, k in data["members"].items()}
    if any(members.get(table[k].trial_id) is not table[k] for k in data["waiting"]):
        raise ValueError("a snapshot's pending trials must be its members")
    version, internal, gauss = data["rng"]
    rng_state = (int(version), tuple(int(x) for x in internal),
                 None if gauss is None else float(gauss))
    random.Random().setstate(rng_state)  # malformed: raises here, before any change
    de_state = data["de"]
    mark = data["best_mark"]
    best_mark: Any = (None if mark is None else frozenset(mark["front"]) if "front" in mark
                      else tuple(float(v) for v in mark["key"]))
    births = [int(b) for b in data["births"]]
    scalars = {key: data[key] for key in (
        "step_scale", "mutated", "successes", "generation", "started", "stall",
        "failures_in_row", "last_failure", "next_deme", "results", "seeds",
        "parents_changed")}

    def put_in_place() -> None:
        s._parents, s._queue, s._batch = parents, queue, batch
        for hall, items in zip(s._halls, halls, strict=True):
            hall.items = list(items)
            hall.keys = [i.fitness for i in reversed(items)]
        s._members = members
        s._rng.setstate(rng_state)
        steps, steady = s._steps, s._steady
        steps.de.mu_f, steps.de.mu_cr = float(de_state[0]), float(de_state[1])
        steps.de._f, steps.de._cr = list(de_state[2]), list(de_state[3])
        s._best_mark, steady.births = best_mark, births
        steps.scale = scalars["step_scale"]
        steps.mutated, steps.successes = scalars["mutated"], scalars["successes"]
        s._generation, s._started = scalars["generation"], scalars["started"]
        s._stall, s._failures_in_row = scalars["stall"], scalars["failures_in_row"]
        s._last_failure, steady.next_deme = scalars["last_failure"], scalars["next_deme"]
        s._results, s._seeds = scalars["results"], list(scalars["seeds"])
        s._parents_changed = scalars["parents_changed"]
        s._best_by_deme.clear()
        steady.forget_orders()
        # _best_key's running minimum: derived from the book, scanned again once
        s._best_seen, s._best_key_so_far, s._budgeted = 0, None, False

    return put_in_place
