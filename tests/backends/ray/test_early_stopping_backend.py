"""Early stopping is the backend's: the engine asks it for a judge and never names Ray."""

from __future__ import annotations

import pytest

from nestor.orchestrator.backends import ClusterError, SimulatedBackend, fixed_trials
from nestor.orchestrator.backends.ray.pruning import RayEarlyStopping
from nestor.orchestrator.spec.model import EarlyStopping


def test_a_backend_without_a_judge_refuses_early_stopping_and_needs_none_without_it():
    backend = SimulatedBackend(1, 1, fixed_trials(1.0))
    assert backend.early_stopping(None, None) is None
    with pytest.raises(ClusterError, match="cannot run early_stopping"):
        backend.early_stopping(EarlyStopping(rule="median"), None)


class FakeActor:
    """Stands for the Ray actor handle: records the calls the driver sends it."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, tuple]] = []
        for name in ("start", "finish"):
            setattr(self, name, type("Method", (), {
                "remote": lambda _, *args, n=name: self.sent.append((n, args))})())


def test_rays_judge_registers_each_attempt_hands_rank_0_its_hooks_and_hears_the_end():
    actor = FakeActor()
    judge = RayEarlyStopping(actor)
    hooks = judge.begin("7")
    assert set(hooks) == {"report", "should_stop"}
    assert hooks["report"].key == hooks["should_stop"].key == "7"
    judge.finish("7", 0.5, pruned=True)
    assert actor.sent == [("start", ("7",)), ("finish", ("7", 0.5, True))]
