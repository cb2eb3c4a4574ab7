"""Random search: independent draws from the search space."""

from __future__ import annotations

from ultron.algorithms.base import SearchAlgorithm
from ultron.algorithms.space import Config, canonical

__all__ = ["RandomSearch"]

_MAX_REDRAWS = 100


class RandomSearch(SearchAlgorithm):
    """Draws each configuration independently; no duplicates within one batch.

    Duplicates across batches can happen in a small space; the master's score cache answers
    them without training.

    Example:
        >>> from ultron.algorithms.space import Choice, SearchSpace
        >>> algo = RandomSearch(SearchSpace({"x": Choice((1, 2, 3))}), seed=1)
        >>> len(algo.sample_hyperparameter_candidates(3))
        3
    """

    def sample_hyperparameter_candidates(self, n: int) -> list[Config]:
        batch: list[Config] = []
        seen: set[str] = set()
        redraws = 0
        while len(batch) < n:
            config = self.search_space.sample(self.rng)
            key = canonical(config)
            # Redraw a duplicate unless the space is exhausted (or nearly so) within this batch.
            if key in seen and len(seen) < self.search_space.size and redraws < _MAX_REDRAWS:
                redraws += 1
                continue
            seen.add(key)
            batch.append(config)
        return batch
