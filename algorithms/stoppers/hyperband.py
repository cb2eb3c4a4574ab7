"""Hyperband (Li et al., JMLR 2017) as a set of successive-halving brackets.

New trials fill the brackets in the paper's order, ``s = s_max`` (many trials, little resource
each) down to ``s = 0`` (a few trials, full resource), then the cycle starts again. Each bracket
is a :class:`SuccessiveHalvingBracket`; the budget arithmetic is
:func:`~ultron.algorithms.stoppers.budgets.hyperband_brackets`. Trials waiting for the rest of
their rung are suspended, so their workers run the next brackets meanwhile.
"""

from __future__ import annotations

from typing import Any

from ultron.algorithms.base import Direction
from ultron.algorithms.stoppers.base import Command, Decision, Stopper, TrialId, TrialPlan
from ultron.algorithms.stoppers.budgets import hyperband_brackets
from ultron.algorithms.stoppers.successive_halving import SuccessiveHalvingBracket

__all__ = ["Hyperband"]


class Hyperband(Stopper):
    """Hyperband: successive halving over brackets that trade trials against resource.

    Args:
        direction: minimize or maximize the reported value.
        min_resource: ``r_min``: the least resource a trial gets.
        max_resource: ``R``: the most resource a trial gets.
        reduction_factor: ``eta``.

    Example:
        >>> hb = Hyperband(max_resource=81)
        >>> hb.on_trial_start("t0")
        TrialPlan(bracket=4, rungs=(1.0, 3.0, 9.0, 27.0, 81.0), max_resource=81)
        >>> hb.on_report("t0", 1, 0.5)
        <Decision.SUSPEND: 'suspend'>
    """

    def __init__(
        self,
        *,
        direction: Direction | str = Direction.MINIMIZE,
        min_resource: int = 1,
        max_resource: int,
        reduction_factor: int = 3,
    ) -> None:
        super().__init__(direction=direction, min_resource=min_resource, max_resource=max_resource)
        self.reduction_factor = reduction_factor
        self.brackets = hyperband_brackets(
            max_resource, min_resource=min_resource, reduction_factor=reduction_factor
        )
        self._running: list[SuccessiveHalvingBracket] = []  # started brackets, oldest first
        self._started = 0  # brackets started so far: the next one is brackets[started % len]
        self._where: dict[TrialId, int] = {}  # trial -> index of its bracket in _running

    def _new_bracket(self) -> SuccessiveHalvingBracket:
        template = self.brackets[self._started % len(self.brackets)]
        self._started += 1
        bracket = SuccessiveHalvingBracket(template, reduction_factor=self.reduction_factor)
        self._running.append(bracket)
        return bracket

    def on_trial_start(self, trial_id: TrialId) -> TrialPlan:
        if not self._running or self._running[-1].is_full:
            self._new_bracket()
        bracket = self._running[-1]
        bracket.add(trial_id)
        self._where[trial_id] = len(self._running) - 1
        return TrialPlan(
            bracket=bracket.bracket.s, rungs=bracket.resources, max_resource=self.max_resource
        )

    def _bracket_of(self, trial_id: TrialId) -> SuccessiveHalvingBracket | None:
        index = self._where.get(trial_id)
        return None if index is None else self._running[index]

    def on_report(self, trial_id: TrialId, step: int, value: float) -> Decision:
        bracket = self._bracket_of(trial_id)
        if bracket is None:
            return Decision.STOP if step >= self.max_resource else Decision.CONTINUE
        return bracket.report(trial_id, step, self.loss(value))

    def on_trial_complete(self, trial_id: TrialId) -> None:
        bracket = self._bracket_of(trial_id)
        if bracket is not None:
            bracket.complete(trial_id)

    def poll(self, *, free_slots: int, can_start_new: bool = True) -> list[Command]:
        if not can_start_new and self._running:
            self._running[-1].close()
        commands: list[Command] = []
        for bracket in self._running:
            resumes = sum(c.decision is Decision.RESUME for c in commands)
            commands += bracket.take_commands(free_slots=free_slots - resumes)
        return commands

    def counts(self) -> list[tuple[int, list[int]]]:
        """``(s, trials per rung)`` of each bracket started so far."""
        return [(b.bracket.s, b.counts()) for b in self._running]

    def state_dict(self) -> dict[str, Any]:
        return {
            "started": self._started,
            "where": [[t, i] for t, i in self._where.items()],
            "brackets": [{"s": b.bracket.s, "state": b.state_dict()} for b in self._running],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._started = int(state["started"])
        self._where = {t: int(i) for t, i in state["where"]}
        by_s = {b.s: b for b in self.brackets}
        self._running = []
        for data in state["brackets"]:
            bracket = SuccessiveHalvingBracket(
                by_s[data["s"]], reduction_factor=self.reduction_factor
            )
            bracket.load_state_dict(data["state"])
            self._running.append(bracket)
