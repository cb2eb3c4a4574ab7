"""Keeps a lease of the Resource Limiter alive: a thread that renews it until stopped."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import redis

from ultron.limiter.leases import Lease
from ultron.limiter.resource_limiter import ResourceLimiter

__all__ = ["LeaseKeeper"]

logger = logging.getLogger(__name__)


class LeaseKeeper:
    """A daemon thread that renews a lease every ``ttl_s / 3`` until stopped.

    If the lease turns out to have expired (the process stalled longer than its TTL), the
    keeper stops, sets ``lost`` and calls ``on_lost``: the units may already be someone else's.
    Redis errors are logged and retried at the next tick.

    Args:
        limiter: the limiter that granted the lease.
        lease: the lease to keep.
        interval_s: seconds between renewals; default ``lease.ttl_s / 3``.
        on_lost: called with the lease, from the keeper thread, if it is lost.
    """

    def __init__(
        self,
        limiter: ResourceLimiter,
        lease: Lease,
        *,
        interval_s: float | None = None,
        on_lost: Callable[[Lease], None] | None = None,
    ) -> None:
        self.limiter = limiter
        self.lease = lease
        self.interval_s = lease.ttl_s / 3 if interval_s is None else interval_s
        self.on_lost = on_lost
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"lease-keeper-{lease.job_id}", daemon=True
        )

    @property
    def lost(self) -> bool:
        """True once a renewal found the lease expired."""
        return self._lost.is_set()

    def start(self) -> LeaseKeeper:
        """Starts renewing; returns self."""
        self._thread.start()
        return self

    def stop(self, *, timeout_s: float = 5.0) -> None:
        """Stops renewing (the lease is not released). Idempotent."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                alive = self.limiter.renew(self.lease)
            except (redis.RedisError, OSError) as exc:
                logger.warning("renewing lease of job %s failed: %s", self.lease.job_id, exc)
                continue
            if not alive:
                logger.error("lease of job %s expired before renewal", self.lease.job_id)
                self._lost.set()
                if self.on_lost is not None:
                    self.on_lost(self.lease)
                return

    def __enter__(self) -> LeaseKeeper:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
