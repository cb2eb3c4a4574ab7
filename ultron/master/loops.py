"""The master (paper V-E): sample, score, update, checkpoint, until the budget is spent.

:class:`Master` runs one of two loops over the same parts (:mod:`ultron.master.core`):

- **batch** (:mod:`ultron.master.batch_loop`, the paper's, the default): sample
  ``parallelism`` candidates, wait for all of them, update the strategy once. With a fixed
  seed the whole trial table is reproducible.
- **async** (:mod:`ultron.master.async_loop`): hand a new candidate to a worker as soon as one
  is free and update the strategy with each result, so a slow trial never leaves workers idle.

Either way a configuration already scored by the same computation (code base, data, model
class, job seed; :mod:`ultron.master.score_cache`) is answered by the score cache unless the
spec says ``cache: false``, a configuration already in flight waits for that trial instead of
training again, and the trial table and the strategy's state are written to Redis after every
update.
"""

from __future__ import annotations

from ultron.master.async_loop import keep_running
from ultron.master.batch_loop import run_rounds
from ultron.master.core import MasterCore
from ultron.master.search_settings import SearchSettings

__all__ = ["Master", "SearchSettings"]


class Master(MasterCore):
    """Runs one job's search with its strategy, cache, dispatcher and stored state."""

    def run_batch(self) -> None:
        """The paper's loop: rounds of ``parallelism`` candidates (:func:`run_rounds`)."""
        self._run(run_rounds)

    def run_async(self) -> None:
        """Keep ``parallelism`` trials running; update the strategy with each result
        (:func:`keep_running`)."""
        self._run(keep_running)
