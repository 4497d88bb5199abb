"""Events read back typed: every kind the driver writes parses to its class."""

from __future__ import annotations

import pytest

from nestor.orchestrator.journal import events as ev
from nestor.orchestrator.journal.journal import Journal, read_events


def test_every_written_kind_reads_back_as_its_class(tmp_path):
    written = [
        ev.WorkflowStarted(workflow="w", slots=2, pid=1, run_key="k"),
        ev.StageStarted(stage="s", stage_kind="hpo", sources=[]),
        ev.TrialStarted(stage="s", trial={"id": "t1"}, attempt=1, gang=0, shape="1x1"),
        ev.TrialFinished(stage="s", trial={"id": "t1"}, attempt=1, status="completed",
                         value=0.5, metrics={}, reason=None, slot_seconds=1.0),
        ev.CheckpointRemoved(stage="s", trial="t1", path="/x"),
        ev.StageFinished(stage="s", summary={}),
        ev.WorkflowFinished(),
    ]
    journal = Journal(tmp_path / "journal.jsonl", fsync=False)
    for event in written:
        journal.record(event)
    journal.close()
    back = [ev.parse(r) for r in read_events(tmp_path / "journal.jsonl")]
    assert [type(e) for e in back] == [type(e) for e in written]
    assert back == written  # equal in every field; the stamp is not compared
    assert all(e.time > 0 for e in back)


def test_an_unknown_kind_is_named_with_the_known_ones():
    with pytest.raises(ev.UnknownEvent, match="but got 'no_such'"):
        ev.parse({"event": "no_such", "time": 1.0})


def test_a_field_from_a_newer_writer_is_dropped_and_a_missing_optional_defaults():
    e = ev.parse({"event": "trial_started", "time": 1.0, "stage": "s", "trial": {},
                  "attempt": 1, "gang": None, "shape": "1x1", "added_later": 3})
    assert isinstance(e, ev.TrialStarted) and e.comm == "horovod" and not e.adopted
