"""Result adoption: a trial's result that landed while no driver listened is taken
over on resume rather than trained again.

Each attempt's rank 0 writes its result to ``attempts/STAGE/TRIAL/N.json`` before
returning it, so training that finished is never run again, however the driver
was killed. On resume, a trial still pending whose folder holds a result the
journal never heard of adopts the latest such result.

A result on disk for a trial the journal has never heard of (no event of it, no
ask of it in its stage's search log) means the journal lost events: it was cut,
emptied or replaced by an older copy. Resuming would run those trials again and
overwrite their results, so :func:`check_journal_covers` stops the resume first,
saying which results and how to recover; an attempt's result that does not read
is named the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nestor.orchestrator.journal.events import (
    Event,
    PlanState,
    SearchLogged,
    TrialAttemptFailed,
    TrialFinished,
    TrialInterrupted,
    TrialStarted,
    kinds_of,
)
from nestor.orchestrator.journal.journal import DamagedRun, iter_events, kind_of_line, verify
from nestor.orchestrator.journal.safe import check_id, inside
from nestor.orchestrator.journal.text import first_line


class ResultFiles:
    """Where one stage's attempts leave their results, and which landed unheard.

    >>> files = ResultFiles(run_dir, "tune")                       # doctest: +SKIP
    >>> files.unheard("t3", journal_events)  # (2, TrialResult(...)) or None  # doctest: +SKIP
    """

    def __init__(self, run_dir: Path, stage: str) -> None:
        self.run_dir = run_dir
        self.stage = stage
        self.folder = run_dir / "attempts" / stage
        self._folder_text = str(self.folder)

    def path(self, trial_id: str, number: int) -> Path:
        """Where attempt ``number`` of ``trial_id`` writes its result."""
        return self.folder / trial_id / f"{number}.json"

    def path_text(self, trial_id: str, number: int) -> str:
        """:meth:`path` as text, joined without pathlib: one per launch, and three
        pathlib joins per launch were a tenth of starting a trial at 32,768 slots."""
        return f"{self._folder_text}/{trial_id}/{number}.json"

    def landed(self, trial_id: str) -> list[int]:
        """The attempts of ``trial_id`` whose result is on disk, in order (the id, read
        back from the journal, must name a folder inside the run directory)."""
        folder = inside(self.run_dir, "attempts", self.stage, check_id(trial_id, "trial id"))
        if not folder.is_dir():
            return []
        return sorted(int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit())

    def unheard(self, trial_id: str, ended: set[tuple[str, int]]) -> tuple[int, Any] | None:
        """The latest attempt of ``trial_id`` whose result landed but whose end the
        journal lacks (``ended``: (trial, attempt) pairs it holds), with its
        ``trainers.TrialResult``; None when there is none."""
        unheard = [n for n in self.landed(trial_id) if (trial_id, n) not in ended]
        if not unheard:
            return None
        number = unheard[-1]
        # not a link out of the run directory
        return number, read_result(inside(self.run_dir, self.path(trial_id, number)))


def read_result(path: Path) -> Any:
    """The ``trainers.TrialResult`` an attempt wrote to ``path``; DamagedRun where the
    file does not read as one (it is written whole, so it was damaged since)."""
    from nestor.trainers import TrialResult

    try:
        data = json.loads(path.read_bytes())
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
        return TrialResult.from_dict(data)
    except (ValueError, TypeError, KeyError) as exc:
        raise DamagedRun(
            f"{path}: not a trial's result ({first_line(exc)[:120]}): the file is"
            " damaged. Restore it from a copy, or delete it and resume: that attempt of"
            " the trial then runs again") from None


_TRIAL_KINDS = kinds_of(TrialStarted, TrialFinished, TrialAttemptFailed, TrialInterrupted)
_ASKS = frozenset(kind.encode() for kind in kinds_of(SearchLogged, PlanState))


def check_journal_covers(run_dir: Path, journal: Path) -> None:
    """Before a resume: every attempt result on disk is of a trial the journal knows,
    and every result whose end the journal lacks (to be adopted) reads. DamagedRun
    otherwise, naming the results and how to recover; JournalError (a DamagedRun) for
    the journal's first damaged line, found before anything starts."""
    verify(journal)
    found = _results_on_disk(run_dir / "attempts")
    if not found:
        return
    known: set[tuple[str, str]] = set()
    ended: set[tuple[str, str, int]] = set()
    for record in iter_events(journal, kinds=_TRIAL_KINDS):
        trial = record.get("trial")
        trial_id = str(trial.get("id") if isinstance(trial, dict) else trial)
        stage = str(record.get("stage"))
        known.add((stage, trial_id))
        if record["event"] in (TrialFinished.kind, TrialAttemptFailed.kind):
            ended.add((stage, trial_id, int(record.get("attempt") or 1)))
    unknown = {(stage, trial) for stage, trial, _ in found} - known
    if unknown:
        unknown -= _asked(journal, unknown)
    if unknown:
        paths = sorted(str(path) for (stage, trial, _), path in found.items()
                       if (stage, trial) in unknown)
        raise DamagedRun(
            f"{journal} is shorter than the results on disk: {len(paths)} result(s) in"
            f" attempts/ are of trials it has no event of (e.g. {paths[0]}); it was cut,"
            " emptied or replaced by an older copy. Resuming would run those trials again"
            " over their results, so nothing was started. Restore the journal from a"
            " copy; or, to run them again, move the run's attempts/ folder aside"
            " (mv attempts attempts.orphaned) and resume")
    for key, path in found.items():
        if key not in ended:
            read_result(inside(run_dir, path))  # to be adopted: it must read (inside)


def _results_on_disk(folder: Path) -> dict[tuple[str, str, int], Path]:
    """Every attempt result under ``attempts/``: (stage, trial, attempt) -> its file."""
    found: dict[tuple[str, str, int], Path] = {}
    if not folder.is_dir():
        return found
    for path in folder.glob("*/*/*.json"):
        if path.stem.isdigit():
            found[(path.parent.parent.name, path.parent.name, int(path.stem))] = path
    return found


def _asked(journal: Path, trials: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Those of ``trials`` that their stage's search log or plan asked for (a trial
    whose result landed before its start was journalled): its id in such a line."""
    marks = {key: (b'"stage":' + json.dumps(key[0]).encode(),
                   b'"id":' + json.dumps(key[1]).encode()) for key in trials}
    asked: set[tuple[str, str]] = set()
    if not journal.exists():
        return asked
    with journal.open("rb") as handle:
        for line in handle:
            found = kind_of_line(line)
            if found is None or found[0] not in _ASKS:
                continue
            for key, (stage, trial_id) in marks.items():
                if key not in asked and stage in line and trial_id in line:
                    asked.add(key)
    return asked


def attempts_heard(mine: Iterable[Event]) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
    """The (trial, attempt) pairs this stage's journal saw end, and those it saw start."""
    ended: set[tuple[str, int]] = set()
    begun: set[tuple[str, int]] = set()
    for event in mine:
        if isinstance(event, TrialFinished | TrialAttemptFailed):
            ended.add((event.trial["id"], event.attempt))
        elif isinstance(event, TrialStarted):
            begun.add((event.trial["id"], event.attempt))
    return ended, begun
