"""Typed search spaces: the domains hyper-parameters are drawn from.

A :class:`SearchSpace` maps names to domains. Domains are frozen dataclasses that know how to
sample themselves from a ``numpy.random.Generator``, test membership, list a grid and map to and
from the unit interval (which model-based strategies use).

Example:
    >>> import numpy as np
    >>> space = SearchSpace({"lr": LogUniform(1e-4, 1e-1), "layers": Choice((1, 2, 3))})
    >>> config = space.sample(np.random.default_rng(0))
    >>> space.contains(config)
    True
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Choice", "Domain", "IntRange", "LogUniform", "SearchSpace", "Uniform", "canonical"]

Config = dict[str, Any]


def canonical(config: Mapping[str, Any]) -> str:
    """The canonical text of a configuration: JSON with sorted keys, so equal configs match."""
    return json.dumps(_plain(dict(config)), sort_keys=True, separators=(",", ":"))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclass(frozen=True)
class Uniform:
    """A float drawn uniformly from ``[low, high]``."""

    low: float
    high: float

    def sample(self, rng: np.random.Generator) -> float:
        return float(rng.uniform(self.low, self.high))

    def contains(self, value: Any) -> bool:
        return _is_number(value) and self.low <= float(value) <= self.high

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
        return _is_number(value) and self.low <= float(value) <= self.high

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
            _is_number(value) and float(value) == int(value) and self.low <= int(value) <= self.high
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
        return any(_same(value, v) for v in self.values)

    def grid(self, points: int) -> list[Any]:
        return list(self.values)

    def index(self, value: Any) -> int:
        return next(i for i, v in enumerate(self.values) if _same(value, v))

    def to_unit(self, value: Any) -> float:
        return (self.index(value) + 0.5) / len(self.values)

    def from_unit(self, u: float) -> Any:
        i = math.floor(min(max(u, 0.0), 1.0) * len(self.values))
        return self.values[min(i, len(self.values) - 1)]

    @property
    def size(self) -> float:
        return float(len(self.values))


Domain = Uniform | LogUniform | IntRange | Choice


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.number) and not isinstance(value, bool)


def _same(a: Any, b: Any) -> bool:
    return (type(a) is type(b) and a == b) or (_is_number(a) and _is_number(b) and a == b)


class SearchSpace(Mapping[str, Domain]):
    """An ordered, immutable mapping of hyper-parameter names to domains."""

    def __init__(self, domains: Mapping[str, Domain]) -> None:
        self._domains = dict(domains)

    def __getitem__(self, name: str) -> Domain:
        return self._domains[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._domains)

    def __len__(self) -> int:
        return len(self._domains)

    def __repr__(self) -> str:
        return f"SearchSpace({self._domains!r})"

    def sample(self, rng: np.random.Generator) -> Config:
        """Draw one configuration, each hyper-parameter independently."""
        return {name: domain.sample(rng) for name, domain in self._domains.items()}

    def contains(self, config: Mapping[str, Any]) -> bool:
        """Whether ``config`` names exactly these hyper-parameters, each inside its domain."""
        return set(config) == set(self._domains) and all(
            domain.contains(config[name]) for name, domain in self._domains.items()
        )

    @property
    def size(self) -> float:
        """The number of distinct configurations (``math.inf`` with a continuous domain)."""
        return math.prod(domain.size for domain in self._domains.values())

    def grid(self, points: int = 5) -> list[Config]:
        """The Cartesian grid, with ``points`` values for each continuous domain."""
        names = list(self._domains)
        axes = [self._domains[name].grid(points) for name in names]
        return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*axes)]

    def to_unit(self, config: Mapping[str, Any]) -> list[float]:
        """Map a configuration to a point of the unit cube, one coordinate per name."""
        return [self._domains[name].to_unit(config[name]) for name in self._domains]

    def from_unit(self, point: list[float]) -> Config:
        """Map a point of the unit cube back to a configuration."""
        return {
            name: domain.from_unit(u)
            for (name, domain), u in zip(self._domains.items(), point, strict=True)
        }
