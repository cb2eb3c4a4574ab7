"""The entries that make a search space conditional, and the order their conditions set.

- :class:`Conditional` wraps an entry that exists only when other parameters take given
  values (SGD's momentum only under ``optimizer: sgd``);
- :class:`Repeated` is a list of ``low`` to ``high`` sub-configurations drawn from the same
  domains (a network of 1 to 4 layers, each with its own width).

:class:`~ultron.algorithms.space.SearchSpace` flattens them into :class:`Param` s, each with
the condition (:data:`When`) under which it is active, and puts every parameter after those
its activity depends on (:func:`order_params`), refusing a condition on an unknown or unfit
parameter, a value it cannot take, or a cycle (:func:`condition_cycle`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ultron.algorithms.domains import Choice, Domain, IntRange

__all__ = ["Conditional", "Param", "Repeated", "When", "condition_cycle", "order_params"]

When = tuple[tuple[str, tuple[Any, ...]], ...]
"""A condition: every ``(parent, values)`` pair must hold (the parent active, its value one of
``values``)."""


def _as_when(when: Mapping[str, Any]) -> When:
    """``{"optimizer": "sgd"}`` or ``{"optimizer": ["sgd", "rmsprop"]}`` as a :data:`When`."""
    return tuple(
        (str(name), tuple(values) if isinstance(values, list | tuple) else (values,))
        for name, values in when.items()
    )


@dataclass(frozen=True)
class Repeated:
    """A list of ``low`` to ``high`` sub-configurations, each drawn from the domains ``each``."""

    low: int
    high: int
    each: Mapping[str, Domain]

    def __post_init__(self) -> None:
        if not 0 <= self.low <= self.high:
            raise ValueError(
                f"a list's count is [{self.low}, {self.high}]; it needs 0 <= low <= high"
            )
        if not self.each:
            raise ValueError("a list needs at least one parameter in each")


@dataclass(frozen=True)
class Conditional:
    """An entry that exists only when ``when`` holds: ``{parent: value or [values]}``, all of
    them (a parent that is itself inactive makes the entry inactive too)."""

    entry: Domain | Repeated
    when: Mapping[str, Any] = field(default_factory=dict)

    @property
    def condition(self) -> When:
        """The condition as ``(parent, values)`` pairs."""
        return _as_when(self.when)


@dataclass(frozen=True)
class Param:
    """One parameter of the flat view: its name, its domain and when it is active."""

    name: str
    domain: Domain
    when: When = ()


def order_params(params: list[Param]) -> list[Param]:
    """``params`` in the given order, each moved after the parents it depends on.

    Raises:
        ValueError: an unknown or unfit parent, a value outside it, or a cycle.
    """
    by_name: dict[str, Param] = {}
    for param in params:
        if param.name in by_name:
            raise ValueError(f"the parameter name {param.name!r} is used twice")
        by_name[param.name] = param
    for param in params:
        for parent, values in param.when:
            _check_parent(param.name, by_name.get(parent), parent, values)
    cycle = condition_cycle({p.name: [parent for parent, _ in p.when] for p in params})
    if cycle is not None:
        raise ValueError(f"conditions form a cycle: {' -> '.join(cycle)}")
    done: dict[str, Param] = {}

    def visit(param: Param) -> None:
        if param.name not in done:
            for parent, _ in param.when:
                visit(by_name[parent])
            done[param.name] = param

    for param in params:
        visit(param)
    return list(done.values())


def condition_cycle(parents: Mapping[str, list[str]]) -> list[str] | None:
    """A cycle among conditions (``["a", "b", "a"]``: a depends on b, b on a), or ``None``.

    Args:
        parents: each name -> the names its activity depends on (unknown names are ignored).

    Example:
        >>> condition_cycle({"a": ["b"], "b": ["a"], "c": []})
        ['a', 'b', 'a']
    """
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        if state.get(name) == 1:
            return [*path[path.index(name) :], name]
        if state.get(name) == 2 or name not in parents:
            return None
        state[name] = 1
        path.append(name)
        for parent in parents[name]:
            found = visit(parent)
            if found is not None:
                return found
        path.pop()
        state[name] = 2
        return None

    for name in parents:
        found = visit(name)
        if found is not None:
            return found
    return None


def _check_parent(name: str, parent: Param | None, parent_name: str, values: tuple) -> None:
    if parent is None:
        raise ValueError(f"{name}'s condition names {parent_name!r}, which is not a parameter")
    if not isinstance(parent.domain, Choice | IntRange):
        raise ValueError(
            f"{name}'s condition names {parent_name!r}; a condition's parameter must be a choice"
        )
    outside = [v for v in values if not parent.domain.contains(v)]
    if outside or not values:
        raise ValueError(
            f"{name}'s condition wants {parent_name} to be {outside or 'nothing'}, "
            f"which it cannot take"
        )
