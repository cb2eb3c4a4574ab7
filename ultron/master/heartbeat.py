"""One master per job, and its heartbeat: the job's lease in Redis.

The process that runs a job (its master) holds the job's lease, ``<ns>:job:<id>:master``: a
key set with ``SET NX PX`` to a token of its own (``host/pid/random``), which a thread renews
every ``ULTRON_HEARTBEAT_S`` seconds for :data:`TTL_BEATS` of them, writing the time into the
job's hash (``heartbeat``) as it does. The lease is given back on exit with a compare-and-delete
script, so a master never removes another's lease.

- A second master for the same job id waits while the holder renews, for at most one lease
  time and one beat, then is refused (:class:`~ultron.errors.JobBusyError`): two masters never
  dispatch one job's trials. A holder that died leaves a lease that expires within that time,
  and the waiting master takes the job over and resumes it. A holder on this machine whose
  process is gone (a SIGKILLed ``ultron run``) is known dead at once: its lease is taken
  without waiting.
- A job whose stored status says it is active (queued, preparing, running) but whose lease is
  gone is ``lost`` (:func:`effective_status`): nobody writes that status, readers derive it.
- A master that finds its lease taken by another (it stalled longer than the lease time) ends
  its process at once: the other master already dispatches the job.

Example:
    >>> import redis, uuid
    >>> client = redis.Redis.from_url(redis_url)
    >>> job_id = f"doc-{uuid.uuid4().hex[:8]}"
    >>> lease = MasterLease(client, job_id, ttl_s=5.0)
    >>> lease.take(), MasterLease(client, job_id, ttl_s=5.0).take()
    (True, False)
    >>> lease.renew(), lease.release(), lease.holder() is None
    (True, True, True)
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import redis

from ultron.errors import JobBusyError
from ultron.master.job_state import ACTIVE, JobStatus
from ultron.redis import keys

__all__ = ["TTL_BEATS", "MasterLease", "effective_status", "heartbeat_ttl_s", "holding_the_job"]

logger = logging.getLogger(__name__)

TTL_BEATS = 2.5
"""A lease outlives its last renewal by this many heartbeats: a job is ``lost`` within 3."""

# Renew only our own lease; a lease that expired meanwhile (Redis paused, a slow beat) is taken
# back if nobody took it: 1 renewed or re-taken, 0 another master holds it.
_RENEW = """
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not held then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def heartbeat_ttl_s(heartbeat_s: float) -> float:
    """How long a lease renewed every ``heartbeat_s`` seconds lives after its last renewal."""
    return heartbeat_s * TTL_BEATS


def effective_status(stored: str, lease_held: bool) -> str:
    """The status a reader shows: ``lost`` for an active job (queued, preparing, running)
    whose master's lease is gone; the stored status otherwise.

    Example:
        >>> effective_status("running", False), effective_status("running", True)
        ('lost', 'running')
        >>> effective_status("completed", False)
        'completed'
    """
    return str(JobStatus.LOST) if stored in ACTIVE and not lease_held else stored


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


