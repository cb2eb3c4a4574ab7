"""ASHA: asynchronous successive halving (Li et al., MLSys 2020).

Rungs sit at ``min_resource * eta^(k + s)`` steps (``s`` is the bracket, the paper's early-stopping
rate). Two modes:

- ``PROMOTION``, the published Algorithm 2: a trial that reaches a rung is suspended; ``poll``
  promotes (resumes) a trial of rung ``k`` when it is in the top ``1/eta`` of everyone who has
  reached rung ``k`` so far, highest rung first. A trial is never promoted twice.
- ``STOPPING`` (Ray Tune's and Syne Tune's default): at a rung the trial continues if it is in
  the top ``1/eta`` of the values recorded there so far, else it stops. Nothing is suspended.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any

from ultron.algorithms.base import Direction
from ultron.algorithms.stoppers.base import (
    Command,
    Decision,
    Stopper,
    TrialId,
    TrialPlan,
    decode_loss,
    encode_loss,
)
from ultron.algorithms.stoppers.budgets import asha_rungs

__all__ = ["ASHA", "AshaMode"]


class AshaMode(StrEnum):
    """How ASHA acts at a rung."""

    STOPPING = "stopping"
    PROMOTION = "promotion"


class ASHA(Stopper):
    """Asynchronous successive halving.

    Args:
        direction: minimize or maximize the reported value.
        min_resource: the first rung (the grace period, ``r`` in the paper).
        max_resource: steps at which a trial is finished (``R``).
        reduction_factor: ``eta`` in the paper: one in ``eta`` trials moves up a rung.
        bracket: ``s`` in the paper: the first rung is at ``min_resource * eta^s``.
        mode: ``"stopping"`` (default) or ``"promotion"`` (the published algorithm).

    Example:
        >>> asha = ASHA(direction="maximize", max_resource=9)
        >>> [asha.on_report(t, 1, v) for t, v in [("a", 0.5), ("b", 0.9), ("c", 0.1)]]
        [<Decision.CONTINUE: 'continue'>, <Decision.CONTINUE: 'continue'>, <Decision.STOP: 'stop'>]
    """

    def __init__(
        self,
        *,
        direction: Direction | str = Direction.MINIMIZE,
        min_resource: int = 1,
        max_resource: int,
        reduction_factor: int = 3,
        bracket: int = 0,
        mode: AshaMode | str = AshaMode.STOPPING,
    ) -> None:
        super().__init__(direction=direction, min_resource=min_resource, max_resource=max_resource)
        self.reduction_factor = reduction_factor
        self.mode = AshaMode(mode)
        self.rungs = asha_rungs(
            max_resource,
            min_resource=min_resource,
            reduction_factor=reduction_factor,
            bracket=bracket,
        )
        # rung index -> {trial: loss}, in arrival order; and trials promoted out of each rung
        self._recorded: list[dict[TrialId, float]] = [{} for _ in self.rungs]
        self._promoted: list[list[TrialId]] = [[] for _ in self.rungs]
        self._next_rung: dict[TrialId, int] = {}

    def on_trial_start(self, trial_id: TrialId) -> TrialPlan:
        self._next_rung[trial_id] = 0
        return TrialPlan(bracket=0, rungs=tuple(self.rungs), max_resource=self.max_resource)

    def on_report(self, trial_id: TrialId, step: int, value: float) -> Decision:
        key = trial_id
        k = self._next_rung.setdefault(key, 0)
        if k >= len(self.rungs) or step < self.rungs[k]:
            return Decision.CONTINUE
        # One report may cross several rungs (reports every few steps): record each.
        while k < len(self.rungs) - 1 and step >= self.rungs[k + 1]:
            self._recorded[k][key] = self.loss(value)
            self._promoted[k].append(key)
            k += 1
        self._recorded[k][key] = self.loss(value)
        self._next_rung[key] = k + 1
        if k == len(self.rungs) - 1:
            return Decision.STOP  # finished at max_resource
        if self._in_top(k, key):
            # Promoting the trial that just arrived saves a suspend and a resume; the published
            # algorithm would promote it on the next free worker anyway.
            self._promoted[k].append(key)
            return Decision.CONTINUE
        return Decision.SUSPEND if self.mode is AshaMode.PROMOTION else Decision.STOP

    def _in_top(self, k: int, key: TrialId) -> bool:
        recorded = self._recorded[k]
        if self.mode is AshaMode.STOPPING:
            keep = math.ceil(len(recorded) / self.reduction_factor)
            return _rank(recorded, key) < keep
        return key in self._promotable(k)

    def _promotable(self, k: int) -> list[TrialId]:
        """Published ASHA: the top floor(n/eta) of rung k, minus those already promoted."""
        recorded = self._recorded[k]
        top = sorted(recorded, key=lambda t: recorded[t])[: len(recorded) // self.reduction_factor]
        return [t for t in top if t not in self._promoted[k] and not math.isinf(recorded[t])]

    def on_trial_complete(self, trial_id: TrialId) -> None:
        self._next_rung[trial_id] = len(self.rungs)

    def poll(self, *, free_slots: int, can_start_new: bool = True) -> list[Command]:
        if self.mode is AshaMode.STOPPING:
            return []
        commands: list[Command] = []
        for k in range(len(self.rungs) - 2, -1, -1):  # highest rung first
            for key in self._promotable(k):
                if len(commands) == free_slots:
                    return commands
                self._promoted[k].append(key)
                commands.append(Command(key, Decision.RESUME))
        return commands

    def state_dict(self) -> dict[str, Any]:
        return {
            "recorded": [[[t, encode_loss(v)] for t, v in rung.items()] for rung in self._recorded],
            "promoted": [list(p) for p in self._promoted],
            "next_rung": [[t, k] for t, k in self._next_rung.items()],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._recorded = [{t: decode_loss(v) for t, v in rung} for rung in state["recorded"]]
        self._promoted = [list(p) for p in state["promoted"]]
        self._next_rung = {t: int(k) for t, k in state["next_rung"]}


def _rank(losses: dict[TrialId, float], key: TrialId) -> int:
    """How many recorded losses are strictly better than ``key``'s (ties favour the earlier)."""
    mine = losses[key]
    return sum(1 for t, loss in losses.items() if loss < mine and t != key)
