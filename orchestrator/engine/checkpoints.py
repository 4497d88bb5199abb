"""The checkpoint keeper: under ``keep_checkpoints: N``, a stage's finished trials'
checkpoints that no one needs any more are removed, journalled first.

Kept: the N best trials', the best's, any a later trial of the search may still
continue from (PBT's donors, successive halving's promotable), and every pending
trial's and its source's. PBT keeps every interval otherwise: population x intervals
models on disk.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nestor.orchestrator.journal.events import CheckpointRemoved
from nestor.orchestrator.journal.journal import Journal
from nestor.orchestrator.journal.safe import check_id, inside
from nestor.orchestrator.journal.status import TrialStatus


class CheckpointKeeper:
    """Removes one stage's unneeded checkpoints (``keep``: how many best to keep; None
    keeps all). ``records`` (trial id -> a record with ``status`` and ``checkpoint``)
    are the stage's trials; a removed checkpoint is forgotten there."""

    def __init__(self, stage: str, keep: int | None, run_dir: Path, journal: Journal) -> None:
        self.stage = stage
        self.keep = keep
        self.run_dir = run_dir
        self.folder = run_dir / "checkpoints" / stage
        self.journal = journal

    def needed(self, searcher: Any) -> set[str]:
        """The trials whose checkpoints must stay."""
        assert self.keep is not None
        needed = set(searcher.continuable())
        needed |= {o.trial.id for o in searcher.ranked()[:self.keep]}
        best = searcher.best()
        if best is not None:
            needed.add(best.trial.id)
        for trial in searcher.pending:  # running, queued or retried, and their sources
            needed |= {trial.id, trial.continue_from}
        return needed

    def prune(self, searcher: Any, records: Mapping[str, Any]) -> None:
        """Remove the checkpoints of finished trials that are not needed."""
        if self.keep is None:
            return
        needed = self.needed(searcher)
        for record in records.values():
            if (record.checkpoint and record.status != TrialStatus.RUNNING
                    and record.id not in needed):
                self.journal.record(CheckpointRemoved(
                    stage=self.stage, trial=record.id, path=record.checkpoint))
                self.journal.sync()  # the files go only once the journal says so for good
                self.removed(record.id, records)

    def removed(self, trial_id: str, records: Mapping[str, Any]) -> None:
        """Forget a trial's checkpoint and delete its folder (again, on resume: the
        driver may have died between the journal and the files). Only nestor's own
        folder goes: a command trainer's checkpoint elsewhere is the user's; and the
        id, read back from the journal on resume, must name a folder inside the run
        directory (a journal can be altered: it must never delete elsewhere)."""
        folder = inside(self.run_dir, "checkpoints", self.stage, check_id(trial_id, "trial id"))
        record = records.get(trial_id)
        if record is not None:
            record.checkpoint = None
        shutil.rmtree(folder, ignore_errors=True)
