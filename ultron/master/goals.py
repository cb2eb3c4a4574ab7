"""A job's own goals and the reason it ended.

Besides its trial count (``num_iterations``), a job may have a wall-clock budget
(``budget.time``) and a target score (``objective.target``); POP's ``max_time`` and ``target``
(``early_stopping.options``) are the same two goals when the spec sets no other. The master's
loops (:mod:`ultron.master.loops`) read :class:`JobGoals`; when a goal is reached they start no
trial, ask the running ones to stop and end the job ``completed`` with a :class:`JobEnd`.

Example:
    >>> goals = JobGoals(target=0.9, direction=Direction.MAXIMIZE)
    >>> goals.reached(0.95), goals.reached(0.5), goals.reached(None)
    (True, False, False)
    >>> str(JobEnd(EndKind.TARGET, trial_id="0007"))
    'target reached by trial 0007'
    >>> str(JobEnd(EndKind.TRIALS, trials=20))
    'budget: 20 trials'
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from ultron.algorithms.base import Direction
from ultron.spec.job import JobSpec
from ultron.trial_records import TrialResult

__all__ = ["EndKind", "GoalWatch", "JobEnd", "JobGoals"]

logger = logging.getLogger(__name__)


class EndKind(StrEnum):
    """Why a job ended."""

    TRIALS = "budget"  # num_iterations trials scored
    TIME = "time budget"
    TARGET = "target reached"
    EXHAUSTED = "search space exhausted"  # the strategy had no more candidates
    CANCELLED = "cancelled"
    FAILED = "failed"


@dataclass(frozen=True)
class JobEnd:
    """How a job ended, as ``best.json``, ``ultron status`` and the flow run say it.

    Attributes:
        kind: why.
        trial_id: the trial that reached the target (``TARGET``).
        trials: the trial budget (``TRIALS``).
        error: what failed (``FAILED``).
    """

    kind: EndKind
    trial_id: str | None = None
    trials: int | None = None
    error: str | None = None

    def __str__(self) -> str:
        if self.kind is EndKind.TARGET and self.trial_id is not None:
            return f"{self.kind} by trial {self.trial_id}"
        if self.kind is EndKind.TRIALS and self.trials is not None:
            return f"{self.kind}: {self.trials} trials"
        if self.kind is EndKind.FAILED and self.error:
            return f"{self.kind}: {self.error}"
        return str(self.kind)


@dataclass(frozen=True)
class JobGoals:
    """The goals that end a job before its trial budget.

    Attributes:
        time_s: seconds of search over all the job's runs (``None``: no limit).
        target: the score that is good enough (``None``: none).
        direction: whether lower (minimize) or higher scores are better.
    """

    time_s: float | None = None
    target: float | None = None
    direction: Direction = Direction.MINIMIZE

    @classmethod
    def of(cls, spec: JobSpec) -> JobGoals:
        """The goals of a job spec: its own, or its POP stopper's ``max_time`` and ``target``
        (the latter only when POP judges the objective's metric and its target is fixed: a
        dynamic one, ``raise_target_by``, is a first goal that POP raises, not the job's end)."""
        time_s, target = spec.budget.time, spec.objective.target
        stopping = spec.early_stopping
        if stopping is not None and stopping.type == "pop":
            options = stopping.options
            if time_s is None and options.get("max_time") is not None:
                time_s = float(options["max_time"])
            same_metric = stopping.metric in (None, spec.objective.metric)
            fixed = options.get("raise_target_by") is None
            if target is None and same_metric and fixed and options.get("target") is not None:
                target = float(options["target"])
        return cls(time_s=time_s, target=target, direction=spec.objective.mode)

    def reached(self, score: float | None) -> bool:
        """Whether ``score`` reaches the target: at least it when maximizing, at most it when
        minimizing (never without a target or a score)."""
        if self.target is None or score is None or math.isnan(score):
            return False
        if self.direction is Direction.MAXIMIZE:
            return score >= self.target
        return score <= self.target


@dataclass
class GoalWatch:
    """One run of a search, watched against its goals (the master's loops hold one).

    Call :meth:`begin` when the search starts, :meth:`check_time` before starting trials,
    :meth:`check_target` with each result and :meth:`finish` when the loop is over. The first
    goal reached sets :attr:`end` and asks the running trials to stop (``request_stop``, the
    dispatcher's); the loops then start nothing more.

    Attributes:
        goals: the job's goals.
        request_stop: ``(reason, grace_s) -> trial ids``: asks the running trials to stop.
        clock: seconds, the dispatcher's time (simulated in a simulation).
        grace_s: how long a trial asked to stop has to return.
        end: the goal reached (``None`` while the search goes on).
        stopping: the trials asked to stop for it.
    """

    goals: JobGoals
    request_stop: Callable[[str, float], list[str]]
    clock: Callable[[], float] = time.monotonic
    grace_s: float = 30.0
    end: JobEnd | None = None
    stopping: set[str] = field(default_factory=set)
    _spent_before: float = 0.0
    _started: float | None = None

    def begin(self, spent_before: float) -> None:
        """Start this run's clock on the seconds the job's earlier runs spent."""
        self._spent_before, self._started = spent_before, self.clock()

    def elapsed(self) -> float:
        """Seconds of search over the job's runs."""
        if self._started is None:
            return self._spent_before
        return self._spent_before + self.clock() - self._started

    def time_left(self) -> float | None:
        """Seconds left of the time budget (``None``: no time budget)."""
        if self.goals.time_s is None:
            return None
        return max(0.0, self.goals.time_s - self.elapsed())

    def check_time(self) -> bool:
        """Whether a goal has ended the search (the time budget is checked now)."""
        if self.end is None and self.time_left() == 0.0:
            self.reach(JobEnd(EndKind.TIME))
        return self.end is not None

    def check_target(self, results: Sequence[TrialResult]) -> None:
        """End the search at the first of ``results`` whose score reaches the target."""
        for result in results:
            if result.status.ok and self.goals.reached(result.score):
                self.reach(JobEnd(EndKind.TARGET, trial_id=result.trial_id))
                return

    def reach(self, end: JobEnd) -> None:
        """A goal is reached: the running trials are asked to stop (once, for the first)."""
        if self.end is not None:
            return
        self.end = end
        self.stopping.update(self.request_stop(str(end), self.grace_s))
        logger.info("%s: no trial starts; running trials %s stop", end, sorted(self.stopping))

    def finish(self, *, exhausted: bool, trials: int) -> JobEnd:
        """Why the search ended: its goal, or the strategy running dry, or the trial budget."""
        if self.end is None:
            self.end = (
                JobEnd(EndKind.EXHAUSTED) if exhausted else JobEnd(EndKind.TRIALS, trials=trials)
            )
        return self.end
