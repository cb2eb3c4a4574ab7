"""What the workers tell the master over Redis, before Dask does: answers, and slots started.

``run_trial`` writes each attempt's answer and, in the same round trip, pushes it to the job's
notice list (:func:`~ultron.redis.keys.trial_notices`: ``<trial id>:<attempt>``, a newline,
the answer); a slot (:mod:`ultron.master.slots`) pushes ``slot``, a newline, its name, when it
starts. The master reads them as they come, before Dask carries a task's end through the
scheduler to the client (5 ms sooner on 2 cores at parallelism 8); a trial in a slot has no
task of its own to end. An answer is taken only for an attempt in flight and only if it is of
that attempt's configuration (:func:`~ultron.trial_records.stored_answer`): an earlier
master's notice, or one of an attempt told already, is passed over. A task that failed sends
none: its future says so.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
from typing import Any

from ultron.redis import keys
from ultron.trial_records import TrialRequest, stored_answer

__all__ = ["Notices"]

# The list's items, and the list deleted, in one step.
_TAKE_ALL = (
    "local items = redis.call('LRANGE', KEYS[1], 0, -1) redis.call('DEL', KEYS[1]) return items"
)


class Notices:
    """The job's notices, read: the answers not yet given to the dispatcher's caller.

    Args:
        store: the job's store (its Redis client, job id and namespace).
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        self.key = keys.trial_notices(store.job_id, namespace=store.namespace)
        self.told: collections.deque[tuple[str, Any]] = collections.deque()  # (task key, answer)
        self._by_attempt: dict[str, str] = {}  # ``<trial id>:<attempt>`` -> its task's key

    @property
    def redis(self) -> Any:
        """The job's Redis client (the store's, taken when first used)."""
        return self.store.client

    def clear(self) -> None:
        """Drop an earlier master's notices (a rerun of one of its attempts finds its answer)."""
        self.redis.delete(self.key)

    def expect(self, request: TrialRequest, key: str) -> None:
        """The attempt runs under the task ``key`` (a slot's, where it runs in one)."""
        self._by_attempt[f"{request.trial_id}:{request.attempt}"] = key

    def forget(self, request: TrialRequest) -> None:
        """The attempt is told: a notice of it later is passed over."""
        self._by_attempt.pop(f"{request.trial_id}:{request.attempt}", None)

    def read(
        self,
        wait_s: float,
        pending: Mapping[str, TrialRequest],
        started: Callable[[str], None],
    ) -> None:
        """Queue the answers of ``pending`` attempts (task key -> request) written since the
        last read, waiting up to ``wait_s`` seconds for one; ``started(name)`` for each slot
        started. All that came meanwhile in one round trip: Redis runs the commands a client
        sent after a blocking one once it returns, so the script that takes the rest of the
        list (atomically: no notice pushed meanwhile is lost) follows the ``BLPOP``."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.blpop([self.key], timeout=wait_s)
        pipe.eval(_TAKE_ALL, 1, self.key)
        got, rest = pipe.execute()
        for raw in [*([got[1]] if got else []), *rest]:
            attempt, _, stored = (raw.decode() if isinstance(raw, bytes) else raw).partition("\n")
            if attempt == "slot":
                started(stored)
                continue
            key = self._by_attempt.get(attempt, "")
            request = pending.get(key)
            answer = None if request is None else stored_answer(stored, request.hyperparameters)
            if answer is not None:
                self.told.append((key, answer))

    def recover(self, pending: Mapping[str, TrialRequest]) -> None:
        """Queue the stored answers of the attempts running in slots (task key ``slot-...``),
        in one round trip: their notice is their only way back, and a reply lost as the
        client retried (the Redis failing over, say) would have lost it."""
        in_slots = [(key, r) for key, r in pending.items() if str(key).startswith("slot-")]
        if not in_slots:
            return
        stored = self.redis.mget(
            [
                keys.trial_result(r.job_id, r.trial_id, r.attempt, namespace=r.namespace)
                for _, r in in_slots
            ]
        )
        for (key, request), raw in zip(in_slots, stored, strict=True):
            answer = stored_answer(raw, request.hyperparameters)
            if answer is not None:
                self.told.append((key, answer))
