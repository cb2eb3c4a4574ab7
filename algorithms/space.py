"""Typed search spaces: which hyper-parameters a configuration holds, and their domains.

A :class:`SearchSpace` maps names to domains (:mod:`ultron.algorithms.domains`). Two entries
make it conditional (:mod:`ultron.algorithms.conditional`):

- :class:`Conditional` wraps an entry that exists only when other parameters take given
  values (SGD's momentum only under ``optimizer: sgd``);
- :class:`Repeated` is a list of ``low`` to ``high`` sub-configurations drawn from the same
  domains (a network of 1 to 4 layers, each with its own width).

A configuration holds exactly its *active* parameters: an inactive one is absent, and a list
is a list of dicts, ``{"layers": [{"width": 64}, {"width": 32}]}``, its length the count.
Strategies work on the *flat* view: the space is a mapping over flat names in an order where
every parameter comes after those its activity depends on: a list's count under the list's
name (``layers``), its elements as ``layers.0.width``, ``layers.1.width`` ... (element ``i``
active when the count is above ``i``). :meth:`SearchSpace.flatten` and
:meth:`SearchSpace.nest` convert; :meth:`SearchSpace.project` drops what is inactive.

Example:
    >>> import numpy as np
    >>> space = SearchSpace({"lr": LogUniform(1e-4, 1e-1), "layers": Choice((1, 2, 3))})
    >>> config = space.sample(np.random.default_rng(0))
    >>> space.contains(config)
    True
    >>> tree = SearchSpace({
    ...     "optimizer": Choice(("adam", "sgd")),
    ...     "momentum": Conditional(Uniform(0.0, 0.99), when={"optimizer": "sgd"}),
    ...     "layers": Repeated(1, 2, {"width": IntRange(16, 256)}),
    ... })
    >>> tree.project({"optimizer": "adam", "momentum": 0.9, "layers": [{"width": 32}]})
    {'optimizer': 'adam', 'layers': [{'width': 32}]}
    >>> list(tree)
    ['optimizer', 'momentum', 'layers', 'layers.0.width', 'layers.1.width']
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Any

import numpy as np

from ultron.algorithms.conditional import (
    Conditional,
    Param,
    Repeated,
    When,
    condition_cycle,
    order_params,
)
from ultron.algorithms.domains import (
    Choice,
    Domain,
    IntRange,
    LogUniform,
    Uniform,
    same_value,
)

__all__ = [
    "Choice",
    "Conditional",
    "Domain",
    "IntRange",
    "LogUniform",
    "Param",
    "Repeated",
    "SearchSpace",
    "Uniform",
    "canonical",
    "condition_cycle",
]

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


class SearchSpace(Mapping[str, Domain]):
    """An ordered, immutable mapping of flat hyper-parameter names to domains.

    Args:
        entries: name -> a domain, a :class:`Repeated` list or a :class:`Conditional` entry.

    Raises:
        ValueError: a condition names an unknown parameter or one that is not a choice or a
            list, a value its parent cannot take, or conditions form a cycle.
    """

    def __init__(self, entries: Mapping[str, Domain | Repeated | Conditional]) -> None:
        params: list[Param] = []
        self._lists: dict[str, tuple[str, ...]] = {}
        for name, entry in entries.items():
            when: When = ()
            if isinstance(entry, Conditional):
                when, entry = entry.condition, entry.entry
            if isinstance(entry, Repeated):
                params.append(Param(name, IntRange(entry.low, entry.high), when))
                self._lists[name] = tuple(entry.each)
                for i, (sub, domain) in itertools.product(range(entry.high), entry.each.items()):
                    counts = tuple(range(max(i + 1, entry.low), entry.high + 1))
                    params.append(Param(f"{name}.{i}.{sub}", domain, ((name, counts),)))
            else:
                params.append(Param(name, entry, when))
        self._params = {p.name: p for p in order_params(params)}

    def __getitem__(self, name: str) -> Domain:
        return self._params[name].domain

    def __iter__(self) -> Iterator[str]:
        return iter(self._params)

    def __len__(self) -> int:
        return len(self._params)

    def __repr__(self) -> str:
        return f"SearchSpace({ {n: p.domain for n, p in self._params.items()}!r})"

    @property
    def params(self) -> list[Param]:
        """The flat parameters, each after those its activity depends on."""
        return list(self._params.values())

    @property
    def conditional(self) -> bool:
        """Whether some parameter is not always active (a condition or a list)."""
        return any(p.when for p in self._params.values())

    @cached_property
    def parents(self) -> frozenset[str]:
        """The parameters some other parameter's activity depends on."""
        return frozenset(name for p in self._params.values() for name, _ in p.when)

    def is_active(self, name: str, flat: Mapping[str, Any]) -> bool:
        """Whether ``name`` is active given the flat values of the parameters before it (an
        absent parent is an inactive one)."""
        return all(
            parent in flat and any(same_value(flat[parent], v) for v in values)
            for parent, values in self._params[name].when
        )

    def flatten(self, config: Mapping[str, Any]) -> Config:
        """The flat view of a configuration: a list becomes its count and its elements' values
        (``layers.0.width``); a flat configuration comes back as it is.

        Raises:
            ValueError: a list's value is not a list of mappings.
        """
        flat: Config = {}
        for name, value in config.items():
            if name not in self._lists or not isinstance(value, list | tuple):
                flat[name] = value
                continue
            flat[name] = len(value)
            for i, element in enumerate(value):
                if not isinstance(element, Mapping):
                    raise ValueError(f"{name}[{i}] is {element!r}; it must be a mapping")
                flat.update({f"{name}.{i}.{sub}": v for sub, v in element.items()})
        return flat

    def nest(self, flat: Mapping[str, Any]) -> Config:
        """A configuration from its flat view: each list's elements gathered under its name."""
        config: Config = {}
        for name, value in flat.items():
            head, _, rest = name.partition(".")
            if head in self._lists and rest:
                continue
            if name in self._lists:
                config[name] = [
                    {
                        sub: flat[f"{name}.{i}.{sub}"]
                        for sub in self._lists[name]
                        if f"{name}.{i}.{sub}" in flat
                    }
                    for i in range(int(value))
                ]
            else:
                config[name] = value
        return config

    def active(self, config: Mapping[str, Any]) -> list[str]:
        """The flat names active in ``config`` (present or not), in the space's order."""
        flat = self.flatten(config)
        kept: Config = {}
        names = []
        for name in self._params:
            if self.is_active(name, kept):
                names.append(name)
                if name in flat:
                    kept[name] = flat[name]
        return names

    def project(self, config: Mapping[str, Any]) -> Config:
        """``config`` without its inactive parameters: what determines its score, whatever an
        inactive parameter was set to. A name the space does not know is kept (the model may
        read it)."""
        flat = self.flatten(config)
        active = set(self.active(flat))
        return self.nest({k: v for k, v in flat.items() if k in active or k not in self._params})

    def sample(self, rng: np.random.Generator) -> Config:
        """Draw one configuration, each active hyper-parameter independently."""
        flat: Config = {}
        for name, param in self._params.items():
            if self.is_active(name, flat):
                flat[name] = param.domain.sample(rng)
        return self.nest(flat)

    def contains(self, config: Mapping[str, Any]) -> bool:
        """Whether ``config`` names exactly its active hyper-parameters, each in its domain."""
        try:
            flat = self.flatten(config)
        except ValueError:
            return False
        active = self.active(flat)
        return set(flat) == set(active) and all(
            self._params[name].domain.contains(flat[name]) for name in active
        )

    @cached_property
    def size(self) -> float:
        """The number of distinct configurations (``math.inf`` with a continuous domain)."""
        if not self.conditional:
            return math.prod(p.domain.size for p in self._params.values())
        return self._count(0, {})

    def _count(self, start: int, flat: Config) -> float:
        total = 1.0
        params = self.params
        for i in range(start, len(params)):
            param = params[i]
            if not self.is_active(param.name, flat):
                continue
            if param.name not in self.parents:
                total *= param.domain.size
                continue
            values = param.domain.grid(int(param.domain.size))
            return total * sum(self._count(i + 1, {**flat, param.name: v}) for v in values)
        return total

    def grid(self, points: int = 5) -> list[Config]:
        """Every configuration of the grid, ``points`` values for each continuous domain; a
        conditional space is expanded branch by branch (momentum only under sgd), every list
        length included."""
        if not self.conditional:
            names = list(self._params)
            axes = [self._params[name].domain.grid(points) for name in names]
            return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*axes)]
        return [self.nest(flat) for flat in self._branches(0, {}, points)]

    def _branches(self, start: int, flat: Config, points: int) -> Iterator[Config]:
        params = self.params
        for i in range(start, len(params)):
            param = params[i]
            if self.is_active(param.name, flat):
                # A parameter others depend on (a choice, a list's count) takes every value.
                every = param.name in self.parents
                for value in param.domain.grid(int(param.domain.size) if every else points):
                    yield from self._branches(i + 1, {**flat, param.name: value}, points)
                return
        yield flat

    def to_unit(self, config: Mapping[str, Any]) -> list[float]:
        """Map a configuration to a point of the unit cube, one coordinate per name."""
        self._unconditional("to_unit")
        return [p.domain.to_unit(config[name]) for name, p in self._params.items()]

    def from_unit(self, point: list[float]) -> Config:
        """Map a point of the unit cube back to a configuration."""
        self._unconditional("from_unit")
        return {
            name: p.domain.from_unit(u)
            for (name, p), u in zip(self._params.items(), point, strict=True)
        }

    def _unconditional(self, what: str) -> None:
        if self.conditional:
            raise ValueError(f"{what} needs a space without conditions or lists")
