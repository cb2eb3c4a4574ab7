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
from collections.abc import Iterable

from ultron.master.async_loop import queue_slots
from ultron.master.core import MasterCore
from ultron.trial_records import TrialResult

__all__ = ["run_rounds"]

logger = logging.getLogger(__name__)


def run_rounds(master: MasterCore) -> bool:
    """Rounds until the budget is spent or a goal reached; whether the strategy ran dry."""
    try:
        return _rounds(master)
    finally:
        master.dispatcher.reserve(0)  # the slots no round will use return


def _reserved(
    master: MasterCore, next_round: int, returned: Iterable[TrialResult] = (), *, untimed: bool
) -> int:
    """Slots for the next round's trials to wait in (``TrialDispatcher.reserve``): one per
    trial of it, where short trials could queue behind busy workers (:func:`queue_slots`;
    ``returned``: the trials of this round back so far; ``untimed``: also before any trial
    has a duration)."""
    slots = queue_slots(master, returned, untimed=untimed)
    return 0 if slots is None else max(0, min(slots, next_round))


def _rounds(master: MasterCore) -> bool:
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
        next_round = min(master.settings.parallelism, master.budget_left - len(candidates))
        # Before any trial has a duration (the job's first round) the slots are kept too: on
        # the workers as this round's trials end, they take the next round at once. The
        # round's first result says whether they stay (short trials) or leave unstarted.
        reserved = _reserved(master, next_round, untimed=True)
        untimed = reserved > _reserved(master, next_round, untimed=False)
        master.dispatcher.reserve(reserved)
        master.watch.check_target(list(results.values()))  # a cached answer may reach it
        master.store.flush()  # the round's running record
        while master.dispatcher.in_flight:
            results.update((r.trial_id, r) for r in master._finish())
            if untimed and any(r.duration > 0 for r in results.values()):
                untimed = False
                if _reserved(master, next_round, results.values(), untimed=False) < reserved:
                    master.dispatcher.reserve(0)
            # Written while the others run; the last one's, and those of trials that ended
            # together, with the commit.
            if master.dispatcher.in_flight and not master.dispatcher.has_ready():
                master._write_puts()
                master.store.flush()
            master._scale()  # units and workers of a smaller parallelism go back as trials end
        master._commit(candidates, [results[trial_id] for trial_id in ids])
        master._write_back()
    return False
