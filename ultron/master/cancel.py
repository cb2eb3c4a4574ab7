"""Stopping a job when asked: SIGINT (Ctrl-C), SIGTERM or SIGHUP, in the flow process.

A signal is an instruction, not a crash. The first SIGINT, SIGTERM or SIGHUP (the terminal
closed: an SSH session ended) sets the process's
:data:`CANCEL` request; the master's loop sees it within a fraction of a second and raises
:class:`~ultron.errors.JobCancelledError`, the running trials are asked to stop (then stopped
when their grace period is over), ``finalize`` runs while the job's services are still up, and
the job ends ``cancelled``, ready to resume. A second signal forces the exit at once.

Ctrl-C in a terminal, and the hangup of a closed terminal, go to every process of the
foreground process group: the Dask workers, the data service and Prefect's temporary server
would die mid-job and the job could not finish cleanly. :func:`handling_signals` therefore
blocks SIGINT and SIGHUP (:data:`TERMINAL_SIGNALS`) in the thread that starts them (a blocked
signal stays blocked in the threads and processes it starts) and takes them with
:func:`signal.sigwait` in a thread of its own; only this process hears them.

Example:
    >>> CANCEL.reset()
    >>> CANCEL.requested
    False
    >>> CANCEL.request(signal.SIGTERM)
    True
    >>> CANCEL.raise_if_requested("demo-1")
    Traceback (most recent call last):
        ...
    ultron.errors.JobCancelledError: job demo-1 was cancelled (SIGTERM)
    >>> CANCEL.reset()
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import redis

from ultron.errors import JobCancelledError
from ultron.redis import keys

__all__ = [
    "CANCEL",
    "TERMINAL_SIGNALS",
    "CancelRequest",
    "exit_code",
    "handling_signals",
    "request_cancel",
    "sleep_unless_cancelled",
    "watching_requests",
]

logger = logging.getLogger(__name__)

Listener = Callable[[int | None, int], None]

TERMINAL_SIGNALS = frozenset({signal.SIGINT, signal.SIGHUP})
"""What a terminal sends its whole foreground process group: Ctrl-C, and the hangup when it
closes. The job's process alone hears them; the processes it starts never do."""

_HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class CancelRequest:
    """Whether the job of this process was asked to stop, and by which signal.

    ``request`` may be called from a signal handler or any thread; the first call sets the
    request, a later one (a second Ctrl-C) calls the force hook, which by default ends the
    process at once (its children killed) with ``128 + signal``.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_number: int | None = None
        self.count = 0
        self.listeners: list[Listener] = []

    def reset(self) -> None:
        """Forget an earlier request (a new job starts)."""
        self._event.clear()
        self.signal_number = None
        self.count = 0

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self, signal_number: int | None = None) -> bool:
        """Ask the job to stop; returns True for the first request. A second one forces."""
        self.count += 1
        for listener in list(self.listeners):
            try:
                listener(signal_number, self.count)
            except Exception:  # a listener never breaks the cancellation, but it is told
                logger.exception("a cancel listener (%r) failed; cancelling anyway", listener)
        if self.count > 1:
            force_exit(signal_number)
            return False
        self.signal_number = signal_number
        self._event.set()
        return True

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a request; returns whether there is one."""
        return self._event.wait(timeout)

    def raise_if_requested(self, job_id: str) -> None:
        """Raise :class:`JobCancelledError` if the job was asked to stop."""
        if self._event.is_set():
            raise JobCancelledError(
                f"job {job_id} was cancelled ({_name(self.signal_number)})",
                signal_number=self.signal_number,
            )


CANCEL = CancelRequest()


def _name(signal_number: int | None) -> str:
    if signal_number is None:
        return "by ultron cancel"
    return signal.Signals(signal_number).name


def exit_code(signal_number: int | None) -> int:
    """The shell's exit status for a process ended by ``signal_number`` (130 for SIGINT); a
    request of ``ultron cancel`` (no signal) ends it as SIGTERM does (143)."""
    return 128 + (signal_number or signal.SIGTERM)


def sleep_unless_cancelled(seconds: float, job_id: str) -> None:
    """Sleep, but raise :class:`JobCancelledError` as soon as the job is asked to stop."""
    if CANCEL.wait(seconds):
        CANCEL.raise_if_requested(job_id)


def force_exit(signal_number: int | None) -> None:
    """End the process now: kill its descendants in its session (Dask workers, the data service,
    the temporary Prefect server) and exit with ``128 + signal``. Trial processes end within a
    second of their worker; the embedded Redis, in a session of its own, stays for the other
    jobs that share it. The job's state in Redis stays as the last update left it, so the job
    can still resume."""
    session = os.getsid(0)
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(OSError):  # it ended meanwhile
            if os.getsid(child.pid) == session:
                os.kill(child.pid, signal.SIGKILL)
    os._exit(exit_code(signal_number))


class _Handlers:
    """The installed handlers: nested ``handling_signals`` blocks share one watcher thread."""

    depth = 0
    watcher: threading.Thread | None = None
    closing = False


