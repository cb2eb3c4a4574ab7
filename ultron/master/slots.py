"""Trials submitted before they are sampled: the batch loop's next round, waiting on its workers.

The batch loop samples a round from every result of the one before, so it cannot queue trials
the way the async loop does. What it can do is have the round's Dask tasks on the workers
before the round is known: while a round runs, :meth:`Slots.add` submits one
:func:`~ultron.worker.runner.await_trial` per trial of the next round; each waits behind the
trial running on its worker and, once that one returns, blocks on its own Redis list. When the
master has sampled the round, :meth:`Slots.assign` pushes each attempt's request to a waiting
slot, all in one round trip, and the trials start without a submit's way through the
scheduler to each worker (on 2 cores that way took 8-18 ms a round, the next round's last trial
started 17.8 ms after its submit).

Only where the workers are the job's own and hold no more than ``parallelism`` trials (as for
the async loop's queue, :func:`~ultron.master.async_loop.queued_ahead`): a slot occupies its
worker's thread while it waits. A slot nobody needs (fewer candidates, a smaller parallelism,
the job's end or cancellation) is told to leave (``null`` pushed) and returns None unrun; one
whose worker is lost fails with it, as a trial there would (``allowed-failures`` is 0). A
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
    """The job's slots not yet given a trial.

    Args:
        redis: the job's Redis client (the store's).
        job_id: the job.
        namespace: the job's key namespace.
        redis_url: the Redis the workers reach.
    """

    def __init__(self, redis: Any, job_id: str, namespace: str, redis_url: str) -> None:
        self.redis = redis
        self.job_id = job_id
        self.namespace = namespace
        self.redis_url = redis_url
        self.free: list[Any] = []  # futures of slots waiting for a request

    def _list(self, future: Any) -> str:
        return keys.trial_slot(self.job_id, str(future.key), namespace=self.namespace)

    def add(self, client: Any, count: int) -> list[Any]:
        """Submit ``count`` more slots; returns their futures, for the caller to watch."""
        lease = keys.job_master(self.job_id, namespace=self.namespace)
        held = bool(self.redis.exists(lease))  # no lease (a master run without one): no check
        ids = [f"slot-{self.job_id}-{uuid.uuid4().hex[:12]}" for _ in range(count)]
        slots = [
            {
                "redis_url": self.redis_url,
                "key": keys.trial_slot(self.job_id, key, namespace=self.namespace),
                "lease": lease if held else None,
            }
            for key in ids
        ]
        futures = client.map(await_trial, slots, key=ids, pure=False)
        self.free.extend(futures)
        return futures

    def assign(self, requests: list[TrialRequest]) -> list[tuple[TrialRequest, Any]]:
        """Give the first requests a waiting slot each (one round trip); returns the pairs.
        A slot already ended (its worker lost, the task cancelled) gets none: a request pushed
        there would wait for nobody."""
        ended = [future for future in self.free if future.done()]
        self.free = [future for future in self.free if not future.done()]
        pairs = list(zip(requests, self.free, strict=False))
        del self.free[: len(pairs)]
        pipe = self.redis.pipeline(transaction=False)
        for request, future in pairs:
            pipe.rpush(self._list(future), json.dumps(request.to_dict()))
        for future in ended:  # a cancelled task's thread may still wait there: it leaves
            pipe.rpush(self._list(future), "null")
        if pairs or ended:
            pipe.execute()
        return pairs

    def leave(self, count: int | None = None) -> None:
        """Send ``count`` waiting slots away (all of them by default): each returns unrun."""
        count = len(self.free) if count is None else count
        if count <= 0:
            return
        gone, self.free = self.free[-count:], self.free[:-count]
        pipe = self.redis.pipeline(transaction=False)
        for future in gone:
            pipe.rpush(self._list(future), "null")
        pipe.execute()
