"""A job's Dask cluster, started when the job first needs it.

A job whose trials the score cache answers needs no worker at all: the quickstart run a second
time spent more than half its time starting a cluster and warm trial processes that ran
nothing. :class:`LazyCluster` is what ``acquire_resources`` hands out instead of a running
cluster: the job's units are taken first, as before, and the cluster (with a warm trial process
on each worker) starts at its first use, the dispatch of the first trial the cache cannot
answer. :meth:`LazyCluster.start_soon` starts it in the background instead, where starting
early pays (a GPU job's trial processes start CUDA while the master prepares its first trials;
a job whose score cache is empty for its computation needs the workers for its first trial).

Until it starts, a resize only changes how many workers it will start with (``ultron scale``
before the first trial); after, it is :class:`~ultron.cluster.elastic.ElasticWorkers`' job.

    >>> from ultron.cluster.factory import ClusterHandle
    >>> lazy = LazyCluster(lambda parallelism: ClusterHandle(None, None, {}), parallelism=2)
    >>> lazy.started, lazy.dashboard_link
    (False, None)
    >>> lazy.handle().resources, lazy.started
    ({}, True)
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ultron.cluster.factory import ClusterHandle

__all__ = ["LazyCluster"]

logger = logging.getLogger(__name__)


class LazyCluster:
    """A cluster that ``start(parallelism)`` starts at the first :meth:`handle` call, once.

    Args:
        start: starts the workers for that many trials at once (and their warm trial
            processes) and returns the running cluster; it closes what it started if it fails.
        parallelism: trials at once to start workers for (:meth:`resize` changes it until then).
        resources: the Dask resources each trial asks for (``{"GPU": 1}``), known before the
            cluster runs.
    """

    def __init__(
        self,
        start: Callable[[int], ClusterHandle],
        *,
        parallelism: int,
        resources: dict[str, float] | None = None,
    ) -> None:
        self._start = start
        self.parallelism = parallelism
        self.resources = dict(resources or {})
        self._lock = threading.Lock()  # the fields below; never held while the start runs
        self._starting = threading.Lock()  # one start at a time, and close after it
        self._handle: ClusterHandle | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self.start_s: float | None = None  # seconds the start took, once it ran

    @property
    def started(self) -> bool:
        """Whether the cluster was started (or is starting)."""
        return self._handle is not None or self._thread is not None or self._error is not None

    @property
    def running(self) -> ClusterHandle | None:
        """The cluster if it runs now; never starts it."""
        return self._handle

    @property
    def client(self) -> Any:
        """The cluster's Dask client; starts the cluster if it is not running yet."""
        return self.handle().client

    @property
    def dashboard_link(self) -> str | None:
        """The dashboard's URL once the cluster runs; None before."""
        return self._handle.dashboard_link if self._handle is not None else None

    def handle(self) -> ClusterHandle:
        """The running cluster: started now (or waited for, if it is starting) on first use.

        Raises:
            RuntimeError: the job's resources were released already.
            Exception: whatever the start raised (again at every call: the start is not retried).
        """
        self.settled()
        with self._starting:
            if self._handle is None and self._error is None:
                self._run_start()
        if self._error is not None:
            raise self._error
        assert self._handle is not None  # set by _run_start or the error above
        return self._handle

    def start_soon(self) -> None:
        """Start the cluster in a background thread now; :meth:`handle` waits for it.

        The start runs in a copy of the caller's context (``contextvars``): Prefect's settings
        and run context are context variables, and without them the start's log lines went
        to a Prefect API of their own (Prefect started its ephemeral server for them: 4-5 s
        and as many CPU seconds at the job's end).
        """
        with self._lock:
            if self.started or self._closed:
                return
            context = contextvars.copy_context()
            self._thread = threading.Thread(
                target=context.run,
                args=(self._start_in_background,),
                name="ultron-start-cluster",
                daemon=True,
            )
            self._thread.start()

    def _start_in_background(self) -> None:
        # A failure is kept for handle() to raise in the master's thread, where it ends the job.
        with self._starting:
            if self._handle is None and self._error is None:
                self._run_start()

    def _run_start(self) -> None:
        """Called with ``_starting`` held."""
        if self._closed:
            self._error = RuntimeError("the job's resources were released; no cluster starts")
            return
        started = time.monotonic()
        try:
            self._handle = self._start(self.parallelism)
        except BaseException as exc:  # re-raised by handle(), in the caller's thread
            self._error = exc
        finally:
            self.start_s = round(time.monotonic() - started, 3)

    def settled(self) -> ClusterHandle | None:
        """The running cluster, once a start in progress has ended; None if none runs."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        return self._handle

    def close(self) -> None:
        """Close the cluster if it was started (after a start in progress ends); no cluster
        starts afterwards."""
        self.settled()
        with self._starting, self._lock:
            self._closed = True
            handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()
