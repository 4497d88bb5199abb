"""Result adoption: a trial's result that landed while no driver listened is taken
over on resume rather than trained again.

Each attempt's rank 0 writes its result to ``attempts/STAGE/TRIAL/N.json`` before
returning it, so training that finished is never run again, however the driver
was killed. On resume, a trial still pending whose folder holds a result the
journal never heard of adopts the latest such result.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from orchestrator.journal.events import Event, TrialAttemptFailed, TrialFinished, TrialStarted
from orchestrator.journal.safe import check_id, inside


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
        from trainers import TrialResult

        unheard = [n for n in self.landed(trial_id) if (trial_id, n) not in ended]
        if not unheard:
            return None
        number = unheard[-1]
        path = inside(self.run_dir, self.path(trial_id, number))  # not a link out
        return number, TrialResult.from_dict(json.loads(path.read_text()))


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
