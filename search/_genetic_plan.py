"""A genetic search's settings and the generations they plan.

Why apart from the algorithm: the spec checks a genetic search's settings and
plans its generations (how many a budget needs) before any search is built
(``spec/model.py`` reads :func:`plan_generations`), and the plan is arithmetic on
the settings alone, not part of the generational loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from nestor.search._settings import SearchSettings, setting


def plan_generations(
    population: int,
    generations: int | None,
    budget: int | None,
    mode: str = "generational",
    offspring: int | None = None,
) -> int:
    """How many generations a genetic search runs, its budget taken into account.

    Without ``generations`` the search plans as many as its ``budget`` needs
    (10 without a budget either), so ``budget: 200`` runs 200 trials rather than
    the 160 of the default 10 generations of 16. With both, the budget is
    honoured: a budget above the generations' trials breeds the generations it
    needs (refusing it left a user who asked for 200 trials to do the sum), and
    a budget below them cuts the last generation short, as "most trials to run"
    says.

    >>> plan_generations(16, None, 200), plan_generations(16, 10, 100)
    (13, 10)
    >>> plan_generations(16, 7, 200)
    13
    """
    size = (offspring or population) if mode == "mu_plus_lambda" else population

    if generations is None:
        if budget is None:
            return 10
        return 1 + max(0, -(-(budget - population) // size))
    if budget is not None and budget > population + size * (generations - 1):
        return plan_generations(population, None, budget, mode, offspring)
    return generations


def split(total: int, parts: int) -> list[int]:
    """``total`` shared as evenly as possible, the first parts taking the remainder."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


@dataclass(frozen=True)
class GeneticSettings(SearchSettings):
    population: int = setting(16, "individuals per generation (all demes)", ge=2)
    generations: int | None = setting(
        None, "generations to breed; default: as many as budget needs (10 without)", ge=1)
    mode: Literal["generational", "mu_plus_lambda"] = setting(
        "generational", "each generation replaces the last, or mu_plus_lambda: parents and"
        " children compete for the places")
    offspring: int | None = setting(
        None, "mu_plus_lambda: children per generation (lambda); default: population", ge=1)
    schedule: Literal["generational", "async"] = setting(
        "generational", "barrier per generation, or breed as each result returns")
    demes: int = setting(1, "islands evolving apart, with migration", ge=1)
    migration_interval: int = setting(5, "generations between migrations", ge=1)
    migration_size: int = setting(1, "individuals sent per migration", ge=1)
    mutation_rate: float = setting(0.3, "chance a child is mutated", ge=0.0, le=1.0)
    crossover_rate: float = setting(0.5, "chance two parents cross over", ge=0.0, le=1.0)
    crossover: Literal["blend", "sbx", "de"] = setting(
        "blend", "how numbers cross over: blend, simulated binary (sbx), or differential"
        " evolution (de: JADE's current-to-pbest/1, F and CR self-adapted)")
    tournament_size: int = setting(3, "individuals in each parent tournament", ge=2)
    elitism: int = setting(1, "best individuals kept unchanged (hall of fame)", ge=0)
    patience: int | None = setting(
        None, "stop after this many generations without improvement", ge=1)
    sigma: float = setting(0.1, "mutation step, a share of each gene's range", gt=0,
                           public=False)
    sigma_rule: Literal["one_fifth", "fixed"] = setting(
        "one_fifth", "mutation step: adapted by the one-fifth success rule, or fixed")
    alpha: float = setting(0.5, "blend crossover's alpha", gt=0, public=False)
    eta: float = setting(10.0, "sbx's crowding degree", gt=0, public=False)

    def check(self) -> None:
        if self.population < 2 * self.demes:
            raise ValueError(
                f"population must be at least 2 per deme ({2 * self.demes} for"
                f" {self.demes} demes), but got {self.population}"
            )
        if self.elitism >= self.population:
            raise ValueError(
                f"elitism must be less than population ({self.population}),"
                f" but got {self.elitism}"
            )
        if self.mode == "mu_plus_lambda" and self.crossover_rate + self.mutation_rate > 1:
            raise ValueError(
                "crossover_rate + mutation_rate must be at most 1 in mode mu_plus_lambda,"
                f" but got {self.crossover_rate + self.mutation_rate:g}"
            )
