"""A bring-your-own search algorithm: stochastic hill climbing around the best configuration.

The master builds it as ``HillClimbing(search_space, seed=..., direction=..., **strategy_options)``
and then only calls the paper's two methods (Ultron-AutoML, Fig. 5). ``state_dict`` and
``load_state_dict`` are optional; with them, a restarted master continues exactly where it was.

The search space is ultron's ``SearchSpace``: a mapping of names to domains, each with
``sample(rng)``, ``to_unit(value)`` and ``from_unit(u)``; nothing else of ultron is needed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["HillClimbing"]


class HillClimbing:
    """Random configurations first, then Gaussian steps (in the unit cube) from the best one.

    The step size shrinks when a batch brings no improvement and grows when one does.

    Args:
        search_space: the domains, as the master passes them.
        seed: seed of the algorithm's own random generator.
        direction: ``"minimize"`` or ``"maximize"``.
        n_random: how many random configurations to try before climbing.
        step: initial standard deviation of a step, as a fraction of each range.

    Example:
        >>> from ultron.algorithms.space import SearchSpace, Uniform
        >>> algo = HillClimbing(SearchSpace({"x": Uniform(0.0, 1.0)}), seed=0, n_random=2)
        >>> batch = algo.sample_hyperparameter_candidates(2)
        >>> algo.update_state(batch, [abs(c["x"] - 0.3) for c in batch])
        >>> 0.0 <= algo.sample_hyperparameter_candidates(1)[0]["x"] <= 1.0
        True
    """

    def __init__(
        self,
        search_space: Mapping[str, Any],
        *,
        seed: int | None = None,
        direction: str = "minimize",
        n_random: int = 10,
        step: float = 0.2,
    ) -> None:
        self.search_space = search_space
        self.sign = -1.0 if str(direction).lower().endswith("maximize") else 1.0
        self.n_random = n_random
        self.rng = np.random.default_rng(seed)
        self._step = step
        self._best: dict[str, Any] | None = None
        self._best_loss = math.inf
        self._proposed = 0

    def sample_hyperparameter_candidates(self, n: int) -> list[dict[str, Any]]:
        batch: list[dict[str, Any]] = []
        keys: set[str] = set()
        while len(batch) < n:
            config = self._propose()
            key = json.dumps(config, sort_keys=True)
            if key in keys and len(keys) < _size(self.search_space):
                continue
            keys.add(key)
            batch.append(config)
            self._proposed += 1
        return batch

    def _propose(self) -> dict[str, Any]:
        if self._best is None or self._proposed < self.n_random:
            return {name: domain.sample(self.rng) for name, domain in self.search_space.items()}
        return {
            name: domain.from_unit(
                float(
                    np.clip(domain.to_unit(self._best[name]) + self._step * self.rng.normal(), 0, 1)
                )
            )
            for name, domain in self.search_space.items()
        }

    def update_state(
        self,
        hyperparameter_candidates: Sequence[dict[str, Any]],
        validation_scores: Sequence[float],
    ) -> None:
        improved = False
        for config, score in zip(hyperparameter_candidates, validation_scores, strict=True):
            if math.isnan(score):
                continue  # a failed trial tells us nothing about the slope
            if self.sign * score < self._best_loss:
                self._best, self._best_loss, improved = dict(config), self.sign * score, True
        if self._proposed > self.n_random:
            self._step = min(0.5, self._step * 1.5) if improved else max(0.01, self._step * 0.7)

    def state_dict(self) -> dict[str, Any]:
        return {
            "rng": self.rng.bit_generator.state,
            "step": self._step,
            "best": self._best,
            "best_loss": None if math.isinf(self._best_loss) else self._best_loss,
            "proposed": self._proposed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self._step = float(state["step"])
        self._best = state["best"]
        self._best_loss = math.inf if state["best_loss"] is None else float(state["best_loss"])
        self._proposed = int(state["proposed"])


def _size(search_space: Mapping[str, Any]) -> float:
    return math.prod(getattr(domain, "size", math.inf) for domain in search_space.values())
