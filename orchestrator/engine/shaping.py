"""The shape of a stage's trials: the spec's ``parallel:``, or, for ``parallel: auto``,
the planner's choice on the slots the backend has, journalled so that a resumed
driver keeps it; and the tail's re-plans (fewer trials left than fit at once: the
next ones may get wider)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from nestor.orchestrator.backends.interface import Backend
from nestor.orchestrator.backends.shape import Shape
from nestor.orchestrator.journal.events import Event, StagePlanned, StageReplanned
from nestor.orchestrator.journal.journal import Journal

log = logging.getLogger(__name__)


class StageShape:
    """``shape`` is the gang the stage's next trial runs on.

    >>> shaping = StageShape(workflow, stage, backend, journal, events)   # doctest: +SKIP
    >>> shaping.shape                                                     # doctest: +SKIP
    Shape(data=4, model=1, backend='horovod')
    """

    def __init__(self, workflow: Any, stage: Any, backend: Backend, journal: Journal,
                 planned: list[StagePlanned]) -> None:
        """``planned``: this stage's journalled plans (a resumed stage's)."""
        self.workflow = workflow
        self.stage = stage
        self.backend = backend
        self.journal = journal
        self.planner: Any = None  # for parallel: auto, on the slots the backend has
        self.planned_shape: str | None = None  # the plan's first shape ("4x1")
        self.replans: list[dict[str, Any]] = []  # the tail's re-plans: dp, mp, left, reason
        self.journalled = bool(planned)  # journalled: neither profile nor plan again
        declared = workflow.declared_parallel(stage.name)
        # A command trainer's gang is as wide as declared too: its rank 0 runs the
        # command, which starts its own ranks on the slots the others hold.
        if declared.is_auto:
            from nestor.orchestrator.planning import StagePlanner

            self.planner = StagePlanner(workflow, stage.name, backend.slots)
            if planned and planned[-1].profile:
                from nestor.orchestrator.planning import Profile

                self.planner.use_profile(Profile.from_record(planned[-1].profile))
            self.choose()
        else:
            self.shape = self.gang_shape(int(declared.data), int(declared.model))

    def gang_shape(self, dp: int, mp: int) -> Shape:
        """The gang a dp x mp trial of this stage runs on (the planner's shapes, and the
        spec's, say nothing of the backend)."""
        return Shape(dp, mp, backend=self.workflow.backend_of(self.stage.name))

    def choose(self) -> None:
        chosen = self.planner.first()
        self.shape = self.gang_shape(chosen.shape.dp, chosen.shape.mp)
        self._plan = chosen

    def restore(self, mine: Iterable[Event]) -> None:
        """A planned stage keeps the shape journalled for it (a resumed driver may sit
        on other slots, or find another profile cached); a new one journals its plan."""
        if self.planner is None:
            return
        shaped = [e for e in mine if isinstance(e, StagePlanned | StageReplanned)]
        if shaped:
            self.planned_shape = f"{shaped[0].dp}x{shaped[0].mp}"
            self.replans = [{"dp": e.dp, "mp": e.mp, "left": e.left, "reason": e.reason}
                            for e in shaped if isinstance(e, StageReplanned)]
            self.shape = self.gang_shape(shaped[-1].dp, shaped[-1].mp)
            return
        profile = self.planner.profile
        self.journal.record(StagePlanned(
            stage=self.stage.name, dp=self.shape.data, mp=self.shape.model,
            slots=self.planner.slots, plan=self._plan.to_record(),
            measured=self.planner.measured,
            profile=None if profile is None else profile.to_record()))
        log.info("stage %s: %s", self.stage.name, self._plan.why())
        self.planned_shape = str(self.shape)

    def replan_tail(self, left: int, busy_ranks: int, running: int) -> None:
        """Fewer trials left than fit at once (``left`` not yet asked): the next ones
        may get wider. ``busy_ranks`` are the running trials' ranks, of any shape."""
        if self.planner is None:
            return
        from nestor.orchestrator.planning import Shape as PlanShape

        current = PlanShape(self.shape.data, self.shape.model)
        # Running trials may be of an earlier shape: count the slots they hold.
        decision = self.planner.tail(left=left, running=busy_ranks // current.ranks,
                                     current=current)
        if decision is None or decision.shape == current:
            return
        self.shape = self.gang_shape(decision.shape.dp, decision.shape.mp)
        self.journal.record(StageReplanned(
            stage=self.stage.name, dp=self.shape.data, mp=self.shape.model, left=left,
            running=running, reason=decision.reason))
        log.info("stage %s: %d trial(s) left, now %s: %s", self.stage.name, left,
                 decision.shape, decision.reason)
        self.replans.append({"dp": decision.shape.dp, "mp": decision.shape.mp, "left": left,
                             "reason": decision.reason})

    # -- measuring the trainer first --------------------------------------------------

    def preparing_task(self) -> tuple[Any, ...] | None:
        """``(fn, *args)`` measuring the trainer before the first trial, or None.

        A planned stage with no profile of its trainer on this kind of machine
        measures one first, in a task on the allocation (cached there, and
        journalled with the plan, so a resumed driver does not measure again)."""
        if (self.planner is None or self.planner.measured or self.journalled
                or not self.backend.measurable):
            return None
        return self.planner.profile_job()

    def prepared(self, done: Any) -> None:
        """The measuring task is done (``TaskDone``): plan on its profile."""
        if done.error is not None:
            log.warning("stage %s: profiling its trainer failed (%s); planning from the"
                        " unmeasured prior", self.stage.name, done.error)
            return
        from nestor.orchestrator.planning import Profile

        self.planner.use_profile(Profile.from_record(done.value))
        self.choose()

    def summary(self, lr_rule: Any) -> dict[str, Any]:
        """A planned stage's first shape and its tail's re-plans, for results."""
        if self.planned_shape is None:
            return {}
        return {"planned_shape": self.planned_shape, "replans": list(self.replans),
                "lr_rule": lr_rule}
