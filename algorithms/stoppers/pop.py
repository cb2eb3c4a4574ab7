"""POP: promising / opportunistic / poor scheduling (HyperDrive, Rasley et al. 2017, §3).

At every evaluation boundary (every ``interval`` steps from ``min_resource``) a trial's learning
curve is extrapolated (:class:`ultron.algorithms.curve_model.CurveModel`) to get, for each future
step ``m`` it can still reach in the time left, ``P(y(m) >= y_target)``. From these:

- the prediction confidence ``p``, the expected remaining time ``ERT`` (eq. 2-3, truncated at
  the time left, as the paper prescribes) and the dynamic threshold of §3.2 that makes the
  best of them *promising* (:mod:`ultron.algorithms.stoppers.pop_threshold`);
- *poor* trials are worse than the user's ``kill_threshold`` (domain knowledge: e.g. chance
  accuracy) after ``kill_after`` steps and are stopped;
- everyone else is *opportunistic*: suspended at its boundary (its checkpoint kept) so that the
  slot goes to a new trial or, round robin, back to a suspended one.

``poll`` resumes suspended trials that have become promising first, then shares the remaining
slots between new trials and suspended opportunistic ones (``resume_share`` of them). When
nothing new can start, every slot resumes a suspended trial.

Where this departs from the paper, and why (measured on LCBench task 189906, the YAHPO
surrogate, ``benchmarks/lcbench.py``):

- **The curve model alone cannot rank short curves.** At epoch 4 the parametric ensemble's
  ``p`` ranks the 20 eventual winners among 4,000 random configurations with an AUC of 0.48 and
  gives 15 of them ``p = 0``; the value reached ranks them with an AUC of 0.96 (0.95 at epoch
  2). With ``p = 0`` for nearly every trial, the paper's rule (resume only by ``p``; kill below
  0.05) never resumed a future winner: 1,506 of 1,514 trials stayed suspended after 4 epochs and
  no trial ever reached ``max_resource``. So opportunistic trials are resumed in order of ``p``,
  then of their quantile among the values every trial reported at the same boundary (the rung
  of ASHA), and ``p < 0.05`` suspends rather than kills.
- **The curve model learns from the job's finished curves** (issue 28). Once
  ``min_references`` trials have run to ``max_resource`` (or stopped at the target, counted with
  their last value carried on), a trial's future is what finished curves with a similar prefix
  did, and its interval is calibrated on their own leave-one-out errors (split-conformal:
  79-81% coverage of its 80% interval on the 34 LCBench tasks, ``benchmarks/curves_check.py``).
  Suspended trials are re-estimated when references arrive.
- **Unfinished curves as references** (``partial_quantile``, off by default): before
  ``min_references`` curves finish, a trial is judged against the trials that reached further
  (:class:`ultron.algorithms.partial_references.PartialReferences`), as ASHA compares at rungs:
  ``p`` is its chance of matching that quantile of their values at the deepest step enough of
  them reached. Judging from epoch 1 it took POP to ASHA's speed on 10 LCBench tasks, but
  reached fewer of the 34 (``benchmarks/RESULTS.md``, "POP's grid": at its own step a trial
  gets ``p`` 0 or 1, and 0 is not estimated again); the suite judges from epoch 4 without it.
- **The target ends a trial.** POP's objective is the time to a configuration that reaches
  ``y_target``; a trial that reports it is stopped there (``stop_at_target``), as HyperDrive
  ends the experiment.

**The dynamic target** (§9, for a ``y_target`` nobody knows in advance): with
``raise_target_by``, a report that reaches the target raises it to that value plus
``raise_target_by`` (minus, when minimizing; capped at ``bounds``), and the search goes on
towards the new one; the trial that reached it is judged against the new target like every
other. Suspended trials are re-estimated against the new target at the next ``poll`` once the
curve model is calibrated (before, at their next boundary, as any trial). The raised target is
part of the state.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ultron.algorithms.base import Direction
from ultron.algorithms.curve_model import CurveModel
from ultron.algorithms.partial_references import PartialReferences
from ultron.algorithms.stoppers.base import Command, Decision, Stopper, TrialId
from ultron.algorithms.stoppers.pop_threshold import promising, reach_summary
from ultron.algorithms.stoppers.pop_trials import (
    BoundaryValues,
    TrialRecord,
    trials_from_state,
    trials_state,
)

__all__ = ["POP"]


class POP(Stopper):
    """HyperDrive's POP classification and scheduling, with suspend and resume.

    Args:
        direction: minimize or maximize the reported value.
        max_resource: the most steps a trial runs.
        target: ``y_target``: the value the user wants to reach.
        slots: ``S``: how many trials run at once (workers).
        min_resource: the first evaluation boundary (default: ``interval``).
        interval: ``b``: steps between evaluations (default 10% of ``max_resource``).
        max_time: ``T_max``: seconds of the whole experiment (``None``: no limit).
        kill_threshold: a value no useful trial is worse than after ``kill_after`` steps.
        kill_after: when the kill threshold starts to apply (default: ``min_resource``).
        slots_per_trial: ``k``: slots one trial occupies.
        resume_share: fraction of opportunistic slots that resume a suspended trial while new
            trials can still start (0.3 reached the target sooner than 0.5 on LCBench 189906).
        min_references: finished curves the curve model needs before it predicts from them
            (before: the parametric ensemble, widened).
        partial_quantile: before then, judge a trial against the trials that reached further,
            finished or not (:class:`ultron.algorithms.partial_references.PartialReferences`):
            ``p`` is its chance of matching this quantile of their values at the deepest step
            ``min_references`` of them reached (``None``: the fallback decides).
        stop_at_target: stop a trial as soon as it reports the target.
        raise_target_by: the dynamic target (HyperDrive §9): once a trial reports the target,
            the target becomes that value plus this step (minus when minimizing, capped at
            ``bounds``); ``None`` (the default) keeps it fixed. It must be above 0.
        bootstrap: refits per curve family (uncertainty of the extrapolation).
        bounds: range of the value (``(0, 100)`` for an accuracy in percent).
        seed: seed of the bootstrap's generator.
        clock: seconds, the time base of ``max_time`` and epoch durations.

    Example:
        >>> clock = iter(range(100)).__next__
        >>> pop = POP(direction="maximize", max_resource=20, target=0.9, slots=2, interval=4,
        ...           kill_threshold=0.2, seed=0, clock=lambda: float(clock()))
        >>> pop.on_trial_start("flat")
        TrialPlan(bracket=0, rungs=(), max_resource=20)
        >>> [pop.on_report("flat", s, 0.1) for s in (1, 2, 3, 4)][-1]
        <Decision.STOP: 'stop'>
    """

    def __init__(
        self,
        *,
        direction: Direction | str = Direction.MINIMIZE,
        max_resource: int,
        target: float,
        slots: int,
        min_resource: int | None = None,
        interval: int | None = None,
        max_time: float | None = None,
        kill_threshold: float | None = None,
        kill_after: int | None = None,
        slots_per_trial: int = 1,
        resume_share: float = 0.3,
        bootstrap: int = 12,
        min_references: int = 10,
        partial_quantile: float | None = None,
        stop_at_target: bool = True,
        raise_target_by: float | None = None,
        bounds: tuple[float, float] = (-math.inf, math.inf),
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval or max(1, round(0.1 * max_resource))
        first = min_resource or self.interval
        super().__init__(direction=direction, min_resource=first, max_resource=max_resource)
        if slots < 1:
            raise ValueError(f"slots is {slots}; it must be at least 1 (the number of workers)")
        if raise_target_by is not None and not raise_target_by > 0:
            raise ValueError(
                f"raise_target_by is {raise_target_by}; it must be above 0 (the step the "
                "target rises by once reached), or None for a fixed target"
            )
        self.target = target
        self.raise_target_by = raise_target_by
        self.slots = slots
        self.max_time = max_time
        self.kill_threshold = kill_threshold
        self.kill_after = kill_after or first
        self.slots_per_trial = slots_per_trial
        self.resume_share = resume_share
        self.bootstrap = bootstrap
        self.stop_at_target = stop_at_target
        self._bounds = tuple(sorted(-self.loss(b) for b in bounds))
        self.clock = clock
        self.rng = np.random.default_rng(seed)
        self._trials: dict[TrialId, TrialRecord] = {}
        self._t0: float | None = None
        self._share = 0.0  # round-robin credit of the opportunistic pool
        # Curves of the trials that ran to ``max_resource`` or stopped at the target, on the
        # grid of steps: the curve model's references.
        self._references: dict[TrialId, np.ndarray] = {}
        self._model = CurveModel(
            max_resource,
            min_references=min_references,
            bootstrap=bootstrap,
            bounds=(self._bounds[0], self._bounds[1]),
        )
        self._partial = (
            None
            if partial_quantile is None
            else PartialReferences(
                max_resource,
                min_references=min_references,
                quantile=partial_quantile,
                bounds=(self._bounds[0], self._bounds[1]),
            )
        )
        self._seen = BoundaryValues(min_resource=first, interval=self.interval)
        self._rescored = 0  # references when suspended trials were last re-estimated

    def on_trial_start(self, trial_id: TrialId) -> Any:
        now = self.clock()
        self._t0 = now if self._t0 is None else self._t0
        self._trials[trial_id] = trial = TrialRecord(last_time=now)
        if self._partial is not None:
            self._partial.update(trial_id, trial.steps, trial.gains)
        return super().on_trial_start(trial_id)

    def on_report(self, trial_id: TrialId, step: int, value: float) -> Decision:
        if trial_id not in self._trials:
            self.on_trial_start(trial_id)
        trial = self._trials[trial_id]
        now = self._record(trial, step, value)
        if self.raise_target_by is not None and trial.gains[-1] >= -self.loss(self.target):
            self._raise_target(value)
        if self.stop_at_target and trial.gains[-1] >= -self.loss(self.target):
            trial.status = "done"  # the search's goal is met: no epoch more is needed
            self._add_reference(trial_id, trial)
            return Decision.STOP
        if step >= self.max_resource:
            trial.status = "done"
            self._add_reference(trial_id, trial)
            return Decision.STOP
        if self._is_poor(step, value):
            trial.status, trial.poor = "done", True
            if self._partial is not None:
                self._partial.forget(trial_id)
            return Decision.STOP
        if not self._seen.is_boundary(step):
            return Decision.CONTINUE
        self._seen.add(step, trial.gains[-1])
        trial.p, trial.ert = self._confidence(trial, step, now, trial_id)
        if trial_id in self._promising():
            return Decision.CONTINUE
        trial.status, trial.suspended_at = "suspended", now
        return Decision.SUSPEND

    def on_late_report(self, trial_id: TrialId, step: int, value: float) -> None:
        """The step a stopped or suspended trial trained before it heard: its curve and its
        epoch time take it, and at ``max_resource`` it is a finished curve."""
        trial = self._trials.get(trial_id)
        if trial is None:
            return
        self._record(trial, step, value)
        if self.raise_target_by is not None and trial.gains[-1] >= -self.loss(self.target):
            self._raise_target(value)
        if step >= self.max_resource:
            trial.status = "done"
            self._add_reference(trial_id, trial)
        elif self._seen.is_boundary(step):
            self._seen.add(step, trial.gains[-1])

    def _record(self, trial: TrialRecord, step: int, value: float) -> float:
        """Add a report to the trial's curve and its running time; the time now."""
        now = self.clock()
        trial.record(step, -self.loss(value), now)
        return now

    def _raise_target(self, value: float) -> None:
        """The dynamic target: ``value`` reached the target; the next one is a step better."""
        step = self.raise_target_by or 0.0
        low, high = -self._bounds[1], -self._bounds[0]  # the bounds as losses
        raised = min(max(self.loss(value) - step, low), high)
        if raised < self.loss(self.target):  # at the bound: the target stays reached
            self.target = raised if self.direction is Direction.MINIMIZE else -raised
            self._rescored = -1  # suspended trials: re-estimated against it at the next poll

    def _is_poor(self, step: int, value: float) -> bool:
        if self.kill_threshold is None or step < self.kill_after:
            return False
        return self.loss(value) > self.loss(self.kill_threshold)

    def _confidence(
        self, trial: TrialRecord, step: int, now: float, trial_id: TrialId
    ) -> tuple[float, float]:
        """``(p, ERT)`` of §3.1.1 for a trial at ``step``, from the curve model's reach curve."""
        goal = -self.loss(self.target)
        if max(trial.gains) >= goal:
            return 1.0, 0.0
        epoch, left = self._epochs_left(trial, step, now)
        if left <= 0:
            trial.model = (0.0, 0.0)
            return 0.0, math.inf
        if self._partial is not None and not self._model.calibrated:
            partial = self._partial.chance(trial_id, trial.steps, trial.gains, rng=self.rng)
            if partial is not None:
                p, h = partial
                epochs = h - step + (1.0 - p) * (self.max_resource - h)
                trial.model = (p, epochs)
                return p, epochs * epoch
        horizon = list(range(step + 1, step + left + 1))
        prediction = self._model.predict(trial.steps, trial.gains, horizon, rng=self.rng)
        trial.model = reach_summary(prediction.prob_reached(goal))
        return trial.model[0], trial.model[1] * epoch

    def _epochs_left(self, trial: TrialRecord, step: int, now: float) -> tuple[float, int]:
        """The trial's mean epoch duration and the epochs it can still run (``M_i``)."""
        epoch = trial.epoch_time
        left = self.max_resource - step
        if self.max_time is not None and epoch > 0:
            left = min(left, int((self.max_time - (now - (self._t0 or 0.0))) // epoch))
        return epoch, left

    def _add_reference(self, trial_id: TrialId, trial: TrialRecord) -> None:
        """A finished curve for the curve model; one stopped at the target counts with its
        last value carried on (it has reached the target: leaving it out would teach the
        model that no curve does). Once per trial: a stopped trial may report again before it
        stops."""
        if trial_id in self._references:
            return
        row = np.interp(np.arange(1, self.max_resource + 1), trial.steps, trial.gains)
        self._references[trial_id] = row
        self._model.add_reference(row)

    def _promising(self) -> set[TrialId]:
        """The dynamic threshold of §3.2 and the trials above it."""
        scored = {
            t: (tr.p or 0.0, tr.ert)
            for t, tr in self._trials.items()
            if tr.status != "done" and tr.p
        }
        return promising(scored, slots=self.slots, slots_per_trial=self.slots_per_trial)

    def on_trial_complete(self, trial_id: TrialId) -> None:
        if trial_id in self._trials:
            self._trials[trial_id].status = "done"

    def poll(self, *, free_slots: int, can_start_new: bool = True) -> list[Command]:
        suspended = [t for t, tr in self._trials.items() if tr.status == "suspended"]
        if not suspended or free_slots <= 0:
            return []
        if len(self._references) != self._rescored:
            self._rescore(suspended)
        ahead = self._promising()
        order = sorted(suspended, key=lambda t: self._trials[t].ert)
        chosen = [t for t in order if t in ahead][:free_slots]
        # Opportunistic order: confidence, then the value reached (the ensemble gives p = 0 to
        # most short curves, eventual winners included; the value reached ranks them).
        others = sorted(
            (t for t in suspended if t not in ahead),
            key=lambda t: (-(self._trials[t].p or 0.0), self._seen.share_better(self._trials[t])),
        )
        for t in others:
            if len(chosen) == free_slots:
                break
            if can_start_new:
                self._share += self.resume_share
                if self._share < 1.0:
                    break  # this slot goes to a new trial
                self._share -= 1.0
            chosen.append(t)
        now = self.clock()
        for t in chosen:
            self._trials[t].status, self._trials[t].last_time = "running", now
        return [Command(t, Decision.RESUME) for t in chosen]

    def _rescore(self, suspended: list[TrialId]) -> None:
        """Re-estimate suspended trials with the references that arrived since they stopped.

        A trial suspended early with ``p = 0`` (the fallback is unsure from a few points) is
        never resumed while new trials can start; new references may show it is promising.
        Before the model has its ``min_references``, its fallback would only say it again.
        """
        self._rescored = len(self._references)
        if not self._model.calibrated:
            return
        now = self.clock()
        for t in suspended:
            trial = self._trials[t]
            if trial.p is None or trial.p >= 1.0:
                continue
            trial.p, trial.ert = self._confidence(trial, trial.steps[-1], now, t)

    def classify(self, trial_id: TrialId) -> str:
        """``"promising"``, ``"opportunistic"``, ``"poor"`` (stopped) or ``"unknown"``."""
        trial = self._trials.get(trial_id)
        if trial is not None and trial.poor:
            return "poor"
        if trial is None or trial.p is None:
            return "unknown"
        return "promising" if trial_id in self._promising() else "opportunistic"

    def set_slots(self, slots: int) -> None:
        """``S`` follows the job's parallelism when it is scaled."""
        if slots < 1:
            raise ValueError(f"slots is {slots}; it must be at least 1 (the number of workers)")
        self.slots = slots

    def state_dict(self) -> dict[str, Any]:
        return {
            "trials": trials_state(self._trials),
            "t0": self._t0,
            "share": self._share,
            "rescored": self._rescored,
            "target": self.target,
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.raise_target_by is not None:  # the dynamic target as it had risen
            self.target = float(state.get("target", self.target))
        self._trials = trials_from_state(state["trials"])
        goal = -self.loss(self.target)
        self._references = {}
        self._model = CurveModel(
            self.max_resource,
            min_references=self._model.min_references,
            bootstrap=self.bootstrap,
            bounds=self._model.bounds,
        )
        for t, tr in self._trials.items():
            finished = tr.steps and tr.steps[-1] >= self.max_resource
            if finished or (self.stop_at_target and tr.gains and tr.gains[-1] >= goal):
                self._add_reference(t, tr)
        if self._partial is not None:
            self._partial.clear()
            for t, tr in self._trials.items():
                if not tr.poor:
                    self._partial.update(t, tr.steps, tr.gains)
        self._seen.rebuild(self._trials.values())
        self._rescored = int(state.get("rescored", len(self._references)))
        self._t0 = state["t0"]
        self._share = float(state["share"])
        self.rng.bit_generator.state = state["rng"]
