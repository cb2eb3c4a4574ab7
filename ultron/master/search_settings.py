"""The settings of a job spec that the master's loops read (:class:`SearchSettings`), apart
from the spec itself: a simulated job builds them without one (:mod:`ultron.simulation`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SearchSettings"]


@dataclass(frozen=True)
class SearchSettings:
    """The settings of a job spec that the master's loops read.

    Attributes:
        num_iterations: the budget: how many trials the job scores.
        parallelism: at most this many trials run at once.
        max_failed_share: the job fails once more than this share of the budget failed.
        tell_stopped: whether the strategy hears the last score of an early-stopped trial
            (otherwise NaN).
        metrics: with several objectives or constraints, the metrics the strategy is told for
            each trial (a dict of them instead of the score); empty: the score.
        queue_ahead: whether the async loop may queue a trial behind each busy worker of the
            job's own (:func:`ultron.master.async_loop.queued_ahead`).
    """

    num_iterations: int
    parallelism: int
    max_failed_share: float = 0.5
    tell_stopped: bool = True
    metrics: tuple[str, ...] = ()
    queue_ahead: bool = False
