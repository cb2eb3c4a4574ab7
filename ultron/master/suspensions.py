"""The trials early stopping has paused, in the master: those that returned suspended, and the
resumes the stopper gave before their trial returned.

A stopper may suspend a trial (POP's opportunistic trials, a population-based training round):
the trial returns from its checkpoint, has no row in the trial table yet and no longer runs, and
the master keeps its last result until the stopper resumes or ends it (the async loop's
``_run_commands``). A stopper may also decide for a trial whose suspending report it judged
while the trial ran on (it hears the decision with its next report): that command is held until
the trial returns suspended, never dropped. Both are saved with the stopper's state
(:meth:`Suspensions.state_dict`), so a restarted master resumes them as its predecessor would
have (:meth:`Suspensions.from_saved`).

Example:
    >>> from ultron.trial_records import TrialStatus
    >>> paused = Suspensions.from_saved(None)
    >>> paused.trials["0003"] = TrialResult("0003", {"lr": 0.1}, TrialStatus.COMPLETED, score=1.0)
    >>> again = Suspensions.from_saved(paused.state_dict())
    >>> list(again.trials), again.trials["0003"].score, again.held
    (['0003'], 1.0, {})
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ultron.algorithms.stoppers.base import Command, Decision
from ultron.master.early_stopping import StopperDriver
from ultron.trial_records import TrialResult, TrialStatus

__all__ = ["Suspensions"]


@dataclass
class Suspensions:
    """One job's paused trials and held resumes, judged and kept by its master.

    Attributes:
        trials: the last result of each trial that returned suspended, by trial id.
        held: the stopper's command for each suspended trial that had not returned yet.
    """

    trials: dict[str, TrialResult] = field(default_factory=dict)
    held: dict[str, Command] = field(default_factory=dict)

    @classmethod
    def from_saved(cls, saved: Mapping[str, Any] | None) -> Suspensions:
        """What a previous master of the job saved beside the stopper's state (or nothing)."""
        saved = saved or {}
        return cls(
            trials={
                trial_id: TrialResult.from_dict(row)
                for trial_id, row in saved.get("suspended", {}).items()
            },
            held={
                trial_id: Command.from_dict(command)
                for trial_id, command in saved.get("held", {}).items()
            },
        )

    def state_dict(self) -> dict[str, Any]:
        """The part of the job's stopper state these make up (JSON, :meth:`from_saved`)."""
        return {
            "suspended": {trial_id: r.to_dict() for trial_id, r in self.trials.items()},
            "held": {trial_id: command.to_dict() for trial_id, command in self.held.items()},
        }

    def judge(self, driver: StopperDriver, result: TrialResult) -> TrialResult | None:
        """Apply early stopping to a returned trial: stopped, suspended (None, kept here) or as
        it is.

        A trial that took other trials' checkpoints (population-based training) carries its
        lineage in its row."""
        lineage = driver.lineage(result.trial_id)
        if lineage:
            result = replace(result, lineage=lineage)
        if not result.status.ok:
            self.held.pop(result.trial_id, None)
            driver.complete(result.trial_id)
            return result
        decision = driver.outcome(result.trial_id)
        if decision is Decision.SUSPEND:
            self.trials[result.trial_id] = result
            return None
        self.held.pop(result.trial_id, None)
        driver.complete(result.trial_id)
        if decision is Decision.STOP:
            return replace(result, status=TrialStatus.STOPPED)
        return result
