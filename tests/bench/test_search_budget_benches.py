"""The held-out multi-fidelity and many-at-once benches: what they measure is what
their docstrings say (budget spent, slots kept busy, ranks), on one small run each."""

from __future__ import annotations

from bench import many_at_once_bench as wide
from bench import multifidelity_heldout_bench as heldout


def test_every_heldout_search_spends_the_same_epochs_or_less() -> None:
    problem = heldout.PROBLEMS[0]
    reference = heldout.best_floor(problem)
    for name in ("hyperband", "bohb (d+3, rho 1/3)", "random (100 epochs each)",
                 "old auto (hb tpe eta 2, 25-100)"):
        result = heldout.run(name, problem, 0, reference)
        assert result["spent"] <= heldout.BUDGET
        assert set(result["regret"]) == set(heldout.FRACTIONS)
        assert all(r < float("inf") for r in result["regret"].values())
    # Whole iterations: the old auto left 200 of 3,000 epochs; the cost budget does not.
    assert heldout.run("old auto (hb tpe eta 2, 25-100)", problem, 0, reference)["spent"] == 2800
    assert heldout.BUDGET - heldout.run("hyperband", problem, 0, reference)["spent"] < 67


def test_ranks_share_ties() -> None:
    assert heldout.ranks({"a": 1.0, "b": 1.0, "c": 2.0}) == {"a": 1.5, "b": 1.5, "c": 3.0}


def test_auto_keeps_every_slot_busy_at_64() -> None:
    """Auto at 64 at once: every evaluation run, no slot left waiting on it."""
    result = wide.run("auto", wide.PROBLEMS[0], 0, 64)
    assert result["evaluations"] == wide.ROUNDS * 64
    assert result["idle"] == 0.0
    assert result["label"].startswith("genetic async")


def test_auto_at_16_keeps_every_slot_busy_with_async_lq_cmaes() -> None:
    """Auto at 16 at once on numbers (rule 3a): every evaluation run, and no slot idles
    on the bench's virtual clock (the generational schedule idled about a third)."""
    result = wide.run("auto", wide.PROBLEMS[0], 0, 16)
    assert result["evaluations"] == wide.ROUNDS * 16
    assert result["label"] == "bayesian lq-cmaes, async"
    assert result["idle"] == 0.0


def test_idle_is_slot_time_waiting_on_the_searcher_not_the_drain_at_the_budgets_end() -> None:
    """A generational search's slots wait for each generation's last trials: idle. ASHA
    under an epoch budget stops with less than a trial's worth unspent while its last
    trials run (3 of 7,776 epochs here): that drain is no slot waiting on the searcher,
    as it is not for a search of whole trainings that spent the budget to the epoch."""
    generational = wide.run("bayesian:sampler=lq-cmaes,population=16", wide.PROBLEMS[0], 0, 16)
    assert generational["idle"] > 0.2
    crossing = next(p for p in wide.HELDOUT_PROBLEMS if p.name == "mf-crossing-5d")
    asha = wide.run("auto", crossing, 1, 16)
    assert asha["label"].startswith("asha tpe") and asha["spent"] < 16 * 6 * 81
    assert asha["idle"] == 0.0


def test_a_multi_fidelity_problem_spends_the_epochs_of_its_full_trainings() -> None:
    """On a multi-fidelity problem a search that trains every trial in full spends
    ROUNDS x width full trainings' epochs, and only full trainings count as found."""
    problem = next(p for p in wide.HELDOUT_PROBLEMS if p.fidelity is not None)
    result = wide.run("random", problem, 0, 16)
    assert result["spent"] == wide.ROUNDS * 16 * problem.fidelity
    assert result["evaluations"] == wide.ROUNDS * 16
    config = {f"x{i}": 0.4 + 0.05 * i for i in range(5)}  # the floor's optimum
    assert problem.loss(config, problem.fidelity) < problem.loss(config, 3) < wide.UNTRAINED
    assert result["best"] >= problem.loss(config, problem.fidelity)


def test_a_sweep_runs_a_nestor_search_with_the_settings_named() -> None:
    """``--only ALGO:KEY=VALUE,...`` runs that search with those settings (rule sweeps)."""
    assert wide.candidate("bayesian:sampler=lq-cmaes,population=16") == (
        "bayesian", {"sampler": "lq-cmaes", "population": 16})
    result = wide.run("genetic:population=8,schedule=async,sigma=0.2",
                      wide.PROBLEM_SETS["dev-numeric"][0], 0, 16)
    assert result["label"] == "genetic population 8, schedule async, sigma 0.2"
    assert result["evaluations"] == wide.ROUNDS * 16
