"""What the master's two loops share (paper V-E): launch, judge, commit and checkpoint trials.

:class:`MasterCore` starts trials (or answers them from the score cache, or lets a repeat wait
for the trial in flight), applies early stopping to what returns (the trials it pauses are kept
in :mod:`ultron.master.suspensions`), tells the strategy, and writes the trial table and the
strategy's state to Redis after every update (the state as a snapshot now and then and the
strategy's calls in between: :mod:`ultron.master.strategy_log`). Too many failed trials fail
the job (:mod:`ultron.master.failure_budget`).
The loops that drive it are modules of their own (:mod:`ultron.master.batch_loop`,
:mod:`ultron.master.async_loop`); :class:`ultron.master.loops.Master` runs either.

Between a trial's result and the next submit it makes as few Redis round trips as it can: the
score cache's entries wait for the job's next write (:meth:`MasterCore._write_back`), and the
async loop hands the next trial to the freed worker before any write.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ultron.algorithms.base import HPOAlgorithm
from ultron.algorithms.space import Config, canonical
from ultron.errors import JobFailedError
from ultron.master.early_stopping import StopperDriver
from ultron.master.failure_budget import FailureBudget
from ultron.master.goals import EndKind, GoalWatch, JobEnd, JobGoals
from ultron.master.interfaces import Cache, Dispatcher, Elastic, OnResult, Store
from ultron.master.job_state import JobState
from ultron.master.search_settings import SearchSettings
from ultron.master.strategy_log import StrategyLog
from ultron.master.suspensions import Suspensions
from ultron.master.warm_start import WarmStartPrior
from ultron.trial_records import TrialRequest, TrialResult, TrialStatus

__all__ = ["MasterCore"]

logger = logging.getLogger(__name__)


def _cached(
    trial_id: str, config: Config, score: float | None, metrics: dict[str, Any]
) -> TrialResult:
    """A trial answered without training (from the cache or a twin in the same job)."""
    return TrialResult(
        trial_id, config, TrialStatus.CACHED, score=score, metrics=metrics, attempts=0
    )


def _score(result: TrialResult, metrics: tuple[str, ...] = ()) -> float | dict[str, Any]:
    """What the strategy is told: the score, or the asked ``metrics`` of several objectives and
    constraints; ``nan`` for a trial without a score."""
    if not result.status.ok or result.score is None:
        return math.nan
    if metrics:
        return {name: result.metrics.get(name) for name in metrics}
    return float(result.score)


@dataclass
class MasterCore:
    """One job's search with its strategy, cache, dispatcher and stored state: the parts its
    loops share (:class:`ultron.master.loops.Master` adds the loops)."""

    settings: SearchSettings
    strategy: HPOAlgorithm
    cache: Cache
    dispatcher: Dispatcher
    store: Store
    state: JobState
    on_result: OnResult = lambda state, running, last: None
    check: Callable[[], None] = lambda: None  # raises to abort the search (e.g. a lost lease)
    driver: StopperDriver | None = None
    # Changes the parallelism while the job runs (`ultron scale`, min_parallelism); None: fixed.
    scaler: Elastic | None = None
    # The job's time budget and target; ``clock`` is the dispatcher's (seconds), and a goal
    # reached gives the running trials ``grace_s`` seconds to stop.
    goals: JobGoals = field(default_factory=JobGoals)
    clock: Callable[[], float] = time.monotonic
    grace_s: float = 30.0
    # Trials that were running when a previous master died: they run again with resume=True
    # (batch samples them again; async relaunches them first).
    interrupted: dict[str, Config] = field(default_factory=dict)
    # The attempt each of them was at (1 where not given): a later attempt than the first
    # (a retry, a resume after suspension) must not get the first one's stored answer back.
    interrupted_attempts: dict[str, int] = field(default_factory=dict)
    # A warm start's earlier trials, told to the strategy before its first proposal.
    prior: WarmStartPrior | None = None
    _waiting: dict[str, list[tuple[str, Config]]] = field(default_factory=dict)
    _to_start: list[TrialRequest] = field(default_factory=list)
    # The trials that returned suspended, and the stopper's resumes of trials suspended by a
    # report that had not returned yet; a previous master's come with the stopper's state.
    suspensions: Suspensions = field(init=False)
    _calls: StrategyLog | None = None
    _failures: FailureBudget = field(default_factory=FailureBudget)
    _watch: GoalWatch | None = None
    # Told to the strategy, not yet written (see _write_back): rows, and the cache's entries.
    _unsaved: list[TrialResult] = field(default_factory=list)
    _puts: dict[str, tuple[Config, dict[str, Any]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A previous master's paused trials: interrupted trials with a held resume run again
        # from their checkpoints and get it when they return suspended.
        self.suspensions = Suspensions.from_saved(self.state.stopper)

    @property
    def calls(self) -> StrategyLog:
        """The strategy, through the log that checkpoints its state."""
        if self._calls is None:
            self._calls = StrategyLog(self.strategy, self.state.strategy_log)
        return self._calls

    def _resume_strategy(self) -> None:
        """Replay the calls logged since the stored snapshot (loaded into the strategy by the
        caller): the strategy is then as it was at the last commit. A warm start's prior is
        told now, once: it is in the checkpoint, with the note in the job's record."""
        self.calls.replay()
        if self.prior is not None and self.state.warm_start is None:
            if self.prior.configs:
                self.calls.update(self.prior.configs, self.prior.scores)
            self.state.warm_start = self.prior.note()
            self._checkpoint()

    @property
    def budget_left(self) -> int:
        return self.settings.num_iterations - len(self.state.trials)

    def _new_id(self) -> str:
        trial_id = f"{self.state.next_trial:04d}"
        self.state.next_trial += 1
        return trial_id

    def _launch(
        self, trial_id: str, config: Config, hit: dict[str, Any] | None
    ) -> TrialResult | None:
        """Start a trial, or answer it now (cache hit); a repeat of a running one waits.

        ``hit`` is the cache's answer for this trial: its ``score`` is the job's metric.
        """
        same_trial = hit is not None and (hit.get("job_id"), hit.get("trial_id")) == (
            self.state.job_id,
            trial_id,
        )
        if hit is not None and same_trial and "result" in hit:
            # This very trial finished before the master restarted: take its row as it was.
            recovered = TrialResult.from_dict(
                {**hit["result"], "trial_id": trial_id, "score": hit["score"]}
            )
            self.state.curves[trial_id] = hit.get("curve", [])
            self.on_result(self.state, self._running(), recovered)
            return recovered
        if hit is not None:
            cached = _cached(trial_id, config, hit["score"], hit.get("metrics", {}))
            self.on_result(self.state, self._running(), cached)
            return cached
        key = canonical(config)
        if key in self._waiting:
            self._waiting[key].append((trial_id, config))
        else:
            self._waiting[key] = []
            resume = trial_id in self.interrupted
            attempt = self.interrupted_attempts.get(trial_id, 1)
            self._to_start.append(
                self.dispatcher.request(trial_id, config, attempt=attempt, resume=resume)
            )
        return None

    def _running(self) -> int:
        """Trials running now, as the progress shows them: those submitted, less those queued
        behind a busy worker (no more than the job's own workers' slots, where it knows them)."""
        slots = self.dispatcher.worker_slots()
        running = min(self.dispatcher.in_flight, self.settings.parallelism)
        return running if slots is None else min(running, slots)

    def _start_launched(self) -> None:
        self.dispatcher.start(*self._to_start)
        self._to_start.clear()

    def _scale(self) -> None:
        """Take the parallelism the scaler allows now, from this dispatch on."""
        if self.scaler is None:
            return
        parallelism = self.scaler.poll(self.dispatcher.in_flight + len(self._to_start))
        if parallelism != self.settings.parallelism:
            logger.info("parallelism %d -> %d", self.settings.parallelism, parallelism)
            self.settings = replace(self.settings, parallelism=parallelism)
            if self.driver is not None:
                self.driver.set_slots(parallelism)

    def _finish(self) -> list[TrialResult]:
        """Wait for one trial; returns it and the repeats that waited for it (nothing when it
        was suspended, when the scaler woke the loop first or when the time budget ran out)."""
        watch = self.watch
        woke = False

        def wake() -> bool:
            nonlocal woke
            woke = self.scaler is not None and self.scaler.wake()
            return woke

        waited = self.dispatcher.wait_one(
            wake=wake if self.scaler is not None else None,
            timeout=None if watch.end else watch.time_left(),
        )
        if waited is None:
            if not woke:  # the time budget ran out while the trials ran
                watch.reach(JobEnd(EndKind.TIME))
            return []
        returned, curve = waited
        self.state.curves.setdefault(returned.trial_id, []).extend(curve)
        result = returned if self.driver is None else self.suspensions.judge(self.driver, returned)
        if result is None:
            return []
        if result.trial_id in watch.stopping and result.status is TrialStatus.COMPLETED:
            # Asked to stop: its score may be of a model cut short, so never a full score
            # (nor one for the cache).
            result = replace(result, status=TrialStatus.STOPPED)
        if result.status is TrialStatus.COMPLETED and not result.lineage:
            # An exploited trial's score is its schedule's, not its last configuration's.
            # Written with the job's next write (_write_back).
            self._puts[canonical(result.hyperparameters)] = (
                result.hyperparameters,
                {
                    "score": result.score,
                    "metrics": result.metrics,
                    "job_id": self.state.job_id,
                    "trial_id": result.trial_id,
                    "result": result.to_dict(),
                    "curve": self.state.curves.get(result.trial_id, []),
                },
            )
        if result.status is TrialStatus.FAILED:
            logger.warning("trial %s failed: %s", result.trial_id, result.error)
        done = [result]
        twins = [] if result.lineage else self._waiting.pop(canonical(result.hyperparameters), [])
        for trial_id, config in twins:
            done.append(
                _cached(trial_id, config, result.score, result.metrics)
                if result.status is TrialStatus.COMPLETED
                else TrialResult.from_dict({**result.to_dict(), "trial_id": trial_id})
            )
        for r in done:
            self.on_result(self.state, self._running(), r)
        watch.check_target(done)
        return done

    @property
    def watch(self) -> GoalWatch:
        """The search watched against the job's goals."""
        if self._watch is None:
            request_stop = self.dispatcher.request_stop
            self._watch = GoalWatch(self.goals, request_stop, self.clock, self.grace_s)
        return self._watch

    def _begin(self) -> None:
        """Start this run's clock (after the strategy's replay) on what earlier runs spent."""
        self.watch.begin(self.state.search_seconds)
        self.watch.check_target(self.state.trials)  # a resumed job whose table reached it ends

    def _ended(self, *, exhausted: bool) -> None:
        end = self.watch.finish(exhausted=exhausted, trials=self.settings.num_iterations)
        self.state.end_reason = str(end)

    def _lookup(self, candidates: list[Config], ids: list[str]) -> list[dict[str, Any] | None]:
        """The score cache's answers for trials about to be launched."""
        if any(canonical(c) in self._puts for c in candidates):
            self._write_puts()  # a repeat of a result not written yet: the cache must see it
        return self.cache.get_many(candidates, job_id=self.state.job_id, trial_ids=ids)

    def _commit(self, candidates: list[Config], results: list[TrialResult]) -> None:
        """Hand scores to the strategy; the rows are written by the next :meth:`_write_back`
        (at once when they fail the job)."""
        self.state.trials.extend(results)
        tell_stopped = self.settings.tell_stopped
        scores = [
            math.nan
            if r.status is TrialStatus.STOPPED and not tell_stopped
            else _score(r, self.settings.metrics)
            for r in results
        ]
        self.calls.update(candidates, scores)
        self._unsaved.extend(results)
        try:
            self._check_failures(results)
        except JobFailedError:
            self._write_back()
            raise

    def _write_puts(self, pipe: Any = None) -> None:
        """Write the score cache's entries of the trials completed since the last write, and
        forget them; with ``pipe`` (a pipeline of the cache's Redis) queue them in it, and the
        caller forgets them once the pipeline ran. A failed write leaves them for the next
        (writing one twice is harmless)."""
        for config, entry in self._puts.values():
            self.cache.put(config, entry, pipe=pipe)
        if pipe is None:
            self._puts.clear()

    def _write_back(self) -> None:
        """Write what the loop deferred: the score cache's new entries, then the new rows with
        the strategy's and the stopper's state and the running record, in one transaction
        where the cache lives in the job's Redis (one round trip a result, not two). What a
        failed write did not write stays for the next one."""
        # A simulation's in-memory store and cache have no Redis client.
        client = getattr(self.store, "client", None)
        if self._puts and (client is None or getattr(self.cache, "client", None) is not client):
            self._write_puts()
        self._checkpoint(self._unsaved, first=self._write_puts if self._puts else None)
        self._unsaved = []
        self._puts.clear()

    def _checkpoint(
        self,
        new: Sequence[TrialResult] = (),
        *,
        final: bool = False,
        first: Callable[[Any], None] | None = None,
    ) -> None:
        """Save the strategy's and the stopper's state (with the suspended trials and the resumes
        held for trials not yet returned), with the ``new`` rows of the table; ``first``: other
        writes for the same transaction (:meth:`JobStore.save`)."""
        snapshot, logged = self.calls.checkpoint(len(self.state.trials), final=final)
        self.state.search_seconds = round(self.watch.elapsed(), 3)
        if snapshot is not None:
            self.state.algorithm = snapshot
        if self.driver is not None:
            self.state.stopper = {**self.driver.state_dict(), **self.suspensions.state_dict()}
        self.store.save(self.state, new, logged=logged, first=first)

    def _check_failures(self, new: Sequence[TrialResult]) -> None:
        """Fail the job as soon as more than ``max_failed_share`` of its budget has failed."""
        settings = self.settings
        self._failures.check(
            self.state.trials,
            new,
            trials=settings.num_iterations,
            max_failed_share=settings.max_failed_share,
        )

    @contextlib.contextmanager
    def _flushed_at_end(self) -> Iterator[None]:
        """Write the deferred running record when the loop ends, however it ends.

        A failed write fails the job with its cause (the store keeps what it could not write).
        After the loop's own error it is logged, with its traceback, and added to that error as
        a note: the loop's error stays the job's cause.
        """
        try:
            yield
        except BaseException as error:
            try:
                if self._unsaved or self._puts:
                    self._write_back()
                self.store.flush()
            except Exception as flush_error:
                logger.error("writing the running record after %r failed too", error, exc_info=True)
                error.add_note(
                    f"Writing the job's running record afterwards failed too: {flush_error!r}"
                )
            raise
        if self._unsaved or self._puts:
            self._write_back()
        self.store.flush()

    def _run(self, loop: Callable[[MasterCore], bool]) -> None:
        """Run ``loop`` on this search: the strategy replayed first, the end written last."""
        self._resume_strategy()
        self._begin()
        with self._flushed_at_end():
            exhausted = loop(self)
        self.dispatcher.settle()
        self._ended(exhausted=exhausted)
        self._checkpoint(final=True)
        self._check_failures(())  # a rerun of a failed job has no round: its table decides
