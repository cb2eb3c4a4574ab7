"""The model interface a user implements (paper Fig. 4) and ``ultron.report``.

A user's model is a class with one method::

    class Model:
        def score(self, hyperparameters, checkpoint_path, resume):
            ...train, saving checkpoints under checkpoint_path...
            ultron.report(epoch, accuracy=acc)      # optional, any number of times
            return {"accuracy": acc}                # or a float: the objective metric

``score`` runs in a trial process on a worker. ``resume`` is true when the trial is run again
(after an infrastructure failure or a suspension) and a checkpoint may be waiting in
``checkpoint_path``.

A trial process holds no Redis credentials: ``report`` hands each entry to the trial's Dask
worker over the socket the worker owns (:mod:`ultron.worker.process`), and the worker writes it
under the job's keys and answers whether early stopping asked the trial to stop
(:mod:`ultron.worker.runner`).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["ModelInterface", "ReportDecision", "TrialContext", "current_trial", "report"]

logger = logging.getLogger(__name__)


class ModelInterface(ABC):
    """The paper's ``ModelInterface``; subclassing it is optional, having ``score`` is not."""

    @abstractmethod
    def score(
        self, hyperparameters: dict[str, Any], checkpoint_path: str, resume: bool
    ) -> float | dict[str, float]:
        """Train with ``hyperparameters`` and return the objective (or a dict holding it)."""


class ReportDecision(StrEnum):
    """What ``report`` tells the model: go on, or stop now (and return the best so far)."""

    CONTINUE = "continue"
    STOP = "stop"

    def __bool__(self) -> bool:
        return self is ReportDecision.CONTINUE


@dataclass
class TrialContext:
    """The trial a process is running now; set by the trial process around ``score``.

    ``send`` hands one report to the worker and returns whether the trial should stop; the
    trial process provides it (the socket to its worker), so no Redis client lives here.
    """

    job_id: str
    trial_id: str
    send: Callable[[dict[str, Any]], bool]
    reports: list[dict[str, Any]] = field(default_factory=list)


_current: TrialContext | None = None


def current_trial() -> TrialContext | None:
    """The trial this process runs, or ``None`` outside a trial."""
    return _current


def set_current_trial(context: TrialContext | None) -> None:
    """Called by the trial process only."""
    global _current
    _current = context


def report(step: int, **metrics: float) -> ReportDecision:
    """Report intermediate metrics from inside ``score``, e.g. once per epoch.

    The reports feed early stopping and the learning curves. When the answer is
    ``ReportDecision.STOP`` the model should return promptly (it is falsy, so
    ``if not ultron.report(...): break`` works); a model that does not listen is stopped.

    Args:
        step: the training step or epoch, increasing.
        **metrics: metric name -> value.
    """
    context = _current
    if context is None:
        logger.debug("ultron.report called outside a trial; ignored")
        return ReportDecision.CONTINUE
    entry = {"step": int(step), "time": time.time(), **{k: float(v) for k, v in metrics.items()}}
    context.reports.append(entry)
    return ReportDecision.STOP if context.send(entry) else ReportDecision.CONTINUE
