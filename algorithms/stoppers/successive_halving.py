"""One synchronous successive-halving bracket, the building block of Hyperband.

Jamieson & Talwalkar 2016; Li et al. 2017 (inner loop of Algorithm 1). A trial that reaches its
rung waits there (suspended, its worker freed for other trials) until every trial of the rung has
reported; then the best ``1/eta`` are resumed to the next rung and the others are stopped.
"""

from __future__ import annotations

import math
from typing import Any

from ultron.algorithms.stoppers.base import Command, Decision, TrialId, decode_loss, encode_loss
from ultron.algorithms.stoppers.budgets import Bracket

__all__ = ["SuccessiveHalvingBracket"]


class SuccessiveHalvingBracket:
    """Bookkeeping of one bracket: who is at which rung, and who moves up.

    Args:
        bracket: the rungs (trials and resource of each), from :func:`hyperband_brackets`.
        reduction_factor: ``eta``: one in ``eta`` trials of a rung moves up.

    Example:
        >>> from ultron.algorithms.stoppers.budgets import successive_halving, Bracket
        >>> rungs = successive_halving(3, min_resource=1, rungs=2)
        >>> sh = SuccessiveHalvingBracket(Bracket(1, rungs))
        >>> for t in "abc":
        ...     _ = sh.add(t)
        >>> [sh.report(t, 1, loss).value for t, loss in [("a", 0.3), ("b", 0.1), ("c", 0.2)]]
        ['suspend', 'suspend', 'suspend']
        >>> [(c.trial_id, c.decision.value) for c in sh.take_commands(free_slots=1)]
        [('b', 'resume'), ('c', 'stop'), ('a', 'stop')]
    """

    def __init__(self, bracket: Bracket, *, reduction_factor: int = 3) -> None:
        self.bracket = bracket
        self.reduction_factor = reduction_factor
        self.capacity = bracket.rungs[0].trials
        self._rung: dict[TrialId, int] = {}  # trial -> the rung it is heading for
        self._entered: list[list[TrialId]] = [[] for _ in bracket.rungs]
        self._losses: list[dict[TrialId, float]] = [{} for _ in bracket.rungs]
        self._resumes: list[TrialId] = []
        self._stops: list[TrialId] = []
        self._closed = False  # no more trials will join (full, or nothing new to start)

    @property
    def resources(self) -> tuple[float, ...]:
        return tuple(rung.resource for rung in self.bracket.rungs)

    @property
    def is_full(self) -> bool:
        return self._closed or len(self._entered[0]) >= self.capacity

    def add(self, trial_id: TrialId) -> bool:
        """Let a new trial in at the bottom rung; False when the bracket is full."""
        if self.is_full:
            return False
        self._entered[0].append(trial_id)
        self._rung[trial_id] = 0
        self._closed = len(self._entered[0]) >= self.capacity
        return True

    def close(self) -> None:
        """No more trials will join: judge the bottom rung with those it has."""
        if not self._closed and self._entered[0]:
            self._closed = True
            self._judge(0)

    def report(self, trial_id: TrialId, step: int, loss: float) -> Decision:
        i = self._rung[trial_id]
        if i >= len(self.bracket.rungs) or step < self.bracket.rungs[i].resource:
            return Decision.CONTINUE
        self._losses[i][trial_id] = loss
        if i == len(self.bracket.rungs) - 1:
            self._rung[trial_id] = i + 1
            return Decision.STOP  # finished its budget: the bracket's winner(s)
        self._judge(i)
        if trial_id in self._resumes:
            # It was the last of its rung and moves up: no need to suspend and resume it.
            self._resumes.remove(trial_id)
            return Decision.CONTINUE
        return Decision.SUSPEND

    def complete(self, trial_id: TrialId) -> None:
        """The trial ended on its own (finished early or failed) before its rung was judged."""
        i = self._rung.get(trial_id, len(self.bracket.rungs))
        if i < len(self.bracket.rungs) and trial_id not in self._losses[i]:
            self._losses[i][trial_id] = math.inf
            self._rung[trial_id] = len(self.bracket.rungs)
            self._judge(i)

    def _judge(self, i: int) -> None:
        """When every trial of rung ``i`` has reported, move the best up and stop the rest."""
        entered, losses = self._entered[i], self._losses[i]
        if (i == 0 and not self.is_full) or len(losses) < len(entered) or not entered:
            return
        if i + 1 < len(self._entered) and self._entered[i + 1]:
            return  # judged already
        ranked = sorted(entered, key=lambda t: losses[t])
        keep = max(1, len(entered) // self.reduction_factor)
        winners = [t for t in ranked[:keep] if not math.isinf(losses[t])]
        for trial_id in ranked:
            if trial_id in winners:
                self._rung[trial_id] = i + 1
                self._entered[i + 1].append(trial_id)
                self._resumes.append(trial_id)
            elif self._rung.get(trial_id) == i:
                self._rung[trial_id] = len(self.bracket.rungs)
                self._stops.append(trial_id)

    def take_commands(self, *, free_slots: int) -> list[Command]:
        """Hand out the pending resumes (at most ``free_slots``) and every pending stop."""
        resumes, self._resumes = self._resumes[:free_slots], self._resumes[free_slots:]
        stops, self._stops = self._stops, []
        return [Command(t, Decision.RESUME) for t in resumes] + [
            Command(t, Decision.STOP) for t in stops
        ]

    def counts(self) -> list[int]:
        """How many trials entered each rung so far (for tests and progress displays)."""
        return [len(entered) for entered in self._entered]

    def state_dict(self) -> dict[str, Any]:
        return {
            "rung": [[t, i] for t, i in self._rung.items()],
            "entered": [list(e) for e in self._entered],
            "losses": [[[t, encode_loss(v)] for t, v in rung.items()] for rung in self._losses],
            "resumes": list(self._resumes),
            "stops": list(self._stops),
            "closed": self._closed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._rung = {t: int(i) for t, i in state["rung"]}
        self._entered = [list(e) for e in state["entered"]]
        self._losses = [{t: decode_loss(v) for t, v in rung} for rung in state["losses"]]
        self._resumes = list(state["resumes"])
        self._stops = list(state["stops"])
        self._closed = bool(state["closed"])
