"""The stopper interface: a stopper sees a trial's reports and decides how long it runs.

Order of calls, made by the master and nobody else (steps count from 1; a step is one unit of
resource, usually an epoch):

1. ``on_trial_start(trial_id)`` when a new trial is about to start; returns its
   :class:`TrialPlan` (the Hyperband bracket it belongs to and its rung resources). Then
   ``on_trial_config(trial_id, config)`` with its configuration.
2. ``on_report(trial_id, step, value)`` for every ``ultron.report`` of the trial, with steps
   strictly increasing for a trial, across suspensions too. It returns a :class:`Decision`:

   - ``CONTINUE``: let the trial go on;
   - ``STOP``: the trial is over. ``report`` tells the model to stop (cooperative); the master
     kills it when it does not listen within a grace period (forced). Then step 4.
   - ``SUSPEND``: the trial saves its checkpoint and leaves its worker; it is neither over nor
     running. Only ``poll`` brings it back (``RESUME``) or ends it (``STOP``).
   After a ``STOP`` or ``SUSPEND``, the trial's reports until it returns come to
   ``on_late_report(trial_id, step, value)``, never judged: a trial hears a decision with its
   next report, so it trains one step more (more, when the decision came late), and the
   checkpoint it writes as it returns holds that step. One at ``max_resource`` ends the trial
   complete, whatever was decided (step 4).
3. ``poll(free_slots=k, can_start_new=...)`` whenever workers are free (and after decisions):
   returns :class:`Command` s for suspended trials: ``RESUME`` (restart it with ``resume=True``
   from its checkpoint, on one of the ``k`` free slots; its next report is the step after the
   last one) or ``STOP`` (it is over, its checkpoint may go). A ``RESUME`` may carry another
   configuration and a ``source`` trial whose checkpoint it restarts from (PBT's exploit).
   The master starts new trials on the slots left over. ``can_start_new=False`` says the
   strategy or budget has nothing new to start, so waiting brackets must make do with the
   trials they have.
4. ``on_trial_complete(trial_id)`` when a trial ended, whatever the reason (finished its epochs,
   failed, stopped). Never called for a suspended trial until it is resumed or stopped.

``set_slots(n)`` may come between any two calls: the job was scaled to ``n`` trials at once.

``state_dict`` may be called between any two calls; ``load_state_dict`` on a fresh instance built
with the same arguments continues identically. Only the stopper changes its state.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ultron.algorithms.base import Direction

__all__ = [
    "Command",
    "Decision",
    "Stopper",
    "TrialId",
    "TrialPlan",
    "decode_loss",
    "encode_loss",
]

TrialId = str | int


class Decision(StrEnum):
    """What the master does with a trial after a report, or with a suspended trial on poll."""

    CONTINUE = "continue"
    STOP = "stop"
    SUSPEND = "suspend"
    RESUME = "resume"


@dataclass(frozen=True)
class Command:
    """A decision about a suspended trial, returned by :meth:`Stopper.poll`.

    Attributes:
        trial_id: the suspended trial.
        decision: ``RESUME`` or ``STOP``.
        config: with ``RESUME``, the configuration it goes on with (``None``: its own).
        source: with ``RESUME``, the trial whose newest checkpoint replaces its own before it
            goes on (population-based training's exploit); ``None``: its own checkpoint.
    """

    trial_id: TrialId
    decision: Decision
    config: dict[str, Any] | None = None
    source: TrialId | None = None

    def to_dict(self) -> dict[str, Any]:
        """The command as JSON data; :meth:`from_dict` gives it back.

        Example:
            >>> command = Command("0001", Decision.RESUME, config={"lr": 0.1}, source="0002")
            >>> Command.from_dict(command.to_dict()) == command
            True
        """
        return {
            "trial_id": self.trial_id,
            "decision": str(self.decision),
            "config": self.config,
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Command:
        """The command that :meth:`to_dict` gave ``data`` of."""
        return cls(
            data["trial_id"],
            Decision(data["decision"]),
            config=data.get("config"),
            source=data.get("source"),
        )


@dataclass(frozen=True)
class TrialPlan:
    """Where a new trial stands: its bracket and the resources at which it will be judged.

    Attributes:
        bracket: the Hyperband bracket (``s`` in Li et al. 2017); 0 for single-bracket stoppers.
        rungs: the steps at which the stopper ranks the trial, in increasing order.
        max_resource: the most steps the trial will run.
    """

    bracket: int
    rungs: tuple[float, ...]
    max_resource: int


class Stopper(ABC):
    """Base of the built-in stoppers: direction, resources and the default (no-op) hooks.

    Args:
        direction: whether reported values are minimized or maximized.
        min_resource: the fewest steps before any trial may be stopped (grace period).
        max_resource: the most steps a trial runs; the stopper stops it there.
    """

    def __init__(
        self,
        *,
        direction: Direction | str = Direction.MINIMIZE,
        min_resource: int = 1,
        max_resource: int,
    ) -> None:
        if min_resource < 1:
            raise ValueError(f"min_resource is {min_resource}; it must be at least 1")
        if max_resource < min_resource:
            raise ValueError(
                f"max_resource is {max_resource}; it must be at least min_resource "
                f"({min_resource}): raise max_resource or lower min_resource"
            )
        self.direction = Direction(direction)
        self.min_resource = min_resource
        self.max_resource = max_resource

    def on_trial_start(self, trial_id: TrialId) -> TrialPlan:
        """Register a new trial; returns its plan."""
        return TrialPlan(bracket=0, rungs=(), max_resource=self.max_resource)

    def on_trial_config(self, trial_id: TrialId, config: dict[str, Any]) -> None:
        """The configuration a new trial starts with (after :meth:`on_trial_start`); only a
        stopper that changes configurations (PBT) keeps it."""

    @abstractmethod
    def on_report(self, trial_id: TrialId, step: int, value: float) -> Decision:
        """Judge one report of a running trial."""

    def on_late_report(self, trial_id: TrialId, step: int, value: float) -> None:
        """A report after the trial's ``STOP`` or ``SUSPEND``: it really reached ``step``, and
        its checkpoint holds it. Record it (a curve, an epoch's time); decide nothing. By
        default it is ignored."""

    def on_trial_complete(self, trial_id: TrialId) -> None:
        """The trial ended (finished, failed or stopped); forget or keep what it reported."""

    def poll(self, *, free_slots: int, can_start_new: bool = True) -> list[Command]:
        """Commands for suspended trials: at most ``free_slots`` resumes, any number of stops."""
        return []

    def set_slots(self, slots: int) -> None:
        """The job's parallelism changed (``ultron scale``): ``slots`` trials may run at once
        from now on. Only a stopper that sizes its decisions by the workers (POP) uses it."""

    def lineage(self, trial_id: TrialId) -> list[dict[str, Any]]:
        """The exploit steps of a trial, oldest first (PBT; none for other stoppers): each
        ``step``, ``from`` (the trial it copied), ``value``, ``from_value``,
        ``config_before`` and ``config_after``."""
        return []

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly, as JSON-compatible data."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    def loss(self, value: float) -> float:
        """The value as a loss (lower is better); a failed report (nan) is the worst loss."""
        if math.isnan(value):
            return math.inf
        return -value if self.direction is Direction.MAXIMIZE else value


def encode_loss(loss: float) -> float | None:
    """A loss for JSON: the worst loss (infinity, from a failure) becomes ``None``."""
    return None if math.isinf(loss) else loss


def decode_loss(data: float | None) -> float:
    """The inverse of :func:`encode_loss`."""
    return math.inf if data is None else float(data)
