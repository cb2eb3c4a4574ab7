"""Grid search: every point of the Cartesian grid, in order, once."""

from __future__ import annotations

from typing import Any

from ultron.algorithms.base import Direction, SearchAlgorithm
from ultron.algorithms.space import Config, SearchSpace

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
    ) -> None:
        super().__init__(search_space, seed=seed, direction=direction)
        self._grid = search_space.grid(points)
        if seed is not None:
            order = self.rng.permutation(len(self._grid))
            self._grid = [self._grid[i] for i in order]
        self._next = 0

    def sample_hyperparameter_candidates(self, n: int) -> list[Config]:
        batch = self._grid[self._next : self._next + n]
        self._next += len(batch)
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "next": self._next}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._next = int(state["next"])
