"""What MLflow must show for a journal, worked out from the journal alone, and the
check that it does: every trial's run with its params, its metrics step by step,
its tags and its end state; every stage's run with its tags and end.

Written from the projection's contract (the projector module's docstring, the
README's MLflow section), not from the projector's code, so a projector that drops,
doubles or reorders an event (the first of a batch, the last) fails it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENDED = {"completed": "FINISHED", "pruned": "KILLED"}  # any other end: FAILED
# Tags the tracker adds for its own book-keeping, not from any event.
OWN_TAGS = {"nestor.key", "nestor.run_key", "nestor.run_dir"}


@dataclass
class Shown:
    """One MLflow run as the journal says it should be."""

    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, list[tuple[int, float, int]]] = field(default_factory=dict)
    status: str = "RUNNING"
    end_ms: int | None = None
    parent: str | None = None  # the stage's run name, for a trial's run


def _text(value: Any) -> str:
    return str(value)


def _log(run: Shown, values: dict[str, Any], step: int, at: float) -> None:
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            run.metrics.setdefault(key, []).append((step, float(value), int(at * 1000)))
        else:  # MLflow refuses NaN and infinities: they are shown as tags
            run.tags[f"nestor.metric.{key}"] = str(value)


def expected(events: list[dict[str, Any]]) -> dict[str, Shown]:
    """The runs ``events`` (a journal's records, in order) make MLflow show, by run
    name."""
    runs: dict[str, Shown] = {}
    kinds = {e["stage"]: e["stage_kind"] for e in events if e["event"] == "stage_started"}

    def stage_run(name: str) -> Shown:
        if name not in runs:
            runs[name] = Shown(tags={"nestor.stage": name, "nestor.kind": kinds[name]})
        return runs[name]

    def trial_run(event: dict[str, Any]) -> Shown:
        stage, trial = event["stage"], event["trial"]
        stage_run(stage)
        name = f"{stage}/{trial['id']}"
        if name not in runs:
            runs[name] = Shown(
                params={k: _text(v) for k, v in trial["config"].items()}, parent=stage,
                tags={"nestor.stage": stage, "nestor.trial": trial["id"],
                      "nestor.generation": _text(trial.get("generation", 0)),
                      "nestor.deme": _text(trial.get("deme", 0)),
                      "nestor.parents": ",".join(trial.get("parents", [])),
                      "nestor.status": "running"})
        return runs[name]

    for event in events:
        kind = event["event"]
        if kind == "stage_started":
            stage_run(event["stage"]).tags["nestor.from"] = ",".join(event["sources"] or [])
        elif kind == "trial_started":
            trial_run(event).tags.update({
                "nestor.status": "running", "nestor.attempts": _text(event["attempt"]),
                "nestor.shape": event["shape"] or "",
                "nestor.backend": event.get("comm") or "horovod",
                "nestor.gang": _text(event["gang"])})
        elif kind == "trial_attempt_failed":
            trial_run(event).tags.update({
                "nestor.attempts": _text(event["attempt"]),
                f"nestor.attempt{event['attempt']}.failure": event["reason"]})
        elif kind == "trial_finished":
            run = trial_run(event)
            history = event.get("history") or []
            for step, values in enumerate(history):
                _log(run, values, step, event["time"])
            _log(run, event.get("metrics") or {}, len(history), event["time"])
            # What the trial's code logged itself (ctx.log_metrics, `nestor.metric` lines):
            # each point at its own step and time.
            for key, rows in ((event.get("logged") or {}).get("metrics") or {}).items():
                for step, value, at in rows:
                    _log(run, {key: value}, step, at)
            run.tags.update({"nestor.status": event["status"],
                             "nestor.attempts": _text(event["attempt"])})
            if event.get("reason"):
                run.tags["nestor.failure"] = event["reason"]
            run.status = ENDED.get(event["status"], "FAILED")
            run.end_ms = int(event["time"] * 1000)
        elif kind == "trial_interrupted":
            trial_run(event).tags["nestor.status"] = "interrupted"
        elif kind == "threshold_reached":
            stage_run(event["stage"]).tags["nestor.threshold_trial"] = event["trial"]
        elif kind == "stage_finished":
            run, summary = stage_run(event["stage"]), event["summary"]
            run.tags.update({"nestor.n_runs": _text(summary["n_runs"]),
                             "nestor.stop_reason": _text(summary["stop_reason"])})
            run.status, run.end_ms = "FINISHED", int(event["time"] * 1000)
    return runs


def journal_events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]


def assert_mlflow_shows_every_event(client: Any, experiment_id: str,
                                    events: list[dict[str, Any]]) -> int:
    """Fail, naming the run and what differs, unless the experiment's runs are exactly
    those ``events`` make, each showing all they say; returns the runs compared."""
    want = expected(events)
    runs = client.search_runs([experiment_id], max_results=50_000)
    names = [r.info.run_name for r in runs]
    assert sorted(names) == sorted(want), (
        f"runs missing: {sorted(set(want) - set(names))[:10]},"
        f" not in the journal or doubled: {sorted(set(names) - set(want))[:10]}"
        f" ({len(names)} runs for {len(want)})")
    by_name = {r.info.run_name: r for r in runs}
    for name, shown in want.items():
        run = by_name[name]
        tags = {k: v for k, v in run.data.tags.items()
                if k.startswith("nestor.") and k not in OWN_TAGS}
        if shown.parent is not None:  # a stage's own tags: its kind, its headline...
            assert tags == shown.tags, f"run {name}: tags {tags} != {shown.tags}"
            parent = by_name[shown.parent].info.run_id
            assert run.data.tags.get("mlflow.parentRunId") == parent, f"run {name}: parent"
        else:
            missing = {k: v for k, v in shown.tags.items() if tags.get(k) != v}
            assert not missing, f"stage run {name}: tags {missing} not shown ({tags})"
        assert run.data.params == shown.params, f"run {name}: params {run.data.params}"
        assert run.info.status == shown.status, f"run {name}: {run.info.status}"
        if shown.end_ms is not None:
            assert run.info.end_time == shown.end_ms, f"run {name}: ended {run.info.end_time}"
        if shown.parent is None:
            continue
        assert set(run.data.metrics) == set(shown.metrics), (
            f"run {name}: metrics {sorted(run.data.metrics)} != {sorted(shown.metrics)}")
        for key, steps in shown.metrics.items():
            history = sorted((m.step, m.value, m.timestamp)
                             for m in client.get_metric_history(run.info.run_id, key))
            assert history == sorted(steps), f"run {name}: {key} {history} != {steps}"
    return len(want)
