"""REINFORCE over an autoregressive policy of the search space, in the spirit of ReMAADE.

Krishna et al. 2020 (ReMAADE, reference [32] of the Ultron paper) train a masked autoregressive
density estimator over the hyper-parameters with REINFORCE. Here the policy is the smallest such
estimator, a masked linear one: each hyper-parameter is a categorical variable whose logits
depend on the choices made for the hyper-parameters before it,

    logits_d = b_d + W_d · onehot(x_1, ..., x_{d-1}),

so the policy can learn interactions ("a large learning rate only with a small batch"). Numeric
domains are cut into ``bins`` equal slices of the unit interval and a value is drawn uniformly
within its slice. Each scored candidate moves the parameters along ``A · ∇ log π(x)`` where the
advantage ``A`` is the reward minus a moving-average baseline, divided by a moving standard
deviation (so the step size does not depend on the scale of the score).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ultron.algorithms.base import Direction, SearchAlgorithm
from ultron.algorithms.space import Choice, Config, Domain, IntRange, SearchSpace, canonical

__all__ = ["ReinforceSearch"]

_MAX_REDRAWS = 50


class ReinforceSearch(SearchAlgorithm):
    """Samples from a learned autoregressive policy, trained with REINFORCE and a baseline.

    Args:
        search_space: the domains.
        seed: seed of the generator used for sampling.
        direction: minimize or maximize the score.
        learning_rate: step size of the policy-gradient ascent.
        bins: slices of the unit interval for numeric domains with more values than this.
        baseline_decay: weight of the past in the moving average and variance of the reward.

    Example:
        >>> from ultron.algorithms.space import Choice, SearchSpace
        >>> space = SearchSpace({"a": Choice((0, 1)), "b": Choice((0, 1))})
        >>> algo = ReinforceSearch(space, seed=0, learning_rate=0.5)
        >>> for _ in range(30):
        ...     batch = algo.sample_hyperparameter_candidates(2)
        ...     algo.update_state(batch, [c["a"] + c["b"] for c in batch])
        >>> algo.probabilities({"a": 0, "b": 0}) > 0.5
        True
    """

    def __init__(
        self,
        search_space: SearchSpace,
        *,
        seed: int | None = None,
        direction: Direction | str = Direction.MINIMIZE,
        learning_rate: float = 0.05,
        bins: int = 8,
        baseline_decay: float = 0.9,
    ) -> None:
        super().__init__(search_space, seed=seed, direction=direction)
        if learning_rate <= 0:
            raise ValueError(f"learning_rate is {learning_rate}; it must be positive")
        if bins < 2:
            raise ValueError(f"bins is {bins}; it must be at least 2")
        self.learning_rate = learning_rate
        self.bins = bins
        self.baseline_decay = baseline_decay
        self._sizes = [_categories(domain, bins) for domain in search_space.values()]
        offsets = np.cumsum([0, *self._sizes])
        self._offsets = [int(o) for o in offsets[:-1]]
        self._bias = [np.zeros(k) for k in self._sizes]
        self._weights = [np.zeros((k, o)) for k, o in zip(self._sizes, self._offsets, strict=True)]
        self._mean: float | None = None
        self._var = 1.0
        self._worst = -math.inf

    def _logits(self, d: int, onehot: np.ndarray) -> np.ndarray:
        return self._bias[d] + self._weights[d] @ onehot[: self._offsets[d]]

    def _draw_indices(self) -> list[int]:
        onehot = np.zeros(sum(self._sizes))
        indices = []
        for d, size in enumerate(self._sizes):
            k = int(self.rng.choice(size, p=_softmax(self._logits(d, onehot))))
            onehot[self._offsets[d] + k] = 1.0
            indices.append(k)
        return indices

    def _decode(self, indices: list[int]) -> Config:
        config = {}
        for (name, domain), k, size in zip(
            self.search_space.items(), indices, self._sizes, strict=True
        ):
            config[name] = _value(domain, k, size, self.rng)
        return config

    def _encode(self, config: Config) -> list[int]:
        return [
            _index(domain, config[name], size)
            for (name, domain), size in zip(self.search_space.items(), self._sizes, strict=True)
        ]

    def probabilities(self, config: Config) -> float:
        """The probability that the policy picks the slices (or values) of ``config``."""
        return math.exp(self._log_prob_and_grad(self._encode(config))[0])

    def sample_hyperparameter_candidates(self, n: int) -> list[Config]:
        batch: list[Config] = []
        seen: set[str] = set()
        for _ in range(n):
            for attempt in range(_MAX_REDRAWS + 1):
                config = self._decode(self._draw_indices())
                key = canonical(config)
                if (
                    key not in seen
                    or attempt == _MAX_REDRAWS
                    or len(seen) >= self.search_space.size
                ):
                    break
            seen.add(key)
            batch.append(config)
        return batch

    def _log_prob_and_grad(self, indices: list[int]) -> tuple[float, list[np.ndarray]]:
        onehot = np.zeros(sum(self._sizes))
        log_prob, grads = 0.0, []
        for d, k in enumerate(indices):
            probs = _softmax(self._logits(d, onehot))
            log_prob += math.log(max(float(probs[k]), 1e-300))
            grad = -probs
            grad[k] += 1.0  # d log softmax_k / d logits
            grads.append(grad)
            onehot[self._offsets[d] + k] = 1.0
        return log_prob, [*grads, onehot]

    def update_state(
        self, hyperparameter_candidates: Sequence[Config], validation_scores: Sequence[float]
    ) -> None:
        for config, score in zip(hyperparameter_candidates, validation_scores, strict=True):
            if math.isnan(score):
                # A failure teaches "not here" as strongly as the worst result seen so far.
                if math.isinf(self._worst):
                    continue
                reward = self._worst
            else:
                reward = -self.signed(float(score))
                self._worst = reward if math.isinf(self._worst) else min(self._worst, reward)
            self._step(self._encode(config), reward)

    def _step(self, indices: list[int], reward: float) -> None:
        if self._mean is None:
            self._mean = reward
            return
        advantage = (reward - self._mean) / math.sqrt(self._var + 1e-12)
        decay = self.baseline_decay
        self._var = decay * self._var + (1 - decay) * (reward - self._mean) ** 2
        self._mean = decay * self._mean + (1 - decay) * reward
        _, grads = self._log_prob_and_grad(indices)
        onehot = grads[-1]
        step = self.learning_rate * float(np.clip(advantage, -3.0, 3.0))
        for d, grad in enumerate(grads[:-1]):
            self._bias[d] += step * grad
            self._weights[d] += step * np.outer(grad, onehot[: self._offsets[d]])

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "bias": [b.tolist() for b in self._bias],
            "weights": [w.tolist() for w in self._weights],
            "mean": self._mean,
            "var": self._var,
            "worst": None if math.isinf(self._worst) else self._worst,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._bias = [np.asarray(b, dtype=float) for b in state["bias"]]
        self._weights = [
            np.asarray(w, dtype=float).reshape(k, o)
            for w, k, o in zip(state["weights"], self._sizes, self._offsets, strict=True)
        ]
        self._mean = state["mean"]
        self._var = float(state["var"])
        self._worst = -math.inf if state["worst"] is None else float(state["worst"])


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max())
    return np.asarray(z / z.sum())


def _categories(domain: Domain, bins: int) -> int:
    """How many categories the policy uses for a domain: its values, or ``bins`` slices."""
    if isinstance(domain, Choice):
        return len(domain.values)
    if isinstance(domain, IntRange) and domain.size <= bins:
        return int(domain.size)
    return bins


def _exact(domain: Domain, size: int) -> bool:
    return isinstance(domain, Choice) or (isinstance(domain, IntRange) and domain.size == size)


def _value(domain: Domain, k: int, size: int, rng: np.random.Generator) -> Any:
    if isinstance(domain, Choice):
        return domain.values[k]
    if isinstance(domain, IntRange) and _exact(domain, size):
        return domain.low + k
    return domain.from_unit((k + float(rng.uniform())) / size)


def _index(domain: Domain, value: Any, size: int) -> int:
    if isinstance(domain, Choice):
        return domain.index(value)
    if isinstance(domain, IntRange) and _exact(domain, size):
        return int(value) - domain.low
    return min(int(domain.to_unit(value) * size), size - 1)