def _watch() -> None:
    while True:
        number = signal.sigwait(TERMINAL_SIGNALS)
        if _Handlers.closing:
            return
        CANCEL.request(number)


def _on_signal(number: int, frame: object) -> None:
    CANCEL.request(number)


@contextlib.contextmanager
def handling_signals() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP cancel the job inside the block; the processes it starts
    ignore Ctrl-C and the terminal's hangup. Outside the main thread (signals cannot be handled
    there) it does nothing.

    Nested blocks are allowed: the flow re-installs the handlers over Prefect's own SIGTERM
    handler, which would raise an exception wherever the flow happens to be.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in _HANDLED}
    outermost = _Handlers.depth == 0
    if outermost:
        # multiprocessing's resource tracker unblocks SIGINT in the thread that starts it (Dask
        # starts it with its first worker): started now, before the block, it leaves it be. It
        # ignores SIGINT itself; SIGHUP, blocked first, it inherits blocked.
        from multiprocessing import resource_tracker

        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
        try:
            resource_tracker.ensure_running()
        except BaseException:  # no block: the process's signals as they were
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            raise
        signal.pthread_sigmask(signal.SIG_BLOCK, TERMINAL_SIGNALS)
        _Handlers.closing = False
        _Handlers.watcher = threading.Thread(target=_watch, name="ultron-signals", daemon=True)
        _Handlers.watcher.start()
    _Handlers.depth += 1
    # A thread started before the block may still take SIGINT: then this handler runs.
    for number in previous:
        signal.signal(number, _on_signal)
    try:
        yield
    finally:
        _Handlers.depth -= 1
        for number, handler in previous.items():
            signal.signal(number, handler)
        if outermost:
            _Handlers.closing = True
            watcher = _Handlers.watcher
            if watcher is not None and watcher.is_alive():
                with contextlib.suppress(OSError, ValueError):
                    signal.pthread_kill(watcher.ident or 0, signal.SIGINT)
                watcher.join(timeout=1.0)
            _Handlers.watcher = None
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


# A request nobody takes (its job died before it saw it) goes away by itself.
_REQUEST_TTL_S = 3600


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def request_cancel(client: Any, job_id: str, *, namespace: str = keys.NAMESPACE) -> bool:
    """Ask the run of job ``job_id`` that holds its lease now, wherever its process runs, to
    stop (``ultron cancel``): its :func:`watching_requests` thread turns this into a
    :data:`CANCEL` request. The key is under the job's transient prefix, so ``finalize``
    removes it.

    The request names the run by its lease token: a later run of the job (a resume after the
    process that held the lease died) holds another token and ignores it.

    Returns:
        Whether a run held the job's lease (``False``: no process runs the job, nothing asked).
    """
    token = client.get(keys.job_master(job_id, namespace=namespace))
    if token is None:
        return False
    client.set(keys.job_cancel(job_id, namespace=namespace), token, ex=_REQUEST_TTL_S)
    return True


@contextlib.contextmanager
def watching_requests(
    client: Any,
    job_id: str,
    *,
    token: str,
    every_s: float = 0.5,
    namespace: str = keys.NAMESPACE,
) -> Iterator[None]:
    """Inside the block, a thread checks every ``every_s`` seconds whether someone asked this
    run of the job, whose lease token is ``token``, to stop (:func:`request_cancel`), and then
    requests :data:`CANCEL`, as Ctrl-C would: the master stops the running trials and
    ``finalize`` releases everything. A request sent to another run of the job is ignored.
    ``namespace`` is the job's keys' (its tenant's, :func:`~ultron.redis.keys.tenant_namespace`)."""
    key = keys.job_cancel(job_id, namespace=namespace)
    done = threading.Event()

    def watch() -> None:
        try:
            _watch_requests(client, key, token, job_id, done, every_s)
        except Exception:
            logger.exception(
                "job %s: the watcher of `ultron cancel` requests broke and stopped; Ctrl-C or "
                "SIGTERM still cancel the job",
                job_id,
            )

    thread = threading.Thread(target=watch, name=f"ultron-cancel-{job_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=2.0)


def _watch_requests(
    client: Any, key: str, token: str, job_id: str, done: threading.Event, every_s: float
) -> None:
    """Poll ``key`` until it holds ``token`` (then request :data:`CANCEL`) or ``done`` is set."""
    unreachable = False
    while not done.wait(every_s):
        try:
            asked = _text(client.get(key)) == token
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            # Redis away for a moment (a restart, a Sentinel failover): the next poll asks again,
            # as the job's own clients retry. Anything else is a bug and ends the watcher.
            if not unreachable:
                logger.warning("job %s: cannot read cancel requests for now: %r", job_id, exc)
            unreachable = True
            continue
        if unreachable:
            logger.info("job %s: reading cancel requests again", job_id)
            unreachable = False
        if asked:
            logger.warning("job %s: cancelled on request (ultron cancel)", job_id)
            CANCEL.request(None)
            return
