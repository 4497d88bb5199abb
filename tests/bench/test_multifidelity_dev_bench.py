"""The dev multi-fidelity suite is what its docstring says: two problems whose cheap
fidelities rank configurations as the full one does, two where they mislead, in
3-8 dimensions (no search runs here)."""

from __future__ import annotations

from bench import multifidelity_dev_bench as dev

RUNGS = (1, 4, 11, 33)  # the bench's halving rungs below the full 100 epochs


def test_the_suite_has_two_faithful_and_two_misleading_problems_of_3_to_8_dims() -> None:
    assert len(dev.FAITHFUL) >= 2 and len(dev.MISLEADING) >= 2
    assert all(3 <= len(p.space.searched) <= 8 for p in dev.PROBLEMS)
    assert len({p.name for p in dev.PROBLEMS}) == len(dev.PROBLEMS)


def test_faithful_fidelities_rank_and_pick_as_the_full_training_does() -> None:
    for problem in dev.FAITHFUL:
        for epochs in RUNGS:
            assert dev.rank_correlation(problem, epochs) > 0.99, (problem.name, epochs)
            assert dev.pick_regret(problem, epochs) == 0.0, (problem.name, epochs)


def test_misleading_fidelities_pick_a_worse_configuration_until_late() -> None:
    """Trusting the first three rungs picks a configuration at least 0.3 worse in
    floor than the best of the same random ones; the full training picks right."""
    for problem in dev.MISLEADING:
        for epochs in RUNGS[:3]:
            assert dev.pick_regret(problem, epochs) > 0.3, (problem.name, epochs)
        assert dev.pick_regret(problem, 100) == 0.0
    capacity = next(p for p in dev.MISLEADING if "capacity" in p.name)
    assert dev.rank_correlation(capacity, 1) < 0  # ranked backwards at one epoch
