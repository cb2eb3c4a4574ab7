"""Runs trials on a Dask worker, each in a warm child process (:mod:`ultron.worker.process`).

Starting a fresh interpreter and importing the user's code for every trial would cost about as
much as a short trial, so each worker keeps warm trial processes, one per concurrent slot, and
replaces one only when it crashed, was stopped or ran out of memory. The function Dask runs is
:func:`run_trial`; :func:`warm_up` starts and primes the processes before the first trial.

A trial process holds itself to the trial's ``memory_limit`` for its whole life, and gets the
worker's environment less the secrets it does not need
(:func:`ultron.services.secrets.trial_environ`): no Redis URL, and object-store credentials
only for a trial that reads an object store itself (:func:`reads_object_store`). So warm
processes are kept by code base, limit and credentials. Stopping one ends everything it
started, children in sessions of their own included (see :meth:`WarmProcess.kill`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from multiprocessing.connection import Connection
from typing import Any
from urllib.parse import urlsplit

from ultron.services import keys
from ultron.services.secrets import trial_environ
from ultron.settings import settings
from ultron.worker.checkpoints import restore_for, start_sync
from ultron.worker.devices import gpu_environ, on_claimed_gpus, trial_gpus
from ultron.worker.isolation import descendants
from ultron.worker.trial import TrialRequest, TrialResult, TrialStatus

__all__ = ["WarmProcess", "reads_object_store", "run_trial", "shutdown_processes", "warm_up"]

logger = logging.getLogger(__name__)

_START_TIMEOUT_S = 120.0
_TERM_GRACE_S = 2.0  # a stopped trial process's time to end what it started, then SIGKILL
# Inherited by everything a trial process starts: finds its processes after it died (an orphan
# of a dead process belongs to init). Not ULTRON_*: it is no setting.
_MARK = "_ULTRON_TRIAL_PROCESS"
# URL schemes a trial reads without object-store credentials: its own disk, the data service.
_LOCAL_SCHEMES = ("", "file", "local", "grpc", "grpc+tls")


class ProcessDied(Exception):
    """The trial process ended without answering."""


class WarmProcess:
    """One long-lived trial process of one code base, and the socket to it.

    ``python -P`` keeps the folder the worker was started from off the trial's ``sys.path``;
    the code base's ``code_paths`` go first on it instead, so the user's module names are
    the user's (a ``tasks`` or ``algorithms`` package of theirs included). With
    ``memory_limit`` (bytes) the process holds itself to that much private memory. Its
    environment is this worker's without ``REDIS_URL`` and secrets; the object store's
    credentials stay only with ``object_store``.
    """

    def __init__(
        self,
        python: str,
        code_paths: Sequence[str] = (),
        *,
        log_path: str,
        memory_limit: int | None = None,
        object_store: bool = False,
        gpus: str | None = None,
    ) -> None:
        self.python = python
        self.code_paths = tuple(code_paths)
        self.memory_limit = memory_limit
        self.object_store = object_store
        self.gpus = gpus  # its CUDA_VISIBLE_DEVICES (ultron.worker.devices); None: the worker's
        env = {**trial_environ(os.environ, object_store=object_store), **gpu_environ(gpus)}
        parent, child = socket.socketpair()
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        command = [python, "-P", "-m", "ultron.worker.process", str(child.fileno())]
        if memory_limit is not None:
            command.append(f"--memory-limit={int(memory_limit)}")
        self.mark = uuid.uuid4().hex
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*command, *self.code_paths],
                env={**env, _MARK: self.mark},
                pass_fds=[child.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # its own group: a stop kills the trial's children too
            )
        child.close()
        self.conn = Connection(parent.detach())
        hello = self.receive(_START_TIMEOUT_S)
        self.pid = int(hello["pid"])

    def receive(self, timeout: float | None) -> dict[str, Any]:
        """Wait up to ``timeout`` seconds for an answer; TimeoutError or ProcessDied otherwise."""
        try:
            ready = self.conn.poll(timeout)
            message: dict[str, Any] = self.conn.recv() if ready else {}
        except (EOFError, OSError) as exc:
            code = self.proc.wait(timeout=10)
            raise ProcessDied(_describe_exit(code)) from exc
        if not ready:  # raised out here: TimeoutError is an OSError
            raise TimeoutError
        return message

    def send(self, message: dict[str, Any]) -> None:
        """Send one request; ProcessDied if the process is gone."""
        try:
            self.conn.send(message)
        except OSError as exc:
            raise ProcessDied(_describe_exit(self.proc.wait(timeout=10))) from exc

    def call(self, message: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        """Send one request and wait for its answer."""
        self.send(message)
        return self.receive(timeout)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self, grace: float = _TERM_GRACE_S) -> None:
        """Stop the process and everything it started, ``setsid`` children included.

        SIGTERM first: the trial process kills every process below it (it adopts orphans, so
        those in sessions of their own too) and exits. One that does not within ``grace``
        seconds is SIGKILLed with its group and every process found below it. Last, what is
        left of a trial process that died on its own (its orphans went to init) is found by
        the mark in its environment.
        """
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            for pid, _ in descendants(self.proc.pid):  # found while it still holds them
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=10)
        _kill_marked(self.mark)
        self.conn.close()


def _kill_marked(mark: str) -> None:
    """SIGKILL every process whose environment carries ``mark`` (Linux ``/proc``)."""
    needle = f"{_MARK}={mark}".encode()
    try:
        entries = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return
    for entry in entries:
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                marked = needle in environ.read().split(b"\0")
        except OSError:
            continue
        if marked:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry), signal.SIGKILL)


def _describe_exit(code: int) -> str:
    if code < 0:
        name = signal.Signals(-code).name
        hint = " (out of memory?)" if code == -signal.SIGKILL else ""
        return f"trial process killed by {name}{hint}"
    return f"trial process exited with code {code}"


# Idle warm processes of this worker, by interpreter, code base, memory limit and whether it
# holds the object store's credentials: a process that imported one code base's modules never
# serves another's, its limit cannot be lifted, and one started with credentials never runs a
# trial that must not have them. A thread takes one out while it runs a trial, so a worker with
# several threads runs several. CUDA fixes its GPUs when it starts, so they are in the key too.
_PoolKey = tuple[str, tuple[str, ...], int | None, bool, str | None]
_idle: dict[_PoolKey, list[WarmProcess]] = {}
_lock = threading.Lock()


def reads_object_store(data: object) -> bool:
    """Whether a trial with this data config reads an object store itself (needs credentials).

    A job's data service stages the data (from ``s3://`` or wherever) on its own machine, and
    ``DataServiceHandle.trial_config()`` names only those local shards (``manifest.root``) and
    the dispatcher (``grpc://``): a trial reads them from its colocated worker or over gRPC
    and needs no credentials. Only a config naming another URL (``s3://``, ``gs://``, ...) does.
    Checkpoints need none either: the Dask worker restores and syncs them.

    Example:
        >>> reads_object_store({"dispatcher": "grpc://h:5050", "manifest": {"root": "/d"}})
        False
        >>> reads_object_store({"manifest": {"root": "s3://bucket/staged"}})
        True
    """
    if isinstance(data, str):
        return "://" in data and urlsplit(data).scheme.lower() not in _LOCAL_SCHEMES
    values = data.values() if isinstance(data, dict) else data
    return isinstance(values, Iterable) and any(map(reads_object_store, values))


def _interpreter(python: str) -> str:
    """The trial environment's interpreter, or this worker's own where it does not exist.

    On a remote cluster (Kubernetes) the worker image has the user's package installed and
    the environment built on the submitting machine is not there.
    """
    return python if os.path.exists(python) else sys.executable


def _checkout(
    python: str,
    code_paths: Sequence[str],
    log_path: str,
    memory_limit: int | None = None,
    object_store: bool = False,
) -> WarmProcess:
    python = _interpreter(python)
    paths = tuple(path for path in code_paths if os.path.isdir(path))
    gpus = trial_gpus()
    with _lock:
        pool = _idle.setdefault((python, paths, memory_limit, object_store, gpus), [])
        while pool:
            process = pool.pop()
            if process.alive():
                return process
    return WarmProcess(
        python, paths, log_path=log_path, memory_limit=memory_limit, object_store=object_store,
        gpus=gpus,
    )  # fmt: skip


def _checkin(process: WarmProcess) -> None:
    key = (process.python, process.code_paths, process.memory_limit, process.object_store)
    with _lock:
        _idle.setdefault((*key, process.gpus), []).append(process)


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().name)
    except (ImportError, ValueError):
        return f"pid-{os.getpid()}"


def warm_up(
    python: str,
    code_paths: Sequence[str],
    model: str,
    log_dir: str,
    slots: int = 1,
    memory_limit: int | None = None,
    object_store: bool = False,
) -> int:
    """Start ``slots`` trial processes on this worker and import the model in each.

    ``memory_limit`` and ``object_store`` must be the trials' (``TrialRequest.memory_limit``,
    :func:`reads_object_store` of ``TrialRequest.data``) for them to use these.
    """
    started = []
    for _ in range(slots):
        log_path = os.path.join(log_dir, f"worker-{os.getpid()}.log")
        process = _checkout(python, code_paths, log_path, memory_limit, object_store)
        answer = process.call({"op": "import", "model": model}, timeout=_START_TIMEOUT_S)
        if "error" in answer:
            logger.warning("warm-up import of %s failed: %s", model, answer["error"])
        started.append(process)
    for process in started:
        _checkin(process)
    return len(started)


def shutdown_processes() -> int:
    """Stop every idle trial process of this worker (the job is over)."""
    with _lock:
        processes = [p for pool in _idle.values() for p in pool]
        _idle.clear()
    for process in processes:
        process.kill()
    return len(processes)


@functools.cache
def _fresh_processes() -> bool:
    """``ULTRON_FRESH_TRIAL_PROCESS``, read once per worker process (not on every trial)."""
    return settings().fresh_trial_process


class ForcedStop(Exception):
    """Early stopping ended the trial and it did not return within its grace period."""


_clients: dict[str, Any] = {}


def _redis(url: str) -> Any:
    if url not in _clients:
        from ultron.services.redis_client import connect

        _clients[url] = connect(url)
    return _clients[url]


def _wait_for_answer(process: WarmProcess, request: TrialRequest) -> dict[str, Any]:
    """The trial's answer; with early stopping, a trial that ignores a stop is killed after
    its grace period (ForcedStop)."""
    if not request.stream_reports:
        return process.receive(request.timeout)
    deadline = None if request.timeout is None else time.monotonic() + request.timeout
    key = keys.trial_stop(request.job_id, request.trial_id)
    while True:
        left = 1.0 if deadline is None else min(1.0, max(deadline - time.monotonic(), 0.0))
        try:
            return process.receive(left)
        except TimeoutError:
            if deadline is not None and time.monotonic() >= deadline:
                raise
        raw = _redis(request.redis_url).get(key)
        if raw and time.time() - json.loads(raw)["at"] > request.grace_period:
            raise ForcedStop(json.loads(raw)["decision"])


def _last_reported(request: TrialRequest) -> float | None:
    client = _redis(request.redis_url)
    for raw in reversed(
        client.lrange(keys.trial_reports(request.job_id, request.trial_id), -50, -1)
    ):
        entry = json.loads(raw)
        if request.metric in entry:
            return float(entry[request.metric])
    return None


@on_claimed_gpus
def run_trial(request_data: dict[str, Any]) -> dict[str, Any]:
    """Run one trial attempt in a warm process; the Dask task function. With a ``GPU``
    resource it holds GPUs of this worker for its amount (:mod:`ultron.worker.devices`).

    Returns the :class:`TrialResult` as a dict (small, so nothing big stays in worker memory),
    plus its learning curve under ``curve``.
    """
    request = TrialRequest.from_dict(request_data)
    done_key = keys.trial_result(request.job_id, request.trial_id, request.attempt)
    finished = _redis(request.redis_url).get(done_key)
    if finished is not None:  # Dask ran this attempt again (its result was on a lost worker)
        logger.info(
            "trial %s attempt %d already finished; not run again", request.trial_id, request.attempt
        )
        answer: dict[str, Any] = json.loads(finished)
        return answer
    log_dir = os.path.dirname(request.log_path)
    started = time.monotonic()
    log_path = os.path.join(log_dir, f"worker-{os.getpid()}.log")
    process = _checkout(
        request.python,
        request.code_paths,
        log_path,
        request.memory_limit,
        reads_object_store(request.data),
    )
    base = {
        "trial_id": request.trial_id,
        "hyperparameters": request.hyperparameters,
        "attempts": request.attempt,
        "worker": _worker_name(),
        "log_path": request.log_path,
    }
    extra: dict[str, Any]
    restore_for(request)
    syncer = start_sync(request)
    try:
        process.send(request.to_dict())
        answer = _wait_for_answer(process, request)
    except TimeoutError:
        process.kill()
        error = f"trial ran past trial_timeout ({request.timeout} s) and was stopped"
        status, extra = TrialStatus.TIMEOUT, {"error": error}
    except ForcedStop as exc:
        process.kill()
        error = f"early stopping ({exc}) and the model did not return within the grace period"
        status, extra = TrialStatus.STOPPED, {"error": error, "score": _last_reported(request)}
    except ProcessDied as exc:
        process.kill()
        status, extra = TrialStatus.CRASHED, {"error": str(exc)}
    else:
        status = TrialStatus(answer.pop("status"))
        extra = answer
        if status is TrialStatus.OUT_OF_MEMORY:
            process.kill()  # its heap may stay near the limit: the next trial gets a fresh one
        elif _fresh_processes():
            process.kill()  # the baseline the benchmark compares against: no warm reuse
        else:
            _checkin(process)
    finally:
        if syncer is not None:
            syncer.stop(wait=False)  # the last uploads finish in the background
    extra.setdefault("duration", time.monotonic() - started)
    curve: list[dict[str, Any]] = extra.pop("curve", [])
    result = TrialResult.from_dict({**base, **extra, "status": status})
    answer = {**result.to_dict(), "curve": curve}
    _redis(request.redis_url).set(done_key, json.dumps(answer))
    return answer
