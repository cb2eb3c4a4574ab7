"""This process's worker of the job's tf.data service, for ``data.placement: colocated``.

With colocated placement the service's process runs the dispatcher alone, and every trial
process runs a worker of it, started on the trial's first :func:`ultron.data.batches` and kept
for the process's next trials of the same job. The trial reads only from its own worker
(``target_workers="LOCAL"``): the pipeline runs on this process's CPU threads and batches come
through memory. The dispatcher gives every job a task on every worker, but a worker starts a
task only when a client reads from it, so one trial's worker does no work for another.

Workers are keyed by the service (its id in the trial config), not by the dispatcher's
address, which a later job may reuse. Each reader holds its worker (:func:`acquire`,
:func:`release`); starting the worker of another service stops the old ones nobody holds.

Importing this module loads no TensorFlow.

Example:
    >>> service_key({"service": "a1b2", "dispatcher": "grpc://localhost:5050"})
    'a1b2'
    >>> running("a1b2")
    False
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ultron.datamanager.errors import DataServiceError

__all__ = ["acquire", "release", "running", "service_key", "stop"]

_CONNECT_TIMEOUT_S = 10.0
_HEARTBEAT_MS = 1000  # how soon a worker hears of a new task if the dispatcher cannot push it
_lock = threading.Lock()


@dataclass
class _Worker:
    server: Any
    users: int = 0


_workers: dict[str, _Worker] = {}


def service_key(config: dict[str, Any]) -> str:
    """Which service a trial config belongs to: its id, else its dispatcher's address."""
    return str(config.get("service") or config["dispatcher"])


def running(key: str) -> bool:
    """Whether this process runs a worker of the service ``key``."""
    with _lock:
        return key in _workers


def acquire(config: dict[str, Any]) -> str:
    """This process's worker of the config's service, started on first use; returns its key.

    Raises:
        DataServiceError: the staged data or the dispatcher cannot be reached from here.
    """
    key = service_key(config)
    idle: list[_Worker] = []
    with _lock:
        worker = _workers.get(key)
        if worker is None:
            idle = [_workers.pop(k) for k, w in list(_workers.items()) if w.users == 0]
            worker = _workers[key] = _Worker(_start(config))
        worker.users += 1
    for old in idle:  # another job's workers that no reader holds
        old.server.stop()
    return key


def release(key: str) -> None:
    """A reader is done with the worker ``key`` (it keeps running for the next trial)."""
    with _lock:
        worker = _workers.get(key)
        if worker is not None:
            worker.users = max(0, worker.users - 1)


def stop(key: str | None = None) -> None:
    """Stop this process's worker of the service ``key`` (``None``: all of them)."""
    with _lock:
        keys = [k for k in _workers if key is None or k == key]
        stopping = [_workers.pop(k) for k in keys]
    for worker in stopping:
        worker.server.stop()


def _start(config: dict[str, Any]) -> Any:
    from ultron.datamanager.pipeline import import_tensorflow

    root = Path(config["manifest"]["root"])
    if not root.is_dir():
        raise DataServiceError(
            f"data.placement is colocated, but the staged data {root} is not on this machine "
            "(a colocated worker reads the shards itself). Fix: set data.placement: service, "
            "or put ULTRON_HOME on a file system that the trials' machines share"
        )
    address = config["dispatcher"].split("://", 1)[-1]
    host, port = address.rsplit(":", 1)
    try:  # a worker of an unreachable dispatcher would wait for it for ever
        socket.create_connection((host, int(port)), timeout=_CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise DataServiceError(
            f"the job's data service dispatcher at {address} cannot be reached from this "
            f"trial process ({exc}). Fix: set data.host to a name the trials' machines "
            "resolve to the service's machine, and open its data.port to them"
        ) from exc
    svc = import_tensorflow().data.experimental.service
    return svc.WorkerServer(
        svc.WorkerConfig(
            dispatcher_address=address,
            worker_address=f"{_reachable_host(host)}:%port%",
            port=0,
            heartbeat_interval_ms=_HEARTBEAT_MS,
        )
    )


def _reachable_host(dispatcher_host: str) -> str:
    """This machine's name as the dispatcher's machine reaches it."""
    if dispatcher_host in ("localhost", "127.0.0.1", "::1", "[::1]"):
        return "localhost"
    try:  # the address this machine would send from (a UDP connect sends nothing)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((dispatcher_host, 9))
            return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostname()