class MasterLease:
    """The lease of one job's master: take, renew, release, and who holds it.

    Args:
        client: the job's Redis.
        job_id: the job.
        ttl_s: how long the lease lives after its last renewal.
        namespace: the keys' namespace.
    """

    def __init__(
        self, client: Any, job_id: str, *, ttl_s: float, namespace: str = keys.NAMESPACE
    ) -> None:
        self.client = client
        self.job_id = job_id
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.key = keys.job_master(job_id, namespace=namespace)
        self.job_key = keys.job(job_id, namespace=namespace)
        self.token = f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:12]}"

    def take(self) -> bool:
        """Take the lease if nobody holds it; whether this master holds it now."""
        if self.client.set(self.key, self.token, nx=True, px=self.ttl_ms):
            return True
        return self.holder() == self.token

    def renew(self) -> bool:
        """Extend the lease (or take it back if it expired and nobody took it) and write the
        heartbeat's time into the job's hash; ``False``: another master holds it."""
        held = bool(self.client.eval(_RENEW, 1, self.key, self.token, self.ttl_ms))
        if held:
            self.client.hset(self.job_key, "heartbeat", str(time.time()))
        return held

    def release(self) -> bool:
        """Give the lease back if this master still holds it (compare and delete)."""
        return bool(self.client.eval(_RELEASE, 1, self.key, self.token))

    def holder(self) -> str | None:
        """The token of the master holding the lease, or ``None``."""
        return _text(self.client.get(self.key))

    def take_from_the_dead(self) -> bool:
        """Take a lease whose holder ran on this machine and whose process is gone."""
        held = self.holder()
        if held is None or not _dead_here(held):
            return False
        self.client.eval(_RELEASE, 1, self.key, held)
        logger.warning("job %s: its master %s is gone; taking the job over", self.job_id, held)
        return self.take()

    def wait_to_take(
        self, timeout_s: float, *, poll_s: float = 0.2, check: Callable[[], None] | None = None
    ) -> None:
        """Take the lease, waiting up to ``timeout_s`` seconds for its holder's to expire.

        ``check()`` runs between tries (it raises to stop waiting: a Ctrl-C meanwhile).

        Raises:
            JobBusyError: another master held it all that time (it is alive).
        """
        deadline = time.monotonic() + timeout_s
        while not (self.take() or self.take_from_the_dead()):
            if check is not None:
                check()
            if time.monotonic() >= deadline:
                raise JobBusyError(
                    f"job {self.job_id} is running in another process ({self.holder()}), whose "
                    f"heartbeat went on for the {timeout_s:g} s this one waited; one master "
                    f"runs a job at a time. Fix: wait for it to end (`ultron status "
                    f"{self.job_id}`), or stop it with `ultron cancel {self.job_id}` and run "
                    "this again"
                )
            time.sleep(poll_s)


def _dead_here(token: str) -> bool:
    """Whether ``token`` names a process of this machine that no longer runs."""
    host, _, rest = token.partition("/")
    pid = rest.partition("/")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    return not psutil.pid_exists(int(pid))


@contextlib.contextmanager
def holding_the_job(
    client: Any,
    job_id: str,
    *,
    heartbeat_s: float,
    on_lost: Callable[[str], None] | None = None,
    check: Callable[[], None] | None = None,
    namespace: str = keys.NAMESPACE,
) -> Iterator[MasterLease]:
    """Hold the job's lease inside the block, renewed every ``heartbeat_s`` seconds by a thread.

    The lease is taken first (waiting for a predecessor's to expire, see
    :meth:`MasterLease.wait_to_take`), given back at the end. ``on_lost(message)`` is called if
    another master took the lease meanwhile; by default the process ends at once. ``check()``
    runs while it waits for the lease (it raises to stop waiting). ``namespace`` is the job's
    keys' (its tenant's, :func:`~ultron.redis.keys.tenant_namespace`).

    Raises:
        JobBusyError: another live master holds the job.
    """
    ttl_s = heartbeat_ttl_s(heartbeat_s)
    lease = MasterLease(client, job_id, ttl_s=ttl_s, namespace=namespace)
    lease.wait_to_take(ttl_s + heartbeat_s, check=check)
    lease.renew()
    done = threading.Event()
    thread = threading.Thread(
        target=_beat,
        args=(lease, heartbeat_s, done, on_lost or _end_process),
        name=f"ultron-heartbeat-{job_id}",
        daemon=True,
    )
    thread.start()
    try:
        yield lease
    finally:
        done.set()
        thread.join(timeout=heartbeat_s + 2.0)
        with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
            lease.release()  # unreachable Redis: the lease expires by itself


def _beat(
    lease: MasterLease, every_s: float, done: threading.Event, on_lost: Callable[[str], None]
) -> None:
    while not done.wait(every_s):
        try:
            held = lease.renew()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            # Redis away for a moment: the next beat tries again (the lease may expire meanwhile
            # and is taken back by the next renewal if nobody took it).
            logger.warning("job %s: heartbeat not written: %r", lease.job_id, exc)
            continue
        except Exception:
            logger.exception("job %s: the heartbeat broke; the job shows lost", lease.job_id)
            return
        if not held and not done.is_set():
            on_lost(
                f"job {lease.job_id}: another master ({lease.holder()}) took the job over while "
                "this one's heartbeat was late; this process stops so that one master runs it"
            )
            return


def _end_process(message: str) -> None:
    """Stop dispatching now: the other master runs the job (see the module's docstring)."""
    from ultron.master.cancel import force_exit

    logger.critical(message)
    force_exit(None)
