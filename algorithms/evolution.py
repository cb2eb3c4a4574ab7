"""Regularized (aging) evolution: steady-state tournament selection, oldest member dies.

Conditional and variable-length spaces: mutation and crossover work on the space's flat view
(:mod:`ultron.algorithms.space`) and repair the child so that it holds exactly its active
parameters.

Real et al. 2019 ("Regularized Evolution for Image Classifier Architecture Search"), which
``nas-rpc.tex`` recommends over generations: with tournament selection in a steady state, the
number of outstanding evaluations never holds up the production of new candidates, so an
asynchronous master keeps every worker busy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ultron.algorithms.base import Direction, SearchAlgorithm
from ultron.algorithms.space import Choice, Config, Domain, SearchSpace, canonical

__all__ = ["RegularizedEvolution"]

_MAX_REDRAWS = 50


class RegularizedEvolution(SearchAlgorithm):
    """Mutates the winner of a random tournament; the population keeps the youngest members.

    The first ``population_size`` candidates are random. After that each candidate is a mutant of
    the best of ``sample_size`` members drawn at random from the population (the tournament).
    Every scored candidate joins the population and, once it is full, the oldest member leaves
    (aging, the "regularization"), whatever its score. Failed trials (nan) join with the worst
    possible score so that they age out like the others. Members told before any proposal (a
    warm start's earlier trials) join too and count toward the first population.

    Args:
        search_space: the domains.
        seed: seed of the generator that draws tournaments and mutations.
        direction: minimize or maximize the score.
        population_size: P in the paper: how many of the most recent members survive.
        sample_size: S in the paper: tournament size (2 is the pairwise tournament of nas-rpc).
        mutation_scale: standard deviation of a numeric mutation, as a fraction of the range.
        crossover_rate: the share of candidates bred from two tournament winners by uniform
            crossover before the mutation (0, the paper's aging evolution: mutation only).

    Example:
        >>> from ultron.algorithms.space import Choice, SearchSpace
        >>> space = SearchSpace({"op": Choice(("conv", "pool", "skip")), "k": Choice((3, 5))})
        >>> algo = RegularizedEvolution(space, seed=0, population_size=2, sample_size=2)
        >>> first = algo.sample_hyperparameter_candidates(2)
        >>> algo.update_state(first, [0.3, 0.1])
        >>> child = algo.sample_hyperparameter_candidates(1)[0]
        >>> space.contains(child) and child != first[1]
        True
    """

    def __init__(
        self,
        search_space: SearchSpace,
        *,
        seed: int | None = None,
        direction: Direction | str = Direction.MINIMIZE,
        population_size: int = 20,
        sample_size: int = 5,
        mutation_scale: float = 0.2,
        crossover_rate: float = 0.0,
    ) -> None:
        super().__init__(search_space, seed=seed, direction=direction)
        if population_size < 2:
            raise ValueError(f"population_size is {population_size}; it must be at least 2")
        if not 1 <= sample_size <= population_size:
            raise ValueError(
                f"sample_size is {sample_size}; it must be between 1 and population_size "
                f"({population_size}): lower it or raise population_size"
            )
        if not 0.0 <= crossover_rate <= 1.0:
            raise ValueError(
                f"crossover_rate is {crossover_rate}; it must be between 0 and 1 (0: mutation only)"
            )
        self.population_size = population_size
        self.sample_size = sample_size
        self.mutation_scale = mutation_scale
        self.crossover_rate = crossover_rate
        self._population: list[tuple[Config, float]] = []  # oldest first; losses
        self._proposed = 0
        self._told = 0
        # Members told before they were proposed (a warm start's earlier trials): they fill
        # the first population as the random members would.
        self._prior = 0

    def sample_hyperparameter_candidates(self, n: int) -> list[Config]:
        batch: list[Config] = []
        seen: set[str] = set()
        for _ in range(n):
            for attempt in range(_MAX_REDRAWS + 1):
                config = self._propose()
                key = canonical(config)
                if (
                    key not in seen
                    or attempt == _MAX_REDRAWS
                    or len(seen) >= self.search_space.size
                ):
                    break
            seen.add(key)
            batch.append(config)
        self._proposed += len(batch)
        return batch

    def _propose(self) -> Config:
        # Random members until the population has filled once (counting outstanding ones).
        if self._proposed + self._prior < self.population_size or not self._population:
            return self.search_space.sample(self.rng)
        parent = self._tournament()
        if self.crossover_rate > 0 and self.rng.uniform() < self.crossover_rate:
            parent = self._crossover(parent, self._tournament())
        return self._mutate(parent)

    def _tournament(self) -> Config:
        """The best of ``sample_size`` members drawn at random from the population."""
        size = min(self.sample_size, len(self._population))  # few told yet, many outstanding
        picks = self.rng.choice(len(self._population), size=size, replace=False)
        return min((self._population[int(i)] for i in picks), key=lambda member: member[1])[0]

    def _crossover(self, first: Config, second: Config) -> Config:
        """Uniform crossover on the flat view: each active parameter from either parent (from
        the one that has it, over lists of different lengths; drawn afresh if neither has)."""
        space = self.search_space
        a, b = space.flatten(first), space.flatten(second)
        child: Config = {}
        for name, domain in space.items():
            if not space.is_active(name, child):
                continue
            options = [parent[name] for parent in (a, b) if name in parent]
            if not options:
                child[name] = domain.sample(self.rng)
            else:
                child[name] = options[int(self.rng.integers(len(options)))]
        return space.nest(child)

    def _mutate(self, parent: Config) -> Config:
        """Change one active hyper-parameter, and each other active one with probability 1/d.

        In a conditional space the child is then repaired in the space's order: a parameter
        the change made inactive is dropped, one it made active (SGD's momentum, a new layer)
        is drawn afresh; a list's count steps like any integer, so layers come and go at the
        end of the list.
        """
        space = self.search_space
        flat = space.flatten(parent)
        names = [name for name in space if name in flat]
        forced = names[int(self.rng.integers(len(names)))]
        child = dict(flat)
        for name in names:
            if name == forced or self.rng.uniform() < 1.0 / len(names):
                child[name] = self._mutate_value(space[name], flat[name])
        if not space.conditional:
            return child
        repaired: Config = {}
        for name, domain in space.items():
            if space.is_active(name, repaired):
                repaired[name] = child[name] if name in child else domain.sample(self.rng)
        return space.nest(repaired)

    def _mutate_value(self, domain: Domain, value: Any) -> Any:
        if isinstance(domain, Choice):
            others = [v for v in domain.values if v != value] or list(domain.values)
            return others[int(self.rng.integers(len(others)))]
        for _ in range(10):
            u = domain.to_unit(value) + self.mutation_scale * float(self.rng.normal())
            mutant = domain.from_unit(_reflect(u))
            if mutant != value:
                return mutant
        return domain.sample(self.rng)

    def update_state(
        self, hyperparameter_candidates: Sequence[Config], validation_scores: Sequence[float]
    ) -> None:
        self._told += len(hyperparameter_candidates)
        self._prior = max(self._prior, self._told - self._proposed)
        for config, score in zip(hyperparameter_candidates, validation_scores, strict=True):
            loss = math.inf if math.isnan(score) else self.signed(float(score))
            self._population.append((dict(config), loss))
            if len(self._population) > self.population_size:
                self._population.pop(0)  # aging: the oldest dies, not the worst

    def state_dict(self) -> dict[str, Any]:
        population = [[config, _finite(loss)] for config, loss in self._population]
        return {
            **super().state_dict(),
            "population": population,
            "proposed": self._proposed,
            "told": self._told,
            "prior": self._prior,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._population = [
            (dict(config), math.inf if loss is None else float(loss))
            for config, loss in state["population"]
        ]
        self._proposed = int(state["proposed"])
        self._told = int(state.get("told", self._proposed))  # older states: no prior
        self._prior = int(state.get("prior", 0))


def _reflect(u: float) -> float:
    """Fold a unit coordinate that stepped outside [0, 1] back inside, like a mirror."""
    u = abs(u) % 2.0
    return 2.0 - u if u > 1.0 else u


def _finite(loss: float) -> float | None:
    return None if math.isinf(loss) else loss
