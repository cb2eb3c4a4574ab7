"""Hands trial attempts to Dask and gives back each trial's final result.

A crashed attempt (the trial process or its worker died) is resubmitted with ``resume=True``
up to the spec's ``retries``; the caller only sees the final outcome. Running trials are
recorded in Redis while they run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

from ultron.cluster.lazy import LazyCluster
from ultron.containerize.environment import TrialEnvironment
from ultron.master.cancel import CANCEL
from ultron.master.job_state import JobStore
from ultron.master.notices import Notices
from ultron.master.requests import TrialRequests
from ultron.master.slots import Slots
from ultron.redis import keys
from ultron.secrets import redact
from ultron.spec.job import JobSpec
from ultron.trial_records import TrialRequest, TrialResult, TrialStatus, stored_answer
from ultron.worker.runner import run_trial

__all__ = ["TrialDispatcher"]


def _of(answer: Any, request: TrialRequest) -> bool:
    """Whether ``answer`` (what a task returned) is the answer of ``request``'s attempt."""
    return (
        isinstance(answer, dict)
        and answer.get("trial_id") == request.trial_id
        and answer.get("attempts") == request.attempt
    )


_IDLE_S = 0.02
"""How long the dispatcher asks to wait for a trial before it submits the slots asked for
(reserve). Redis ends a blocking pop's timeout at its next clock tick (``hz``, 10 a second by
default, the embedded server's too), so the wait is up to about 100 ms: the slots come while
the round's trials run, which is all they need."""


