"""The search-algorithm interface of the paper (Fig. 5), which every strategy implements.

Order of calls, made by the master (``tasks/search_loop.py``) and nobody else:

1. ``sample_hyperparameter_candidates(n)`` returns up to ``n`` configurations to try next;
   fewer (or none) means the algorithm has nothing more to propose.
2. The master scores them (running trials or answering from the score cache).
3. ``update_state(candidates, scores)`` hands back the same candidates with one score each, in
   the same order. A failed trial's score is ``nan``; algorithms must tolerate it. A job with
   several objectives or with constraints tells each trial's metrics instead (a dict holding
   every objective and constraint metric; ``nan`` for a failed trial) to a strategy built with
   ``objectives`` and ``constraints`` (:mod:`ultron.algorithms.objectives`).
4. ``state_dict()`` may be called between any two calls; ``load_state_dict`` on a fresh
   instance built with the same arguments must give the same next candidates.

Only the algorithm changes its own state; the master never edits what ``state_dict`` returns.
A bring-your-own algorithm needs just the two paper methods; without ``state_dict`` it still runs,
but a restarted master cannot restore it exactly.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ultron.algorithms.space import Config, SearchSpace

__all__ = ["Direction", "HPOAlgorithm", "SearchAlgorithm"]


class Direction(StrEnum):
    """Whether lower or higher objective values are better."""

    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"


@runtime_checkable
class HPOAlgorithm(Protocol):
    """The two methods of the paper's ``HPOAlgorithmInterface``; all a user's class needs."""

    def sample_hyperparameter_candidates(self, n: int) -> list[Config]: ...

    def update_state(
        self, hyperparameter_candidates: Sequence[Config], validation_scores: Sequence[float]
    ) -> None: ...


class SearchAlgorithm(ABC):
    """Base class of the built-in strategies: owns the space, the direction and a seeded RNG.

    Args:
        search_space: the domains to draw configurations from.
        seed: seed of the algorithm's own ``numpy.random.Generator``.
        direction: whether the objective is minimized or maximized.
        objectives: the objectives (``Goal``) when the scores told are metric dicts; a
            strategy that ignores scores (random, grid) takes them as they come.
        constraints: bounds (``Bound``) on the metrics.
        **options: strategy options from the job spec's ``strategy_options``.
    """

    def __init__(
        self,
        search_space: SearchSpace,
        *,
        seed: int | None = None,
        direction: Direction | str = Direction.MINIMIZE,
        objectives: Sequence[Any] = (),
        constraints: Sequence[Any] = (),
        **options: Any,
    ) -> None:
        if options:
            name = type(self).__name__
            raise TypeError(f"{name} takes no options; got {sorted(options)}")
        self.search_space = search_space
        self.seed = seed
        self.direction = Direction(direction)
        self.goals: tuple[Any, ...] = tuple(objectives)
        self.bounds: tuple[Any, ...] = tuple(constraints)
        self.rng = np.random.default_rng(seed)

    @abstractmethod
    def sample_hyperparameter_candidates(self, n: int) -> list[Config]:
        """Return up to ``n`` new configurations, none repeated within the batch."""

    def update_state(
        self, hyperparameter_candidates: Sequence[Config], validation_scores: Sequence[float]
    ) -> None:
        """Learn from scored candidates; the default (model-free strategies) learns nothing."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly, as JSON-compatible data."""
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.rng.bit_generator.state = state["rng"]

    def signed(self, score: float) -> float:
        """The score as a loss: lower is better whatever the direction."""
        return -score if self.direction is Direction.MAXIMIZE else score
