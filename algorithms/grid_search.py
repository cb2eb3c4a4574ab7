"""Grid search: every point of the Cartesian grid, in order, once.

A point the strategy is told before proposing it (a warm start's earlier trial) is skipped:
its score is known.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ultron.algorithms.base import Direction, SearchAlgorithm
from ultron.algorithms.space import Config, SearchSpace, canonical

__all__ = ["GridSearch"]


class GridSearch(SearchAlgorithm):
    """Walks the grid of the search space; returns no candidates once it is exhausted.

    Args:
        search_space: the domains; continuous ones are cut into ``points`` values.
        seed: if given, the grid is visited in a seeded random order instead of in order.
        direction: unused by grid search, kept for the common signature.
        points: values per continuous domain (default 5).

    Example:
        >>> from ultron.algorithms.space import Choice, SearchSpace
        >>> algo = GridSearch(SearchSpace({"x": Choice((1, 2)), "y": Choice(("a", "b"))}))
        >>> algo.sample_hyperparameter_candidates(10)
        [{'x': 1, 'y': 'a'}, {'x': 1, 'y': 'b'}, {'x': 2, 'y': 'a'}, {'x': 2, 'y': 'b'}]
    """

    def __init__(
        self,
        search_space: SearchSpace,
        *,
        seed: int | None = None,
        direction: Direction | str = Direction.MINIMIZE,
        points: int = 5,
        objectives: Sequence[Any] = (),
        constraints: Sequence[Any] = (),
    ) -> None:
        super().__init__(
            search_space,
            seed=seed,
            direction=direction,
            objectives=objectives,
            constraints=constraints,
        )
        self._grid = search_space.grid(points)
        if seed is not None:
            order = self.rng.permutation(len(self._grid))
            self._grid = [self._grid[i] for i in order]
        self._next = 0
        self._told_ahead: set[int] = set()  # grid indices told before they were proposed
        self._index: dict[str, int] | None = None

    def sample_hyperparameter_candidates(self, n: int) -> list[Config]:
        batch: list[Config] = []
        while len(batch) < n and self._next < len(self._grid):
            if self._next not in self._told_ahead:
                batch.append(self._grid[self._next])
            self._next += 1
        return batch

    def update_state(
        self, hyperparameter_candidates: Sequence[Config], validation_scores: Sequence[float]
    ) -> None:
        """Points not proposed yet are skipped: their scores are known (a warm start)."""
        if self._index is None:
            self._index = {canonical(point): i for i, point in enumerate(self._grid)}
        for config in hyperparameter_candidates:
            i = self._index.get(canonical(config))
            if i is not None and i >= self._next:
                self._told_ahead.add(i)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "next": self._next, "told": sorted(self._told_ahead)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._next = int(state["next"])
        self._told_ahead = {int(i) for i in state.get("told", ())}
