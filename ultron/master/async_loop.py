"""The async loop: a new candidate for each worker that frees, the strategy told each result.

A slow trial never leaves workers idle. When a trial returns, the strategy hears its score in
memory, the next candidate is sampled and submitted, and only then are the row, the strategy's
calls, the running record and the score cache's entry written
(:meth:`~ultron.master.core.MasterCore._write_back`): the freed worker waits on the master's
decision and one score cache lookup, not on its bookkeeping. Where trials are short and the
workers are the job's own, a trial waits queued behind each busy worker (:func:`queued_ahead`):
a freed worker starts it at once, and the master's decision overlaps the next trial. With early
stopping, suspended trials resume or stop as the stopper says (:func:`_run_commands`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from ultron.algorithms.space import Config
from ultron.algorithms.stoppers.base import Decision
from ultron.master.core import MasterCore
from ultron.trial_records import TrialResult, TrialStatus

__all__ = ["QUEUE_AHEAD_BELOW_S", "keep_running", "queue_slots", "queued_ahead"]

QUEUE_AHEAD_BELOW_S = 2.0
"""Trials queue behind busy workers while the job's recent trials took less than this many seconds
(their median). The way from a trial's end through the master to the next trial's start costs
about 10 ms on 2 cores (``benchmarks/dispatch_path.py --loop async``) and about 30 ms a trial at
parallelism 16 on 16 cores (``benchmarks/overhead.py``, 640 one-second trials: 3.1% without
queuing): 1.5% of a trial of this length. What queuing costs grows with the trials' length: a
queued trial is proposed before the results of the trials ahead of it are in, and a smaller
parallelism (``ultron scale``) applies once the trials queued then have run, one more trial per
worker. Longer trials keep both at their least."""


def queued_ahead(master: MasterCore) -> int:
    """How many trials the async loop keeps submitted beyond ``parallelism``: one behind each
    worker slot (``2 x slots - parallelism``: a local cluster capped below ``parallelism``
    workers queues that many already), where

    - the settings allow it (no stopper: it resumes suspended trials as slots free);
    - the workers are the job's own and no more than ``parallelism`` trials' worth
      (:meth:`~ultron.master.dispatcher.TrialDispatcher.worker_slots`), so that a queued trial
      never runs beside them: not on a cluster of other workers, nor while a smaller
      parallelism retires workers;
    - the median of the last ``parallelism`` trials' durations is under
      :data:`QUEUE_AHEAD_BELOW_S` (none before the first trials return).

    A goal reached or a cancellation while a trial waits: it returns ``stopped`` without
    running (``ultron.worker.runner``).
    """
    slots = queue_slots(master)
    return 0 if slots is None else max(0, 2 * slots - master.settings.parallelism)


def queue_slots(
    master: MasterCore, returned: Iterable[TrialResult] = (), *, untimed: bool = False
) -> int | None:
    """The job's worker slots where a trial may wait behind a busy one (the conditions of
    :func:`queued_ahead`), else None. The batch loop's slots (``reserve``) ask the same, with
    the trials of its round ``returned`` so far (not in the table until the round's commit);
    ``untimed``: the slots too where no trial has a duration yet."""
    parallelism = master.settings.parallelism
    if not master.settings.queue_ahead:
        return None
    slots = master.dispatcher.worker_slots()
    if slots is None or slots > parallelism:
        return None
    recent = [
        t.duration
        for t in [*master.state.trials, *returned][-parallelism:]
        if t.status is not TrialStatus.CACHED and t.duration > 0
    ]
    if not recent:
        return slots if untimed else None
    return None if statistics.median(recent) >= QUEUE_AHEAD_BELOW_S else slots


def keep_running(master: MasterCore) -> bool:
    """Keep trials running until the budget is spent or a goal reached; whether the
    strategy ran dry."""
    run = _AsyncRun(master, launched=len(master.state.trials))
    run.relaunch_interrupted()
    while True:
        master.check()
        ending = master.watch.check_time()
        if ending:
            run.drop_unstarted()
        master._scale()
        busy = master.dispatcher.in_flight + len(master._to_start)
        can_start_new = not ending and not run.exhausted and run.room()
        for stopped in _run_commands(master, master.settings.parallelism - busy, can_start_new):
            master._commit([run.pending.pop(stopped.trial_id)], [stopped])
        run.fill()
        launching = bool(master._to_start)
        master._start_launched()
        if launching or master._unsaved or master._puts:
            # One write: the running record, the rows just told, and what a restart must not
            # propose again (the candidates just sampled).
            master._write_back()
        if not run.pending:
            return run.exhausted
        if master.dispatcher.in_flight:
            for result in master._finish():
                master._commit([run.pending.pop(result.trial_id)], [result])


@dataclass
class _AsyncRun:
    """The async loop's own state: the trials launched and not yet told to the strategy."""

    master: MasterCore
    launched: int
    exhausted: bool = False
    pending: dict[str, Config] = field(default_factory=dict)

    def room(self) -> bool:
        """Whether the budget allows another trial."""
        return self.launched < self.master.settings.num_iterations

    def relaunch_interrupted(self) -> None:
        """The trials running when the previous master died: the same trials, from their last
        checkpoints."""
        master = self.master
        done = {t.trial_id for t in master.state.trials}
        for trial_id, config in sorted(master.interrupted.items()):
            if trial_id in done or not self.room():
                continue
            self.launched += 1
            master.state.next_trial = max(master.state.next_trial, int(trial_id) + 1)
            self.pending[trial_id] = config
            attempt = master.interrupted_attempts.get(trial_id, 1)
            master._to_start.append(
                master.dispatcher.request(trial_id, config, attempt=attempt, resume=True)
            )
            if master.driver is not None:
                master.driver.start_trial(trial_id, config)

    def drop_unstarted(self) -> None:
        """The time budget ran out: trials of an earlier run not started again never will."""
        master = self.master
        for request in master._to_start:
            self.pending.pop(request.trial_id, None)
            if master.driver is not None:
                master.driver.complete(request.trial_id)
        master._to_start.clear()

    def fill(self) -> None:
        """Sample a candidate for each free slot; a cached one is answered at once."""
        master = self.master
        most = master.settings.parallelism + queued_ahead(master)
        while (
            master.watch.end is None
            and not self.exhausted
            and self.room()
            and master.dispatcher.in_flight + len(master._to_start) < most
        ):
            candidates = master.calls.sample(1)
            if not candidates:
                self.exhausted = True
                return
            config, trial_id = candidates[0], master._new_id()
            self.launched += 1
            answered = master._launch(trial_id, config, master._lookup([config], [trial_id])[0])
            if answered is not None:
                master._commit([config], [answered])
                master.watch.check_target([answered])
            else:
                self.pending[trial_id] = config
                if master.driver is not None:
                    master.driver.start_trial(trial_id, config)


def _run_commands(master: MasterCore, free: int, can_start_new: bool) -> list[TrialResult]:
    """Resume or stop suspended trials as the stopper says; returns the stopped ones.

    The stopper may decide for a trial it suspended from a report before that trial has
    returned (a population-based training round, once every member reported the boundary):
    such a command is held (:class:`~ultron.master.suspensions.Suspensions`) until the trial
    returns suspended, never dropped.
    """
    driver, paused = master.driver, master.suspensions
    if driver is None or not paused.trials:
        return []
    stopped = []
    # A command the stopper gave for a trial whose suspending report it judged while the trial
    # ran on (it hears the decision with its next report) waits for the trial's return.
    commands = [paused.held.pop(t) for t in list(paused.held) if t in paused.trials]
    commands += driver.poll(free_slots=free - len(commands), can_start_new=can_start_new)
    for command in commands if master.watch.end is None else ():  # a goal reached: none resumes
        last = paused.trials.pop(str(command.trial_id), None)
        if last is None:
            paused.held[str(command.trial_id)] = command
            continue
        if command.decision is Decision.RESUME:
            driver.resume_trial(last.trial_id)
            config = last.hyperparameters if command.config is None else command.config
            request = master.dispatcher.request(
                last.trial_id, config, attempt=last.attempts + 1, resume=True
            )
            if command.source is not None:  # PBT's exploit: from the source's checkpoint
                request = request.exploiting(str(command.source))
            master._to_start.append(request)
        else:
            driver.complete(last.trial_id)
            stopped.append(replace(last, status=TrialStatus.STOPPED))
    idle = not stopped and not master.dispatcher.in_flight and not master._to_start
    if (idle and not can_start_new) or master.watch.end is not None:  # none resumes: end them
        for trial_id in list(paused.trials):
            driver.complete(trial_id)
            stopped.append(replace(paused.trials.pop(trial_id), status=TrialStatus.STOPPED))
    return stopped
