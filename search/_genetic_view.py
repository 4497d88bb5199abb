"""What a genetic search's parts read and change of it: the Protocol GeneticSearch meets.

Why: the parts (variation, step control, the steady state, the snapshot) work on the
search's population and settings; typed against this Protocol rather than
:class:`~nestor.search._genetic.GeneticSearch`, they import nothing of the search, so
the imports run one way (the search imports its parts) and no circle forms.
"""

from __future__ import annotations

import random
from typing import Any, Literal, Protocol

from nestor.search._book import Book
from nestor.search._genetic_genome import Gene, Individual
from nestor.search._records import Trial
from nestor.search.space import Scalar, SearchSpace


class GeneticView(Protocol):
    """A genetic search as its parts see it (attributes as GeneticSearch names them)."""

    space: SearchSpace
    population: int
    demes: int
    migration_interval: int
    tournament_size: int
    crossover: Literal["blend", "sbx", "de"]
    crossover_rate: float
    mutation_rate: float
    sigma: float
    sigma_rule: Literal["one_fifth", "fixed"]
    alpha: float
    eta: float
    _book: Book
    _rng: random.Random
    _genes: list[Gene]
    _numeric: list[int]
    _categorical: list[int]
    _rank_fitness: type
    _deme_sizes: list[int]
    _brood_sizes: list[int]
    _parents: list[list[Individual]]
    _parents_changed: int
    _best_by_deme: dict[int, tuple[int, Any]]
    _halls: list[Any]  # DEAP's HallOfFame per deme
    _members: dict[str, Individual]
    _queue: list[Individual]
    _batch: list[Individual]
    _seeds: list[dict[str, Scalar]]
    _generation: int
    _started: bool
    _stall: int
    _best_mark: Any
    _best_seen: int
    _best_key_so_far: tuple[float, ...] | None
    _budgeted: bool
    _failures_in_row: int
    _last_failure: str
    _results: int
    # The other parts (typed loosely: their modules import this one).
    _steps: Any  # StepControl, search/_genetic_step.py
    _steady: Any  # SteadyState, search/_genetic_steady.py
    _variation: Any  # Variation, search/_genetic_variation.py

    @property
    def multi_objective(self) -> bool: ...
    @property
    def mutation_step(self) -> float: ...
    @property
    def _generation_size(self) -> int: ...
    def _individual(self, genes: list[float], deme: int, parents: tuple[str, ...] = (),
                    origin: str = "random") -> Individual: ...
    def _decode(self, ind: list[float]) -> dict[str, Scalar]: ...
    def _encode(self, config: dict[str, Scalar]) -> list[float]: ...
    def _trial_for(self, ind: Individual, generation: int) -> Trial: ...
    def _deme_best(self, deme: int) -> Any: ...
    def _stop(self, reason: str) -> None: ...
    def _migrate(self) -> None: ...
    def _check_progress(self) -> None: ...
