"""Incremental checkpoints of the strategy's state: a snapshot now and then, a log in between.

A strategy's ``state_dict()`` is everything it needs to continue exactly, and for some (Optuna's
TPE holds every trial) it grows with the trials: taken at every commit, it made each commit
cost more than the last. The master now takes it only every so often, and in between appends
the calls it made to the strategy (``["sample", n]``, ``["update", candidates, scores]``) to the
job's strategy log. Strategies are deterministic given their state (their seed is in it), so
loading the snapshot and making the logged calls again gives the very state the master had at
its last commit: a restart resumes exactly, as it did with a snapshot per commit.

A snapshot is taken once the log holds :data:`SNAPSHOT_MIN` calls and as many as an eighth of
the trials: its cost (which grows with the trials) is spread over more commits as the job
grows, so a commit costs the same at trial 10,000 as at trial 1,000, and a restart replays at
most an eighth of the strategy's calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ultron.algorithms.base import HPOAlgorithm
from ultron.algorithms.space import Config

__all__ = ["SNAPSHOT_MIN", "StrategyLog"]

SNAPSHOT_MIN = 64
_SNAPSHOT_SHARE = 8  # a snapshot at least every trials / 8 logged calls


class StrategyLog:
    """Calls the strategy for the master and records them for its checkpoints.

    Args:
        strategy: the job's strategy. One without ``state_dict`` is not checkpointed (a
            restart starts it afresh, as before): nothing is recorded for it.
        log: the calls logged since the stored snapshot (``JobState.strategy_log``); it is
            extended in place.
    """

    def __init__(self, strategy: HPOAlgorithm, log: list[list[Any]]) -> None:
        self.strategy = strategy
        self.log = log
        self.recording = hasattr(strategy, "state_dict")
        self._unsaved: list[list[Any]] = []

    def replay(self) -> None:
        """Make the logged calls again: after ``load_state_dict`` of the stored snapshot, the
        strategy is where it was at the last commit."""
        for call in self.log:
            if call[0] == "sample":
                self.strategy.sample_hyperparameter_candidates(int(call[1]))
            else:
                self.strategy.update_state(call[1], call[2])

    def sample(self, n: int) -> list[Config]:
        """At most ``n`` new candidates from the strategy."""
        if self.recording:
            self._unsaved.append(["sample", n])
        return list(self.strategy.sample_hyperparameter_candidates(n))[:n]

    def update(self, candidates: Sequence[Config], scores: Sequence[Any]) -> None:
        """Tell the strategy the scores of ``candidates``."""
        if self.recording:
            self._unsaved.append(["update", [dict(c) for c in candidates], list(scores)])
        self.strategy.update_state(candidates, scores)

    def checkpoint(
        self, trials: int, *, final: bool = False
    ) -> tuple[dict[str, Any] | None, list[list[Any]] | None]:
        """What to store now: ``(snapshot, None)`` to replace the snapshot and empty the log, or
        ``(None, calls)`` to append ``calls`` to the log.

        Args:
            trials: the rows in the trial table: the snapshot's interval grows with them.
            final: the search is over: a snapshot, so the stored state needs no replay.
        """
        calls, self._unsaved = self._unsaved, []
        if not self.recording:
            return None, None
        self.log.extend(calls)
        if not final and len(self.log) < max(SNAPSHOT_MIN, trials // _SNAPSHOT_SHARE):
            return None, calls
        self.log.clear()
        snapshot: dict[str, Any] = self.strategy.state_dict()  # type: ignore[attr-defined]
        return snapshot, None
