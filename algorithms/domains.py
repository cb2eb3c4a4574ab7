"""The domains a hyper-parameter is drawn from: uniform, log-uniform, integer and choice.

Each domain is a frozen dataclass that samples itself from a ``numpy.random.Generator``, tests
membership, lists a grid and maps to and from the unit interval (which model-based strategies
use). :mod:`ultron.algorithms.space` composes them into a search space and re-exports them.

Example:
    >>> IntRange(1, 4).grid(10)
    [1, 2, 3, 4]
    >>> Choice(("adam", "sgd")).contains("sgd")
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Choice", "Domain", "IntRange", "LogUniform", "Uniform", "is_number", "same_value"]


@dataclass(frozen=True)
class Uniform:
    """A float drawn uniformly from ``[low, high]``."""

    low: float
    high: float

    def sample(self, rng: np.random.Generator) -> float:
        return float(rng.uniform(self.low, self.high))

    def contains(self, value: Any) -> bool:
        return is_number(value) and self.low <= float(value) <= self.high

    def grid(self, points: int) -> list[Any]:
        return [float(v) for v in np.linspace(self.low, self.high, points)]

    def to_unit(self, value: Any) -> float:
        return (float(value) - self.low) / (self.high - self.low)

    def from_unit(self, u: float) -> float:
        return float(self.low + min(max(u, 0.0), 1.0) * (self.high - self.low))

    @property
    def size(self) -> float:
        return math.inf


@dataclass(frozen=True)
class LogUniform:
    """A positive float whose logarithm is uniform on ``[log low, log high]``."""

    low: float
    high: float

    def sample(self, rng: np.random.Generator) -> float:
        return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))

    def contains(self, value: Any) -> bool:
        return is_number(value) and self.low <= float(value) <= self.high

    def grid(self, points: int) -> list[Any]:
        return [float(v) for v in np.geomspace(self.low, self.high, points)]

    def to_unit(self, value: Any) -> float:
        span = math.log(self.high) - math.log(self.low)
        return (math.log(float(value)) - math.log(self.low)) / span

    def from_unit(self, u: float) -> float:
        span = math.log(self.high) - math.log(self.low)
        value = math.exp(math.log(self.low) + min(max(u, 0.0), 1.0) * span)
        return float(min(max(value, self.low), self.high))

    @property
    def size(self) -> float:
        return math.inf


@dataclass(frozen=True)
class IntRange:
    """An integer from ``low`` to ``high`` inclusive, uniform or log-uniform."""

    low: int
    high: int
    log: bool = False

    def sample(self, rng: np.random.Generator) -> int:
        if self.log:
            return self.from_unit(float(rng.uniform()))
        return int(rng.integers(self.low, self.high + 1))

    def contains(self, value: Any) -> bool:
        return (
            is_number(value) and float(value) == int(value) and self.low <= int(value) <= self.high
        )

    def grid(self, points: int) -> list[Any]:
        if self.high - self.low + 1 <= points:
            return list(range(self.low, self.high + 1))
        space = np.geomspace if self.log else np.linspace
        return sorted({round(v) for v in space(self.low, self.high, points)})

    def to_unit(self, value: Any) -> float:
        if self.log:
            span = math.log(self.high + 0.5) - math.log(self.low - 0.5 if self.low > 1 else 0.5)
            return (math.log(int(value)) - math.log(max(self.low - 0.5, 0.5))) / span
        return (int(value) - self.low + 0.5) / (self.high - self.low + 1)

    def from_unit(self, u: float) -> int:
        u = min(max(u, 0.0), 1.0)
        if self.log:
            lo, hi = math.log(max(self.low - 0.5, 0.5)), math.log(self.high + 0.5)
            value = round(math.exp(lo + u * (hi - lo)))
        else:
            value = self.low + math.floor(u * (self.high - self.low + 1))
        return int(min(max(value, self.low), self.high))

    @property
    def size(self) -> float:
        return float(self.high - self.low + 1)


@dataclass(frozen=True)
class Choice:
    """One of a fixed list of values (numbers, strings, booleans)."""

    values: tuple[Any, ...]

    def sample(self, rng: np.random.Generator) -> Any:
        return self.values[int(rng.integers(len(self.values)))]

    def contains(self, value: Any) -> bool:
        return any(same_value(value, v) for v in self.values)

    def grid(self, points: int) -> list[Any]:
        return list(self.values)

    def index(self, value: Any) -> int:
        return next(i for i, v in enumerate(self.values) if same_value(value, v))

    def to_unit(self, value: Any) -> float:
        return (self.index(value) + 0.5) / len(self.values)

    def from_unit(self, u: float) -> Any:
        i = math.floor(min(max(u, 0.0), 1.0) * len(self.values))
        return self.values[min(i, len(self.values) - 1)]

    @property
    def size(self) -> float:
        return float(len(self.values))


Domain = Uniform | LogUniform | IntRange | Choice


def is_number(value: Any) -> bool:
    """Whether ``value`` is a number (a bool is not)."""
    return isinstance(value, int | float | np.number) and not isinstance(value, bool)


def same_value(a: Any, b: Any) -> bool:
    """Whether two values are the same option: equal and of one type, or equal numbers."""
    return (type(a) is type(b) and a == b) or (is_number(a) and is_number(b) and a == b)
