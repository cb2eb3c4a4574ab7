"""The batch loop (the paper's, the default): rounds of ``parallelism`` candidates.

Each round samples ``parallelism`` candidates, starts them, waits for all of them and tells
the strategy their scores at once: with a fixed seed the whole trial table is reproducible.

The round's commit (rows, the strategy's calls, the running record) is written before the next
round is sampled, as the resume needs: a restarted master samples the interrupted round again
from the strategy as it was at that commit, gets the same candidates and resumes their trials.
What can wait does: the score cache's entries are written with the commit, and the running
record of the round's last trial with it too, so the workers wait on two Redis round trips
between rounds (the commit, the cache lookup).
"""

from __future__ import annotations

import logging

from ultron.master.core import MasterCore
from ultron.trial_records import TrialResult

__all__ = ["run_rounds"]

logger = logging.getLogger(__name__)


def run_rounds(master: MasterCore) -> bool:
    """Rounds until the budget is spent or a goal reached; whether the strategy ran dry."""
    while master.budget_left > 0:
        master.check()
        if master.watch.check_time():
            return False
        master._scale()
        wanted = min(master.settings.parallelism, master.budget_left)
        candidates = master.calls.sample(wanted)
        if not candidates:
            logger.info("the strategy has no more candidates")
            return True
        ids = [master._new_id() for _ in candidates]
        results: dict[str, TrialResult] = {}
        for trial_id, config, hit in zip(
            ids, candidates, master._lookup(candidates, ids), strict=True
        ):
            answered = master._launch(trial_id, config, hit)
            if answered is not None:
                results[trial_id] = answered
        master._start_launched()
        master.watch.check_target(list(results.values()))  # a cached answer may reach it
        master.store.flush()  # the round's running record
        while master.dispatcher.in_flight:
            results.update((r.trial_id, r) for r in master._finish())
            if master.dispatcher.in_flight:  # the last one's are written with the commit
                master._write_puts()
                master.store.flush()
            master._scale()  # units and workers of a smaller parallelism go back as trials end
        master._commit(candidates, [results[trial_id] for trial_id in ids])
        master._write_back()
    return False