class TrialDispatcher:
    """Submits trials to a Dask client and waits for them one at a time.

    Args:
        client: a ``distributed.Client``, or the job's
            :class:`~ultron.cluster.lazy.LazyCluster`, started at the first submit.
        store: the job's store, for the running-trials record.
        spec: the job spec.
        env: the trial environment from ``containerize``.
        redis_url: the Redis every trial process reports to.
        scratch: local folder for checkpoints and logs.
        resources: Dask resources each trial asks for (e.g. ``{"GPU": 1}``).
        data: how trials reach the job's data service (``DataServiceHandle.trial_config()``).
    """

    def __init__(
        self,
        client: Any,
        store: JobStore,
        *,
        spec: JobSpec,
        env: TrialEnvironment,
        redis_url: str,
        scratch: str,
        resources: dict[str, float] | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        self._cluster = client
        self.store = store
        self.spec = spec
        self.resources = resources or None
        self._requests = TrialRequests(
            spec,
            env,
            job_id=store.job_id,
            namespace=store.namespace,
            redis_url=redis_url,
            scratch=scratch,
            data=data,
        )
        # Finished futures only: a trial's answer is read from Redis, where run_trial wrote it
        # before returning (one Redis round trip instead of Dask's gather, ~4 ms, through the
        # scheduler to the worker). See _outcome. Made at the first submit, with the client.
        self._done: Any = None
        self._pending: dict[str, TrialRequest] = {}
        # Answers and slots' starts, read from Redis before Dask reports them.
        self._notices = Notices(store)
        self._slots = Slots(store, redis_url)
        self._slots_wanted = 0
        self._slots_tried = False  # slots were added since the last reserve (or none could be)
        self._checked_at = time.monotonic()  # the slots' last check (_check_slots)
        self._futures: dict[str, Any] = {}
        # Finished futures, released after the next submit (see _release_spent).
        self._spent: list[Any] = []
        self._stopping = False  # the job asked its trials to stop: none is retried
        self._finishing: list[Any] = []  # tasks of attempts told by their notice, still ending
        # Per trial, its attempts lost with their worker before they started (queued behind
        # another trial there): submitted again without counting against ``retries``.
        self._unstarted: dict[str, int] = {}

    @property
    def client(self) -> Any:
        """The Dask client; the first use of a lazy cluster starts it."""
        if isinstance(self._cluster, LazyCluster):
            return self._cluster.client
        return self._cluster

    @property
    def in_flight(self) -> int:
        """Trials submitted and not yet finally done (those waiting for a slot included)."""
        return len(self._pending) + len(self._slots.backlog)

    def worker_slots(self) -> int | None:
        """Trials the workers run at once where this job started every one of them (a local
        cluster of its own, trials asking for no Dask resources): a trial submitted beyond
        them waits for one of this job's slots, never runs beside them. None elsewhere (an
        ``address`` cluster, ``ULTRON_DASK_ADDRESS``, GPU trials) or before the start."""
        running = self._cluster.running if isinstance(self._cluster, LazyCluster) else None
        cluster = None if running is None or self.resources else running.cluster
        if cluster is None:
            return None
        from distributed import LocalCluster  # imported already: the cluster runs

        if not isinstance(cluster, LocalCluster):
            return None
        return sum(int(w["options"].get("nthreads", 1)) for w in cluster.worker_spec.values())

    def request(
        self, trial_id: str, config: dict[str, Any], *, attempt: int = 1, resume: bool = False
    ) -> TrialRequest:
        """The request for one attempt of a trial (:class:`TrialRequests`)."""
        return self._requests.make(trial_id, config, attempt=attempt, resume=resume)

    def start(self, *requests: TrialRequest) -> None:
        """Submit attempts back to back, then record them as running.

        The record is written with the master's next write to the store (``JobStore.flush``
        or ``save``), which follows at once: one round trip for the launch and the checkpoint.
        """
        if not requests:
            return
        self._dispatch(list(requests))
        if len(self._spent) >= self.spec.parallelism:
            self._release_spent()
        self.store.mark_running(
            {
                r.trial_id: {"hyperparameters": r.hyperparameters, "attempt": r.attempt}
                for r in requests
            },
            defer=True,
        )

    def _dispatch(self, requests: list[TrialRequest]) -> None:
        """Give the requests (and those waiting for a slot) to free slots; submit the rest as
        tasks where no slot lives (:meth:`Slots.take`)."""
        pairs, rest = self._slots.take(requests)
        if rest:
            # One call, one message to the scheduler: the client sends at most one per 10 ms,
            # so a round submitted trial by trial started all but its first 10 ms late.
            futures = self._watch().map(
                run_trial,
                [request.to_dict() for request in rest],
                key=[f"trial-{r.job_id}-{r.trial_id}-{r.attempt}" for r in rest],
                pure=False,
                resources=self.resources,
            )
            pairs += zip(rest, futures, strict=True)
            for future in futures:
                self._done.add(future)
        for request, future in pairs:
            self._pending[future.key] = request
            self._futures[future.key] = future
            self._notices.expect(request, future.key)

    def _watch(self) -> Any:
        """The Dask client, with the watch over finished futures made at the first use (and the
        notices of an earlier master's attempts dropped: a rerun of one finds its answer)."""
        client = self.client
        if self._done is None:
            from distributed import as_completed

            self._done = as_completed([], loop=client.loop, with_results=False)
            self._notices.clear()
        return client

    def reserve(self, count: int) -> None:
        """Keep ``count`` slots on the workers, which run the requests :meth:`start` gives
        them (:class:`~ultron.master.slots.Slots`); 0 sends them all away. Only where
        :meth:`worker_slots` knows the workers (the caller checks).

        Those missing are submitted once the dispatcher waits with nothing come back for
        ``_IDLE_S`` (:meth:`_next_done`): submitted at once, their 1.5-4 ms of the master's
        time on 2 cores went to the cores the round's trials were starting on."""
        self._slots_wanted, self._slots_tried = count, False
        if count < len(self._slots):
            self._slots.leave(self.client, len(self._slots) - count)

    def has_ready(self) -> bool:
        """Whether :meth:`wait_one` would return at once (an answer read, a task ended)."""
        return bool(self._notices.told) or (self._done is not None and self._done.has_ready())

    def _add_slots(self) -> None:
        self._slots_tried = True
        missing = self._slots_wanted - len(self._slots)
        if missing > 0:
            for future in self._slots.add(self._watch(), missing):
                self._done.add(future)

    def _lost_slots(self) -> None:
        """A worker lost: slots pinned to it may never start. All leave; new ones come, on
        the workers there are, once the master next waits."""
        self._slots.leave(self.client)
        self._slots_tried = False

    def settle(self, timeout: float = 10.0) -> None:
        """The search is over: send the waiting slots away and let the tasks whose answers
        came by notice end (up to ``timeout`` seconds), so that the cluster closes on idle
        workers."""
        self.reserve(0)
        finishing = [f for f in [*self._finishing, *self._slots.gone] if not f.done()]
        if finishing:
            from distributed import wait

            # Past it, the cluster's closing ends them as it would a running trial.
            with contextlib.suppress(TimeoutError):
                wait(finishing, timeout=timeout)

    def _release_spent(self) -> None:
        """Tell Dask it may forget the finished trials' results (small dicts; the master
        reads them from Redis).

        Done after a submit, ``parallelism`` at a time, not as each trial finishes: the client
        sends the scheduler at most one message per 10 ms, so a release sent just before a
        submit held the next trial back by up to 10 ms, and every release sent keeps the
        next 10 ms' submits waiting.
        """
        for future in self._spent:
            future.release()
        self._spent.clear()

    def _next_done(
        self, wake: Callable[[], bool] | None = None, timeout: float | None = None
    ) -> tuple[Any, Any] | None:
        """The next finished attempt's future and its outcome (its answer, or the error as a
        value); None as soon as ``wake()`` is True or ``timeout`` seconds have passed; raises
        JobCancelledError as soon as the job is cancelled."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._slots.backlog:  # a slot may have freed, or none may live any more
                self._dispatch([])
            while self._notices.told:
                key, answer = self._notices.told.popleft()
                if key in self._pending and _of(answer, self._pending[key]):  # a slot's key
                    return self._futures[key], answer  # serves attempt after attempt
            while self._done is not None and self._done.has_ready():
                future = next(self._done)
                if future.key in self._pending:
                    return future, self._outcome(future, self._pending[future.key])
                self._spent.append(future)  # told by its notice already, or a slot sent away
                self._slots.drop(future)
                if future.status == "error" and len(self._slots):  # a lost worker's slot
                    self._lost_slots()
            CANCEL.raise_if_requested(self.store.job_id)
            if wake is not None and wake():
                return None
            if deadline is not None and time.monotonic() >= deadline:
                return None
            idle = self._slots_wanted > len(self._slots) and not self._slots_tried
            wait_s = _IDLE_S if idle else 0.1
            self._notices.read(wait_s, self._pending, started=self._slots.started)
            if idle and not self._notices.told:
                self._add_slots()
            if not self._notices.told and time.monotonic() - self._checked_at >= 1.0:
                self._check_slots()

    def _check_slots(self) -> None:
        """About once a second of waiting: the answers of trials in slots whose notice was lost
        (:meth:`Notices.recover`), and slots that may never start (pinned to a worker lost
        before they started) sent away, so the requests waiting for them go as tasks."""
        self._checked_at = time.monotonic()
        if not len(self._slots):
            return
        self._notices.recover(self._pending)
        if self._slots.stuck(running=bool(self._pending)):
            self._lost_slots()

    def _outcome(self, future: Any, request: TrialRequest) -> Any:
        """What the attempt returned, or the error that ended it, as a value."""
        # Whatever the task's end: an attempt that answered before its worker was lost (its
        # notice not read yet) has its answer.
        key = keys.trial_result(
            request.job_id, request.trial_id, request.attempt, namespace=request.namespace
        )
        answer = stored_answer(self.store.client.get(key), request.hyperparameters)
        if answer is not None:
            return answer
        try:  # not in Redis (or not this configuration's), or the task failed
            returned = future.result()
        except (Exception, asyncio.CancelledError) as exc:  # KilledWorker, a cancellation
            return exc
        if self._slots.holds(future) and not _of(returned, request):
            # A slot returns its last attempt's answer: never another attempt's for this one.
            return RuntimeError("its slot ended before it ran the attempt")
        return returned

    def _started(self, request: TrialRequest) -> bool:
        """Whether a worker started the attempt (``run_trial`` marks it as it begins)."""
        key = keys.trial_started(
            request.job_id, request.trial_id, request.attempt, namespace=request.namespace
        )
        return bool(self.store.client.exists(key))

    def request_stop(self, reason: str, grace_s: float) -> list[str]:
        """Ask every running trial to stop, for ``reason``; no trial is retried from now on.

        A model that calls ``ultron.report`` hears ``STOP`` and may save a checkpoint and
        return; the worker stops one that has not returned ``grace_s`` seconds later (its
        result: ``stopped``). Returns the ids of the trials that were running.
        """
        self._stopping = True
        self.reserve(0)
        running = sorted({r.trial_id for r in [*self._pending.values(), *self._slots.backlog]})
        if not running:
            return []
        # "job": every trial is asked, so one still waiting for its worker never starts.
        stop = json.dumps({"decision": reason, "at": time.time(), "grace": grace_s, "job": True})
        pipe = self.store.client.pipeline()
        for trial_id in running:
            pipe.set(
                keys.trial_stop(self.store.job_id, trial_id, namespace=self.store.namespace),
                stop,
            )
        pipe.execute()
        return running

    def stop_running(self, grace_s: float) -> list[str]:
        """Ask every running trial to stop and wait up to ``grace_s`` seconds for them.

        What a trial returns then is not recorded (the trial was cut short by a cancellation):
        the trial stays in the running record and resumes from its checkpoint when the job
        does. Returns the ids of the trials that were running.
        """
        running = self.request_stop("cancel", grace_s)
        deadline = time.monotonic() + grace_s
        futures = list(self._futures.values())
        while time.monotonic() < deadline and not all(f.done() for f in futures):
            time.sleep(0.05)
        return running

    def _returned(self, future: Any, outcome: Any, request: TrialRequest) -> Any:
        """The attempt's dict, as ``run_trial`` returned it or, for an error, a crash (an
        infrastructure fault: a lost worker, KilledWorker); its task kept or spent."""
        if isinstance(outcome, dict):
            data = outcome
        else:
            if not self._started(request):
                self._unstarted[request.trial_id] = self._unstarted.get(request.trial_id, 0) + 1
            data = {
                "trial_id": request.trial_id,
                "hyperparameters": request.hyperparameters,
                "status": TrialStatus.CRASHED,
                "error": f"{type(outcome).__name__}: {outcome}",
                "attempts": request.attempt,
            }
        if self._slots.holds(future):
            self._slots.answered(future)  # it takes the next request
        if future.done():
            self._spent.append(future)
            self._slots.drop(future)
            if not isinstance(outcome, dict) and len(self._slots):
                self._lost_slots()
        elif not self._slots.holds(future):
            # Told by its notice: as_completed gives it again once done (_next_done).
            self._finishing = [f for f in self._finishing if not f.done()] + [future]
        return data

    def wait_one(
        self, wake: Callable[[], bool] | None = None, timeout: float | None = None
    ) -> tuple[TrialResult, list[dict[str, Any]]] | None:
        """Block until some trial is finally done; returns its result and learning curve, or
        None as soon as ``wake()`` (asked every 0.1 s) is True or when none was done within
        ``timeout`` seconds.

        Raises:
            JobCancelledError: the job was asked to stop (checked every 0.1 s).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:  # a retried trial waits again, within the same ``timeout``
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            done = self._next_done(wake, left)
            if done is None:
                return None
            future, outcome = done
            request = self._pending.pop(future.key)
            self._futures.pop(future.key, None)
            self._notices.forget(request)
            data = self._returned(future, outcome, request)
            curve = data.pop("curve", [])
            # Masked here, where the result enters the master: the trial table in Redis, the
            # result files and the artifacts all show only this text.
            data.update({n: redact(data.get(n)) for n in ("error", "traceback", "log_path")})
            if data.get("log_tail"):
                data["log_tail"] = [redact(line) for line in data["log_tail"]]
            result = TrialResult.from_dict(data)
            # Only the infrastructure's faults are retried: OUT_OF_MEMORY would fail again
            # under the same resources.memory.
            tries = request.attempt - self._unstarted.get(request.trial_id, 0)
            retry = result.status is TrialStatus.CRASHED and tries <= self.spec.retries
            if retry and not self._stopping:
                self.start(
                    self.request(
                        request.trial_id,
                        request.hyperparameters,
                        attempt=request.attempt + 1,
                        resume=True,
                    )
                )
                continue
            self.store.mark_done(request.trial_id, defer=True)  # written with the commit
            return result, curve
