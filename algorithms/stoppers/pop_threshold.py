"""POP's arithmetic (HyperDrive, Rasley et al. 2017, §3.1-3.2), as pure functions.

- :func:`reach_summary`: the prediction confidence ``p`` and the expected epochs to the target
  (eq. 2-3) from the chance of having reached it by each future epoch;
- :func:`promising`: the dynamic threshold ``p*`` of §3.2 and the trials above it.

:class:`ultron.algorithms.stoppers.pop.POP` calls them at each evaluation boundary and ``poll``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ultron.algorithms.stoppers.base import TrialId

__all__ = ["promising", "reach_summary"]


def reach_summary(reach: np.ndarray) -> tuple[float, float]:
    """``(p, expected epochs)`` of eq. 2-3 from ``P(reached by epoch m)``, truncated at ``M``.

        ``p`` is the chance of reaching the target by the last epoch; a trial that does not reach
        it is charged all ``M`` epochs (the paper's ``(1 - p) M`` term).

        Example:
            >>> import numpy as np

    from ultron.algorithms.stoppers.base import TrialId
            >>> reach_summary(np.array([0.0, 0.5, 0.5, 1.0]))
            (1.0, 3.0)
            >>> reach_summary(np.array([]))
            (0.0, 0.0)
    """
    p_m = np.diff(reach, prepend=0.0)
    p = float(reach[-1]) if len(reach) else 0.0
    return p, float(np.arange(1, len(reach) + 1) @ p_m) + (1.0 - p) * len(reach)


def promising(
    scored: Mapping[TrialId, tuple[float, float]], *, slots: int, slots_per_trial: int = 1
) -> set[TrialId]:
    """The trials above the dynamic threshold of §3.2, fewest expected seconds first.

    Args:
        scored: each trial's ``(p, ERT)`` (trials with ``p = 0`` may be left out: they never
            count).
        slots: ``S``, the slots of the job.
        slots_per_trial: ``k``, the slots one trial occupies.

    Over candidate thresholds ``p`` (each trial's own), ``S_desired(p) = k N_sat(p)`` and
    ``S_deserved(p) = S p``; ``p*`` maximises ``S_effective = min(desired, deserved)`` (the
    lower ``p`` on a tie) and the ``ceil(S_effective / k)`` trials with ``p >= p*`` and the
    smallest ERT are promising.

    Example:
        >>> sorted(promising({"a": (0.9, 5.0), "b": (0.6, 2.0), "c": (0.1, 1.0)}, slots=2))
        ['a', 'b']
    """
    ps = sorted((p for p, _ in scored.values() if p), reverse=True)
    best_p, best_eff = 0.0, 0.0
    for satisfying, p in enumerate(ps, start=1):  # N_sat(p) for the i-th largest p
        effective = min(satisfying * slots_per_trial, slots * p)
        if effective > best_eff or (effective == best_eff and p < best_p):
            best_p, best_eff = p, effective
    if not best_eff:
        return set()
    count = math.ceil(best_eff / slots_per_trial - 1e-9)
    above = [t for t, (p, _) in scored.items() if p and p >= best_p]
    above.sort(key=lambda t: scored[t][1])
    return set(above[:count])
