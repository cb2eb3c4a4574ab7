"""A search space as the categorical choices of an autoregressive policy (ReMAADE's view:
:mod:`ultron.algorithms.reinforce`).

Each flat parameter of the space, in its order, is one choice among ``sizes[d]`` categories:
a choice's values; an integer range's values when it has at most ``bins`` of them (or a
condition reads it); otherwise ``bins`` equal slices of the unit interval (log scale for a log
domain), a value drawn uniformly inside its slice. An inactive parameter is index ``-1``.

Example:
    >>> import numpy as np
    >>> from ultron.algorithms.space import Choice, SearchSpace, Uniform
    >>> view = Categories(SearchSpace({"opt": Choice(("adam", "sgd")), "x": Uniform(0, 1)}),
    ...                   bins=4)
    >>> view.sizes, view.encode({"opt": "sgd", "x": 0.3})
    ([2, 4], [1, 1])
    >>> view.decode([0, 3], np.random.default_rng(0))["opt"]
    'adam'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ultron.algorithms.space import Choice, Config, Domain, IntRange, SearchSpace

__all__ = ["Categories", "latin_design"]


class Categories:
    """The categorical view of ``space``, numeric domains cut into ``bins`` slices.

    Attributes:
        sizes: the categories of each flat parameter, in the space's order.
        exact: every configuration is one index vector (a product space of choices and short
            integer ranges): the policy's probabilities of configurations are exact.
    """

    def __init__(self, space: SearchSpace, *, bins: int) -> None:
        self.space = space
        self.sizes = [
            _categories(domain, bins, exact=name in space.parents) for name, domain in space.items()
        ]
        self.exact = not space.conditional and all(
            _exact(domain, size) for domain, size in zip(space.values(), self.sizes, strict=True)
        )
        self._conditions = _index_conditions(space)

    def decode(self, indices: list[int], rng: np.random.Generator) -> Config:
        """The configuration of category indices (inactive parameters left out)."""
        space = self.space
        flat: Config = {}
        for (name, domain), k, size in zip(space.items(), indices, self.sizes, strict=True):
            if space.is_active(name, flat):
                flat[name] = _value(domain, k, size, rng)
        return space.nest(flat)

    def encode(self, config: Config) -> list[int]:
        """Category indices of a configuration, ``-1`` for an inactive parameter (one the
        configuration holds anyway, told by a user's code, is ignored)."""
        flat = self.space.flatten(self.space.project(config))
        return [
            _index(domain, flat[name], size) if name in flat else -1
            for (name, domain), size in zip(self.space.items(), self.sizes, strict=True)
        ]

    def active(self, d: int, prefix: list[int]) -> bool:
        """Whether flat parameter ``d`` is active given the category indices before it."""
        return all(prefix[parent] in allowed for parent, allowed in self._conditions[d])


def _categories(domain: Domain, bins: int, *, exact: bool = False) -> int:
    """How many categories the policy uses for a domain: its values, or ``bins`` slices
    (``exact``: one per value, for a parameter a condition reads)."""
    if isinstance(domain, Choice):
        return len(domain.values)
    if isinstance(domain, IntRange) and (domain.size <= bins or exact):
        return int(domain.size)
    return bins


def _index_conditions(space: SearchSpace) -> list[list[tuple[int, set[int]]]]:
    """For each flat parameter, its conditions as (parent position, category indices the
    parent may take); a parent's categories are its values (see :func:`_categories`)."""
    position = {name: d for d, name in enumerate(space)}
    out: list[list[tuple[int, set[int]]]] = []
    for param in space.params:
        conditions = []
        for parent, values in param.when:
            domain = space[parent]
            allowed = {
                i
                for i, value in enumerate(domain.grid(int(domain.size)))
                if any(Choice((value,)).contains(v) for v in values)
            }
            conditions.append((position[parent], allowed))
        out.append(conditions)
    return out


def latin_design(sizes: list[int], n: int, rng: np.random.Generator) -> list[list[int]]:
    """``n`` index vectors in which each choice's categories appear equally often (±1)."""
    if n == 0:
        return []
    columns = []
    for size in sizes:
        tiled = np.concatenate([rng.permutation(size) for _ in range(-(-n // size))])[:n]
        columns.append(rng.permutation(tiled))
    return [[int(column[i]) for column in columns] for i in range(n)]


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
