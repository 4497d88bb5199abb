"""Going on with stages that finished: a search extended (``nestor resume --budget``)
and failed planned trials run again (``--retry``).

A resumed driver journals one :class:`~orchestrator.journal.events.StageReopened`
per stage it goes on with, before it steps any stage; the stage is then restored
from the journal like an interrupted one and its runner applies what the event
asks (a searcher's ``extend``, a plan's ``retry``) once, logged in the stage's own
search log or plan state: a driver killed at any instant after it resumes the same
search, and no finished trial runs again.
"""

from __future__ import annotations

from typing import Any

from nestor.orchestrator.engine.history import JournalSoFar
from nestor.orchestrator.journal.events import Event, PlanState, StageReopened
from nestor.orchestrator.journal.status import TrialStatus
from nestor.orchestrator.spec import Workflow


class ReopenError(Exception):
    """What a resume was asked to go on with cannot be done; the message says why."""


def downstream(workflow: Workflow, name: str) -> list[str]:
    """The stages that take ``name``'s results, directly or through others, in order."""
    found: set[str] = {name}
    for stage in workflow.order():
        if any(ref in found for ref in workflow.stage(stage).from_):
            found.add(stage)
    return [s for s in workflow.order() if s in found and s != name]


def reopenings(workflow: Workflow, events: JournalSoFar, *, budget: int | None = None,
               stage: str | None = None, retry: bool = False) -> list[StageReopened]:
    """The StageReopened events a resume with ``budget`` (a search's new trial budget,
    of ``stage`` or the workflow's one hpo stage) and ``retry`` (every finished
    planned stage with failed trials, and the finished stages after it) journals;
    ReopenError where that cannot be done, before anything is written."""
    out: list[StageReopened] = []
    if budget is not None:
        out.append(_extension(workflow, events, budget, stage))
    if retry:
        out += _retries(workflow, events, {e.stage for e in out})
    return out


def _searches(stage: Any) -> bool:
    """A stage whose trials a search asks (its budget can grow), as opposed to a planned
    one (its failed trials can be retried)."""
    return getattr(stage, "search", None) is not None


def _extension(workflow: Workflow, events: JournalSoFar, budget: int,
               stage: str | None) -> StageReopened:
    searched = [s.name for s in workflow.stages if _searches(s)]
    if stage is None:
        if len(searched) != 1:
            raise ReopenError(
                f"--budget needs --stage NAME: this workflow searches in {len(searched)}"
                f" stages ({', '.join(searched) or 'none'})")
        stage = searched[0]
    if stage not in searched:
        raise ReopenError(f"--stage must name an hpo stage ({', '.join(searched) or 'none'}),"
                          f" but got {stage!r}: only a search has a budget to extend")
    if isinstance(workflow.stage(stage).search.budget, dict):
        raise ReopenError(f"stage {stage!r} spends a cost budget; only a budget of trials"
                          " is extended with --budget")
    planned, problem = _trial_extension(workflow.stage(stage), budget)
    if budget <= planned:
        raise ReopenError(f"--budget must be above the {planned} trials stage {stage!r}"
                          f" plans, but got {budget}")
    if problem is not None:
        raise ReopenError(f"stage {stage!r} cannot be extended to {budget}: {problem}")
    finished = [s for s in downstream(workflow, stage) if s in events.summaries]
    if finished:
        raise ReopenError(
            f"stage {stage!r} cannot be extended: finished stage(s) {', '.join(finished)}"
            " took its results, which more trials would leave stale; start a new run with"
            f" search.warm_start: {{run directory}} instead")
    return StageReopened(stage=stage, budget=budget)


def _trial_extension(spec: Any, budget: int) -> tuple[int, str | None]:
    """The trials the stage's search plans, and why it could not be extended to
    ``budget`` (None: it can), asked of a searcher built as the stage builds it."""
    from nestor.search import Objective, make_searcher

    objectives = [Objective(o.metric, o.mode, o.threshold) for o in spec.objectives]
    searcher = make_searcher(spec.search.algorithm, spec.search_space(), objectives,
                             **spec.search_settings(None))
    planned = searcher.planned
    try:
        if budget > planned:
            searcher.extend(budget)
    except ValueError as exc:
        return planned, str(exc)
    return planned, None


