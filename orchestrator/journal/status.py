"""The closed sets of states that cross the orchestrator's layers: a trial's status
and a stage's (or a run's) state, named once here, in the bottom layer, so that the
engine that journals them and the projections that read them back spell them alike.

They are ``StrEnum``s: a member is the string it stands for, so a journal line,
results.json and an MLflow tag read the same as before, and a status read back from
a journal (a plain ``str``) compares equal to its member.

>>> TrialStatus.COMPLETED == "completed", f"{TrialStatus.PRUNED}"
(True, 'pruned')
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ENDED", "SCORED", "StageStatus", "TrialStatus"]


class TrialStatus(StrEnum):
    """A trial's status: ``running`` until its ``TrialFinished`` says how it ended
    (one of :data:`ENDED`). ``interrupted`` is an attempt's fate only (a driver
    restart or a ``TrialInterrupted`` cut it; the trial runs again), never journalled
    as a trial's last word."""

    RUNNING = "running"
    COMPLETED = "completed"  # trained to the end, with a value
    PRUNED = "pruned"  # stopped early by the stage's early stopping, with a value
    FAILED = "failed"  # for good: its retries spent, or not retried
    STOPPED = "stopped"  # by its stage's wall budget: not the trial's fault, never retried
    INTERRUPTED = "interrupted"


# What a TrialFinished may say: the statuses of a trial that ended for good.
ENDED: frozenset[TrialStatus] = frozenset(
    {TrialStatus.COMPLETED, TrialStatus.PRUNED, TrialStatus.FAILED, TrialStatus.STOPPED})
# The ended trials whose value the search is told (the others it is told failed).
SCORED: frozenset[TrialStatus] = frozenset({TrialStatus.COMPLETED, TrialStatus.PRUNED})


class StageStatus(StrEnum):
    """A stage's state (and a run's, in ``nestor status``): the journal's fold knows
    ``running`` and ``finished``; ``nestor status`` also says ``interrupted`` (no
    driver is alive) and ``failed`` (it finished with no result)."""

    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
