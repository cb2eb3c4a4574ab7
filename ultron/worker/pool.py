"""Warm trial processes: one per concurrent slot of a Dask worker, kept by code base.

Starting a fresh interpreter and importing the user's code for every trial would cost about as
much as a short trial, so each worker keeps warm trial processes (:mod:`ultron.worker.process`),
one per concurrent slot, and replaces one only when it crashed, was stopped or ran out of
memory. :func:`warm_up` starts and primes them before the first trial; :func:`checkout` and
:func:`checkin` lend one to a trial (:func:`ultron.worker.runner.run_trial`).

A trial process holds itself to the trial's ``memory_limit`` and, with a fractional GPU, to its
``gpu_memory_fraction`` of the GPU's memory (:mod:`ultron.worker.gpu_memory`) for its whole
life, and gets the worker's environment less the secrets it does not need
(:func:`ultron.secrets.trial_environ`): no Redis URL, and object-store credentials only for a
trial that reads an object store itself; the worker makes itself not dumpable first
(:func:`ultron.worker.isolation.hide_from_trials`), so a trial cannot read the URL from the
worker's ``/proc`` files either, and its requests carry none (the worker writes its
reports). So warm processes are kept by code base, limits and credentials. A trial that
ran out of memory (the machine's or its GPU's) retires its process
(:func:`ultron.worker.runner.run_trial`): what it leaked goes with it. Stopping one ends
everything it started, children in sessions of their own included (see :meth:`WarmProcess.kill`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from ultron.secrets import trial_environ
from ultron.worker.devices import gpu_environ, trial_gpus
from ultron.worker.isolation import descendants, hide_from_trials
from ultron.worker.threads import compute_environ

__all__ = ["ProcessDied", "WarmProcess", "checkin", "checkout", "shutdown_processes", "warm_up"]

logger = logging.getLogger(__name__)

_START_TIMEOUT_S = 120.0
_TERM_GRACE_S = 2.0  # a stopped trial process's time to end what it started, then SIGKILL
# Inherited by everything a trial process starts: finds its processes after it died (an orphan
# of a dead process belongs to init). Not ULTRON_*: it is no setting.
_MARK = "_ULTRON_TRIAL_PROCESS"


class ProcessDied(Exception):
    """The trial process ended without answering."""


class WarmProcess:
    """One long-lived trial process of one code base, and the socket to it.

    ``python -P`` keeps the folder the worker was started from off the trial's ``sys.path``;
    the code base's ``code_paths`` go first on it instead, so the user's module names are
    the user's (a ``tasks`` or ``algorithms`` package of theirs included). With
    ``memory_limit`` (bytes) the process holds itself to that much private memory, with
    ``gpu_memory_fraction`` to that share of each GPU's memory. Its
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
        gpu_memory_fraction: float | None = None,
        threads: int = 1,
    ) -> None:
        self.python = python
        self.code_paths = tuple(code_paths)
        self.memory_limit = memory_limit
        self.object_store = object_store
        self.gpus = gpus  # its CUDA_VISIBLE_DEVICES (ultron.worker.devices); None: the worker's
        self.gpu_memory_fraction = gpu_memory_fraction
        self.threads = threads
        # Its pool (_idle): what :func:`checkout` asks of a process this one can serve.
        self.key: _PoolKey = (
            python, self.code_paths, memory_limit, object_store, gpus, gpu_memory_fraction, threads
        )  # fmt: skip
        hide_from_trials()  # this worker's environment and memory hold the Redis URL
        env = compute_environ(trial_environ(os.environ, object_store=object_store), threads)
        env.update(gpu_environ(gpus))
        parent, child = socket.socketpair()
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        command = [python, "-P", "-m", "ultron.worker.process", str(child.fileno())]
        if memory_limit is not None:
            command.append(f"--memory-limit={int(memory_limit)}")
        if gpu_memory_fraction is not None:
            command.append(f"--gpu-memory-fraction={gpu_memory_fraction!r}")
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
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # SIGKILLed yet alive (a hung disk): marked below
            logger.warning("trial process %d outlived SIGKILL for 10 s", self.proc.pid)
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
# several threads runs several. CUDA fixes its GPUs when it starts, so they are in the key too,
# and so is the GPU memory cap (TensorFlow's cannot change once set), and its threads (the
# numeric libraries size their pools at import).
_PoolKey = tuple[str, tuple[str, ...], int | None, bool, str | None, float | None, int]
_idle: dict[_PoolKey, list[WarmProcess]] = {}
_lock = threading.Lock()


def _interpreter(python: str) -> str:
    """The trial environment's interpreter, or this worker's own where it does not exist.

    On a remote cluster (Kubernetes) the worker image has the user's package installed and
    the environment built on the submitting machine is not there.
    """
    return python if os.path.exists(python) else sys.executable


def checkout(
    python: str,
    code_paths: Sequence[str],
    log_path: str,
    memory_limit: int | None = None,
    object_store: bool = False,
    gpu_memory_fraction: float | None = None,
    threads: int = 1,
) -> WarmProcess:
    python = _interpreter(python)
    paths = tuple(path for path in code_paths if os.path.isdir(path))
    gpus = trial_gpus()
    key: _PoolKey = (python, paths, memory_limit, object_store, gpus, gpu_memory_fraction, threads)
    with _lock:
        pool = _idle.setdefault(key, [])
        while pool:
            process = pool.pop()
            if process.alive():
                return process
    return WarmProcess(
        python, paths, log_path=log_path, memory_limit=memory_limit, object_store=object_store,
        gpus=gpus, gpu_memory_fraction=gpu_memory_fraction, threads=threads,
    )  # fmt: skip


def checkin(process: WarmProcess) -> None:
    with _lock:
        _idle.setdefault(process.key, []).append(process)


def warm_up(
    python: str,
    code_paths: Sequence[str],
    model: str,
    log_dir: str,
    slots: int = 1,
    memory_limit: int | None = None,
    object_store: bool = False,
    gpu_memory_fraction: float | None = None,
    cuda: bool = False,
    threads: int = 1,
) -> int:
    """Start ``slots`` trial processes on this worker and import the model in each; with
    ``cuda`` (a GPU job) each also imports PyTorch and starts CUDA
    (:func:`~ultron.worker.cuda_warmup.start_cuda`; nothing without a GPU).

    ``memory_limit``, ``object_store``, ``gpu_memory_fraction`` and ``threads`` must be the
    trials' (``TrialRequest.memory_limit``, :func:`reads_object_store` of
    ``TrialRequest.data``, ``TrialRequest.gpu_memory_fraction``, ``TrialRequest.threads``)
    for them to use these.
    """
    started = []
    for _ in range(slots):
        log_path = os.path.join(log_dir, f"worker-{os.getpid()}.log")
        process = checkout(
            python, code_paths, log_path, memory_limit, object_store, gpu_memory_fraction, threads
        )
        answer = process.call(
            {"op": "import", "model": model, "cuda": cuda}, timeout=_START_TIMEOUT_S
        )
        if "error" in answer:
            logger.warning("warm-up import of %s failed: %s", model, answer["error"])
        started.append(process)
    for process in started:
        checkin(process)
    return len(started)


def shutdown_processes() -> int:
    """Stop every idle trial process of this worker (the job is over)."""
    with _lock:
        processes = [p for pool in _idle.values() for p in pool]
        _idle.clear()
    for process in processes:
        process.kill()
    return len(processes)