def _retries(workflow: Workflow, events: JournalSoFar, taken: set[str]) -> list[StageReopened]:
    failed = []
    for name in workflow.order():
        if name not in events.summaries or _searches(workflow.stage(name)):
            continue
        trials = events.summaries[name].get("trials") or []
        if any(t.get("status") == TrialStatus.FAILED for t in trials):
            failed.append(name)
    if not failed:
        raise ReopenError("--retry found no finished stage with a failed trial to run again"
                          " (an hpo stage's failed trials are its search's results: extend"
                          " it with --budget)")
    names: list[str] = []
    for name in failed:
        for again in [name, *downstream(workflow, name)]:
            if again in events.summaries and again not in names and again not in taken:
                names.append(again)
    return [StageReopened(stage=name, retry=True) for name in workflow.order() if name in names]


def last_reopened(mine: list[Event]) -> tuple[StageReopened | None, list[Event]]:
    """A stage's last StageReopened among its events, and the events after it."""
    for at in range(len(mine) - 1, -1, -1):
        if isinstance(mine[at], StageReopened):
            return mine[at], mine[at + 1:]  # type: ignore[return-value]
    return None, []


def retry_plan(runner: Any, mine: list[Event]) -> None:
    """A reopened planned stage's failed trials asked again, once: unless a plan state
    journalled after the reopening already holds the retry."""
    reopened, after = last_reopened(mine)
    if reopened is None or not reopened.retry or not runner.search_log.is_plan:
        return
    if any(isinstance(e, PlanState) for e in after):
        return
    failed = [r.id for r in runner.records.values() if r.status == TrialStatus.FAILED]
    runner.searcher.retry(failed)
    runner.search_log.record()


def extend_search(runner: Any, mine: list[Event]) -> None:
    """A reopened search's budget raised to the one its StageReopened asks, logged in
    its search log; nothing where the log replayed already holds it."""
    budget = max((e.budget for e in mine
                  if isinstance(e, StageReopened) and e.budget is not None), default=None)
    if budget is None or budget <= runner.searcher.planned:
        return
    try:
        runner.searcher.extend(budget)
    except ValueError as exc:
        runner.broken = f"stage {runner.stage.name!r} cannot be extended to {budget}: {exc}"
        return
    runner.search_log.record()


def _differences(old: Any, new: Any, where: str = "") -> list[str]:
    """The dotted paths at which two specs' data differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            found += _differences(old.get(key), new.get(key), f"{where}.{key}" if where else key)
        return found
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True))
                for d in _differences(a, b, f"{where}[{i}]")]
    return [] if old == new else [where]


def edited_budget(saved: Workflow, edited: Workflow) -> dict[str, Any] | None:
    """What resuming a run with an edited copy of its spec asks: None where the edit
    changes nothing; a larger trial budget of one hpo stage, as :func:`reopenings`'
    keywords; ReopenError naming every other change, which a resumed run cannot
    honour (its journal, searches and trials were made with the saved spec)."""
    differ = _differences(saved.model_dump(by_alias=True), edited.model_dump(by_alias=True))
    if not differ:
        return None
    budgets = [d for d in differ if d.startswith("stages[") and d.endswith("].search.budget")]
    others = [d for d in differ if d not in budgets]
    if others or len(budgets) != 1:
        shown = ", ".join(others or budgets)
        raise ReopenError(
            f"the spec differs from the one the run started with in {shown}: a resumed run"
            " keeps its spec; only a larger search.budget of one hpo stage is accepted (it"
            " extends that search), or use `nestor resume RUN --budget N`")
    index = int(budgets[0][len("stages["):budgets[0].index("]")])
    stage = edited.stages[index]
    budget = stage.search.budget
    if not isinstance(budget, int):
        raise ReopenError(f"stage {stage.name!r}: only a budget of trials can be extended,"
                          f" but the edited spec gives {budget!r}")
    return {"budget": budget, "stage": stage.name}
