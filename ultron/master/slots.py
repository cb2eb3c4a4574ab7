"""Slots: a long-running Dask task on each worker thread that runs the trials pushed to it.

The batch loop samples a round from every result of the one before, so it cannot queue trials
the way the async loop does. What it can do is keep a task on each of the job's worker threads
that takes trials from Redis: while a round runs, :meth:`Slots.add` submits one
:func:`~ultron.worker.runner.await_trial` per worker thread, pinned to it; once the trial
running there returns, the slot starts, says so (a notice), and blocks on its own Redis list,
runs each request pushed there and blocks again. When the master has sampled a round,
:meth:`Slots.take` pushes each attempt's request to a free slot, all in one round trip; the
worker answers by its notice (``ultron.worker.runner``), and the slot is free again. The
job's first round keeps slots too, before any trial has a duration (they wait behind its trials
and leave unstarted if its first result says the trials are not short), so from the second
round on a round passes no message through Dask: on 2 cores a submit's way through the
scheduler to a worker took 7-8 ms, and each task's end 2-4 ms more, on the cores the round's
trials start on.

An idle slot holds its worker's thread, and a task Dask placed behind it would wait forever;
so nothing is: one slot per worker thread (pinned), a request goes only to a slot that has
started, and while any slot lives every request does (those that find none free wait in
:attr:`Slots.backlog` for one). Only where the workers are the job's own and hold no more than
``parallelism`` trials, with trials that queue in the async loop
(:func:`~ultron.master.async_loop.queue_slots`). A slot not needed (fewer trials, a smaller
parallelism, a lost worker, the job's end or cancellation) is told to leave (``null`` pushed:
it returns once its trial, if it runs one, has answered); one whose worker is lost fails with
it, and the attempt it ran with it, as a trial task there would (``allowed-failures`` is 0). A
request stays in Redis only until its slot pops it, under the job's transient keys.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ultron.redis import keys
from ultron.trial_records import TrialRequest
from ultron.worker.runner import await_trial

__all__ = ["Slots"]


class Slots:
    """The job's slots: submitted, free (started, waiting for a request) or busy.

    Args:
        store: the job's store (its Redis client, job id and namespace).
        redis_url: the Redis the workers reach.
    """

    def __init__(self, store: Any, redis_url: str) -> None:
        self.store = store
        self.job_id = store.job_id
        self.namespace = store.namespace
        self.redis_url = redis_url
        self.waiting: dict[str, Any] = {}  # submitted, not started: no request goes there
        self.free: list[Any] = []  # started, waiting for a request
        self.busy: dict[str, Any] = {}  # running a trial
        self.gone: list[Any] = []  # told to leave, maybe still ending
        self.backlog: list[TrialRequest] = []  # requests waiting for a free slot
        self._where: dict[str, str] = {}  # slot key -> its worker's address
        self._stuck_for = 0  # calls of stuck() in a row that found it so

    @property
    def redis(self) -> Any:
        """The job's Redis client (the store's, taken when first used)."""
        return self.store.client

    def __len__(self) -> int:
        """The slots the job keeps: submitted, free and busy."""
        return len(self.waiting) + len(self.free) + len(self.busy)

    @staticmethod
    def holds(future: Any) -> bool:
        """Whether ``future`` is a slot's (its key names it so)."""
        return str(future.key).startswith("slot-")

    def _list(self, future: Any) -> str:
        return keys.trial_slot(self.job_id, str(future.key), namespace=self.namespace)

    def add(self, client: Any, count: int) -> list[Any]:
        """Submit up to ``count`` more slots, each pinned to a worker thread that has none;
        returns their futures, for the caller to watch."""
        taken: dict[str, int] = {}
        for key in [*self.waiting, *(str(f.key) for f in self.free), *self.busy]:
            taken[self._where[key]] = taken.get(self._where[key], 0) + 1
        places = [
            address
            for address, worker in client.scheduler_info()["workers"].items()
            # Not one closing (a smaller parallelism retires it): a task pinned there would
            # never run, and never fail either.
            if worker.get("status", "running") == "running"
            for _ in range(int(worker.get("nthreads", 1)) - taken.get(address, 0))
        ][:count]
        if not places:
            return []
        lease = keys.job_master(self.job_id, namespace=self.namespace)
        held = bool(self.redis.exists(lease))  # no lease (a master run without one): no check
        ids = [f"slot-{self.job_id}-{uuid.uuid4().hex[:12]}" for _ in places]
        futures = [
            client.submit(
                await_trial,
                {
                    "redis_url": self.redis_url,
                    "key": keys.trial_slot(self.job_id, key, namespace=self.namespace),
                    "name": key,
                    "notices": keys.trial_notices(self.job_id, namespace=self.namespace),
                    "lease": lease if held else None,
                },
                key=key,
                pure=False,
                workers=[address],
                allow_other_workers=False,
            )
            for key, address in zip(ids, places, strict=True)
        ]
        self.waiting.update(zip(ids, futures, strict=True))
        self._where.update(zip(ids, places, strict=True))
        return futures

    def started(self, key: str) -> None:
        """The slot ``key`` has started on its worker (its notice): it takes requests."""
        future = self.waiting.pop(key, None)
        if future is not None and not future.done():
            self.free.append(future)

    def take(
        self, requests: list[TrialRequest]
    ) -> tuple[list[tuple[TrialRequest, Any]], list[TrialRequest]]:
        """Give the backlog, then ``requests``, to free slots (one round trip); returns those
        given and those to submit as tasks: none while any slot lives (they wait in the
        backlog for one to free), all the rest once none does."""
        ended = [future for future in self.free if future.done()]
        self.free = [future for future in self.free if not future.done()]
        queue = [*self.backlog, *requests]
        pairs = list(zip(queue, self.free, strict=False))
        del self.free[: len(pairs)]
        pipe = self.redis.pipeline(transaction=False)
        for request, future in pairs:
            pipe.rpush(self._list(future), json.dumps(request.to_dict()))
            self.busy[str(future.key)] = future
        for future in ended:  # a cancelled task's thread may still wait there: it leaves
            pipe.rpush(self._list(future), "null")
        if pairs or ended:
            pipe.execute()
        rest = queue[len(pairs) :]
        self.backlog = rest if len(self) else []
        return pairs, [] if len(self) else rest

    def stuck(self, running: bool) -> bool:
        """Whether requests wait for slots that may never start: a backlog, no slot started,
        and nothing running (``running``) that a slot could be waiting behind, at this call
        and the four before it (the caller asks about once a second)."""
        waiting_only = bool(self.backlog and self.waiting) and not (self.free or self.busy)
        self._stuck_for = self._stuck_for + 1 if waiting_only and not running else 0
        return self._stuck_for >= 5

    def answered(self, future: Any) -> None:
        """The trial in this slot has answered: the slot takes the next request."""
        if self.busy.pop(str(future.key), None) is not None and not future.done():
            self.free.append(future)

    def drop(self, future: Any) -> None:
        """The slot's task ended (it left, or its worker was lost)."""
        key = str(future.key)
        self.waiting.pop(key, None)
        self.busy.pop(key, None)
        if future in self.free:
            self.free.remove(future)

    def leave(self, client: Any, count: int | None = None) -> None:
        """Send ``count`` slots away (all of them by default): those not started (cancelled),
        then free ones (they return unrun), then busy ones (once their trial has answered)."""
        count = len(self) if count is None else min(count, len(self))
        if count <= 0:
            return
        gone = [self.waiting.pop(key) for key in list(self.waiting)[:count]]
        client.cancel(gone)  # one may hold a place behind a worker that is gone
        free = self.free[len(self.free) - min(count - len(gone), len(self.free)) :]
        del self.free[len(self.free) - len(free) :]
        gone += free
        gone += [self.busy.pop(key) for key in list(self.busy)[: count - len(gone)]]
        pipe = self.redis.pipeline(transaction=False)
        for future in gone:
            pipe.rpush(self._list(future), "null")
        pipe.execute()
        self.gone = [f for f in self.gone if not f.done()] + [f for f in gone if not f.done()]
