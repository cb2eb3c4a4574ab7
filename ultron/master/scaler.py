"""Elastic jobs, in the master: a running job's parallelism follows what it is asked.

The master's loops ask :meth:`Scaler.poll` before each dispatch how many trials may run now.
The scaler reads the job's requested parallelism (:mod:`ultron.master.scaling`), takes or
gives back limiter units for it (the lease is resized in place:
:meth:`~ultron.limiter.resource_limiter.ResourceLimiter.resize`) and sizes the job's workers
(:class:`~ultron.cluster.elastic.ElasticWorkers`).

- Up: the units are taken if the limiter has them free (behind the jobs that wait); else the
  job runs with what it has and tries again every ``retry_s`` (best effort: a job with
  ``min_parallelism`` grows the same way as units free up).
- Down: no new trial starts until fewer than the new parallelism run; the running ones finish.
  Their units and workers are given back as they end: a running trial is never cut short, so
  none is lost or repeated.

While the master waits for a trial, the dispatcher asks :meth:`Scaler.wake` (cheap, rate
limited) whether to come back to the loop early: a new request, or a retry to grow that is due.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ultron.cluster.elastic import ElasticWorkers
from ultron.limiter.elastic import fit_parallelism
from ultron.limiter.lease_keeper import LeaseKeeper
from ultron.limiter.resource_limiter import ResourceLimiter
from ultron.master.scaling import requested_parallelism
from ultron.redis import keys

__all__ = ["Scaler"]

logger = logging.getLogger(__name__)


class Scaler:
    """Keeps one job's units and workers at the parallelism asked for it, as far as they fit.

    Args:
        client: the job's Redis.
        job_id: the job.
        limiter: the limiter that granted the job's lease.
        keeper: the thread renewing the lease; its ``lease`` is replaced as the lease resizes.
        workers: the job's workers.
        units_for: units of n trials (``Resources.units_for``).
        granted: trials the lease holds units for now.
        wanted: trials asked for (the spec's ``parallelism``, or the last ``ultron scale``).
        read_s: seconds between reads of the request while waiting.
        retry_s: seconds between tries to take units that were not free.
    """

    def __init__(
        self,
        client: Any,
        job_id: str,
        *,
        limiter: ResourceLimiter,
        keeper: LeaseKeeper,
        workers: ElasticWorkers,
        units_for: Callable[[int], float],
        granted: int,
        wanted: int,
        read_s: float = 0.5,
        retry_s: float = 1.0,
        namespace: str = keys.NAMESPACE,
    ) -> None:
        self.client = client
        self.job_id = job_id
        self.namespace = namespace
        self.limiter = limiter
        self.keeper = keeper
        self.workers = workers
        self.units_for = units_for
        self.granted = granted
        self.wanted = wanted
        self.read_s = read_s
        self.retry_s = retry_s
        self._read_at = time.monotonic()
        self._tried_at = -retry_s

    @property
    def parallelism(self) -> int:
        """Trials that may run at once now."""
        return min(self.wanted, self.granted)

    def _read(self) -> None:
        now = time.monotonic()
        if now - self._read_at < self.read_s:
            return
        self._read_at = now
        asked = requested_parallelism(self.client, self.job_id, namespace=self.namespace)
        if asked is not None and asked != self.wanted:
            logger.info("job %s: parallelism %d asked (was %d)", self.job_id, asked, self.wanted)
            self.wanted = asked

    def _grow_due(self) -> bool:
        return self.granted < self.wanted and time.monotonic() - self._tried_at >= self.retry_s

    def wake(self) -> bool:
        """Whether the loop should come back to dispatch now: another parallelism was asked,
        or a try to take the units still missing is due."""
        before = self.wanted
        self._read()
        return self.wanted != before or self._grow_due()

    def poll(self, in_flight: int) -> int:
        """Apply what was asked, given ``in_flight`` running trials; returns the trials that may
        run at once from now on.

        The asked parallelism is read at most every ``read_s`` seconds, as by :meth:`wake`: the
        loop polls before every dispatch, and a read each time was a Redis round trip between a
        freed worker and its next trial."""
        self._read()
        if self._grow_due():
            self._tried_at = time.monotonic()
            lease, trials = fit_parallelism(
                self.limiter,
                self.keeper.lease,
                units_for=self.units_for,
                have=self.granted,
                most=self.wanted,
            )
            if trials > self.granted:
                logger.info("job %s: took units for %d trials", self.job_id, trials)
                self.keeper.lease, self.granted = lease, trials
        keep = max(self.parallelism, in_flight)  # running trials keep their units
        if self.granted > keep:
            smaller = self.limiter.resize(self.keeper.lease, self.units_for(keep))
            if smaller is not None:  # giving back always succeeds
                self.keeper.lease, self.granted = smaller, keep
        self.workers.resize(self.granted)
        return self.parallelism
