"""Budget arithmetic of successive halving and Hyperband, as pure functions.

Li, Jamieson, DeSalvo, Rostamizadeh & Talwalkar, "Hyperband" (JMLR 2017), Algorithm 1: with
``R = max_resource / min_resource`` and ``eta`` the reduction factor, ``s_max = floor(log_eta R)``,
``B = (s_max + 1) R``, and bracket ``s`` starts ``n = ceil(B / R * eta^s / (s + 1))`` trials at
resource ``r = R eta^-s``; its rung ``i`` keeps ``floor(n eta^-i)`` trials at ``r eta^i``.
For ``R = 81, eta = 3`` this gives the paper's Table 1 (brackets of 81, 34, 15, 8 and 5 trials).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Bracket", "Rung", "asha_rungs", "hyperband_brackets", "successive_halving"]


@dataclass(frozen=True)
class Rung:
    """One rung: how many trials reach it and with how much resource (steps) each."""

    trials: int
    resource: float


@dataclass(frozen=True)
class Bracket:
    """A successive-halving bracket: ``s`` is its index in Hyperband (``s_max`` explores most)."""

    s: int
    rungs: tuple[Rung, ...]

    @property
    def budget(self) -> float:
        """Total resource as published: every rung trains its trials from scratch."""
        return sum(rung.trials * rung.resource for rung in self.rungs)

    @property
    def budget_with_resume(self) -> float:
        """Total resource when promoted trials resume from their checkpoint (ultron's way)."""
        previous, total = 0.0, 0.0
        for rung in self.rungs:
            total += rung.trials * (rung.resource - previous)
            previous = rung.resource
        return total


def _check(max_resource: float, min_resource: float, reduction_factor: int) -> None:
    if reduction_factor < 2:
        raise ValueError(f"reduction_factor is {reduction_factor}; it must be at least 2")
    if not 0 < min_resource <= max_resource:
        raise ValueError(
            f"min_resource is {min_resource}; it must be positive and at most max_resource "
            f"({max_resource})"
        )


def _s_max(ratio: float, eta: int) -> int:
    """floor(log_eta(ratio)) without floating-point surprises (log_3(243) is 4.999...)."""
    s = 0
    while eta ** (s + 1) <= ratio * (1 + 1e-12):
        s += 1
    return s


def successive_halving(
    n: int, *, min_resource: float, reduction_factor: int = 3, rungs: int
) -> tuple[Rung, ...]:
    """The rungs of successive halving from ``n`` trials at ``min_resource``.

    Example:
        >>> [(r.trials, r.resource) for r in successive_halving(9, min_resource=1, rungs=3)]
        [(9, 1), (3, 3), (1, 9)]
    """
    eta = reduction_factor
    return tuple(Rung(n // eta**i, min_resource * eta**i) for i in range(rungs))


def hyperband_brackets(
    max_resource: float, *, min_resource: float = 1, reduction_factor: int = 3
) -> list[Bracket]:
    """Hyperband's brackets, most exploratory (``s = s_max``) first.

    Example:
        >>> [b.rungs[0].trials for b in hyperband_brackets(81)]
        [81, 34, 15, 8, 5]
        >>> [b.rungs[0].resource for b in hyperband_brackets(81)]
        [1.0, 3.0, 9.0, 27.0, 81.0]
    """
    _check(max_resource, min_resource, reduction_factor)
    eta = reduction_factor
    ratio = max_resource / min_resource  # R of the paper, in units of min_resource
    s_max = _s_max(ratio, eta)
    brackets = []
    for s in range(s_max, -1, -1):
        n = math.ceil((s_max + 1) * eta**s / (s + 1) - 1e-9)
        r = ratio / eta**s
        rungs = tuple(Rung(n // eta**i, min_resource * r * eta**i) for i in range(s + 1))
        brackets.append(Bracket(s, rungs))
    return brackets


def asha_rungs(
    max_resource: float, *, min_resource: float = 1, reduction_factor: int = 3, bracket: int = 0
) -> list[float]:
    """ASHA's rung resources ``r eta^(k + s)`` below ``max_resource`` (Li et al. 2020, Alg. 2).

    The last rung is where trials finish; a trial there is not ranked again.

    Example:
        >>> asha_rungs(81)
        [1, 3, 9, 27, 81]
        >>> asha_rungs(52, min_resource=1, bracket=1)
        [3, 9, 27, 52]
    """
    _check(max_resource, min_resource, reduction_factor)
    rungs: list[float] = []
    k = bracket
    while min_resource * reduction_factor**k < max_resource * (1 - 1e-12):
        rungs.append(min_resource * reduction_factor**k)
        k += 1
    return [*rungs, max_resource]
