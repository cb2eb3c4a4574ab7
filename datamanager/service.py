"""The job's data service: a tf.data service dispatcher and its workers, and the handle to them.

The flow starts one service per job with :func:`start_data_service` and stops it in
``finalize`` with :meth:`DataServiceHandle.stop`. By default the service runs in a child
process of the job (it stages the data, starts the dispatcher and its own workers, if any, and
exits when the job closes its stdin or dies), so TensorFlow never loads into the flow's process
and the service never outlives the job (the trial processes' workers end with those processes,
which end with the job's cluster). ``in_process=True`` runs it in the calling process (tests).

Where the workers run is the spec's ``data.placement``. ``colocated`` (the default): the
service process runs the dispatcher alone and each trial process starts a worker of it on
first use (:mod:`ultron.datamanager.colocated`) and reads from that worker in process, as the paper
puts it "on CPU threads next to the training"; the batches never cross a socket.
``service``: the service process also runs ``data.workers`` workers and the trials read
from them over gRPC.

Each trial gets :meth:`DataServiceHandle.trial_config` (a small JSON-able ``dict``) in its
request; the trial process hands it to :func:`ultron.data.set_service`.

Example:
    >>> handle = DataServiceHandle(dispatcher_address="grpc://localhost:5050",
    ...                            manifest={"rows": 0}, spec=DataSpec(url="d.npz"), seed=3)
    >>> config = handle.trial_config()
    >>> config["dispatcher"], config["batch_size"], config["sharding"], config["placement"]
    ('grpc://localhost:5050', 32, 'off', 'colocated')
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ultron.datamanager import streaming
from ultron.datamanager.errors import DataServiceError
from ultron.datamanager.pipeline import import_tensorflow
from ultron.datamanager.spec import DataSpec

__all__ = ["DataServiceHandle", "LocalDataService", "service_workers", "start_data_service"]

logger = logging.getLogger(__name__)

READY_FILE = "service.json"
JOB_GC_S = 30.0  # a trial's job outlives its reader this long (the dispatcher's GC timeout)
WATCH_S = 1.0  # how often the job looks whether the service's process is alive
MAX_RESTARTS = 3
ENV_VAR = "ULTRON_DATA_SERVICE"


class LocalDataService:
    """A tf.data service dispatcher and ``workers`` workers (perhaps none) in this process.

    The dispatcher forgets a trial's job (and its workers drop the job's task, shuffle buffer
    and all) ``JOB_GC_S`` seconds after the trial's reader is gone. With a ``journal`` folder
    it is fault tolerant: it writes its state there, and a dispatcher started again on the same
    port with the same journal carries on with the same jobs (readers and workers reconnect).

    Example:
        >>> service = LocalDataService(workers=1)       # doctest: +SKIP
        >>> service.address                             # doctest: +SKIP
        'grpc://localhost:39543'
        >>> service.stop()                              # doctest: +SKIP
    """

    def __init__(
        self,
        *,
        workers: int = 1,
        host: str = "localhost",
        port: int = 0,
        journal: str | Path | None = None,
    ) -> None:
        tf = import_tensorflow()
        svc = tf.data.experimental.service
        self._dispatcher = svc.DispatchServer(
            svc.DispatcherConfig(
                port=port,
                work_dir=str(journal) if journal is not None else None,
                fault_tolerant_mode=journal is not None,
                job_gc_check_interval_ms=int(JOB_GC_S * 1000) // 2,
                job_gc_timeout_ms=int(JOB_GC_S * 1000),
            )
        )
        port_used = int(self._dispatcher.target.rsplit(":", 1)[1])
        self.address = f"grpc://{host}:{port_used}"
        self._workers = [
            svc.WorkerServer(
                svc.WorkerConfig(
                    dispatcher_address=f"localhost:{port_used}",
                    worker_address=f"{host}:%port%",
                    port=0,
                )
            )
            for _ in range(workers)
        ]

    def stop(self) -> None:
        """Stop the workers, then the dispatcher; their ports are free afterwards."""
        for worker in self._workers:
            worker.stop()
        self._workers = []
        self._dispatcher.stop()


@dataclass
class DataServiceHandle:
    """The running data service of one job: its address, the staged data, how to stop it.

    Attributes:
        dispatcher_address: ``grpc://host:port`` of the dispatcher.
        manifest: the staged data (see :mod:`ultron.datamanager.staging`).
        spec: the job's ``data`` section.
        seed: the job seed; a trial without a seed of its own uses it.
        service_id: names this service (the trials' colocated workers are keyed by it: a
            later service may get the same address).
    """

    dispatcher_address: str
    manifest: dict[str, Any]
    spec: DataSpec
    seed: int = 0
    service_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    cache_dir: str | None = None  # placement stream: where the fetched files are kept
    _child: _ServiceProcess | None = field(default=None, repr=False)
    _local: LocalDataService | None = field(default=None, repr=False)

    def trial_config(self) -> dict[str, Any]:
        """What a trial needs to read from the service; JSON-able, for the trial request."""
        return {
            "service": self.service_id,
            "dispatcher": self.dispatcher_address,
            "manifest": self.manifest,
            "batch_size": self.spec.batch_size,
            "shuffle_buffer": self.spec.shuffle_buffer,
            "drop_remainder": self.spec.drop_remainder,
            "pipeline": self.spec.pipeline,
            "prefetch": self.spec.prefetch,
            "placement": self.spec.placement,
            "sharding": self.sharding,
            "compression": self.spec.compression,
            "job_seed": self.seed,
            "format": self.spec.resolved_format(),
            "cache": {"dir": self.cache_dir, "bytes": int(self.spec.stream_cache)},
        }

    def fingerprint(self) -> str:
        """What the trials' batches depend on: the data's content and how it is batched.

        The score cache keys on it (next to the code's hash): a configuration scored on
        other data, or on other batches of it, is trained anew. Where the workers run and
        what is validated do not count; how many workers share an epoch out does.
        """
        shaping = self.spec.model_dump(
            mode="json",
            include={
                "format",
                "features",
                "batch_size",
                "drop_remainder",
                "shuffle_buffer",
                "pipeline",
                "shard_rows",
            },
        )
        text = json.dumps([self.manifest.get("sha256"), shaping, self.sharding], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def service_workers(self) -> int:
        """Workers in the service's own process: none when each trial process has its own."""
        return service_workers(self.spec)

    @property
    def sharding(self) -> str:
        """``dynamic`` when the service's workers share each epoch out, else ``off``."""
        return "dynamic" if self.service_workers > 1 else "off"

    def env(self) -> dict[str, str]:
        """The same as environment variables (``ULTRON_DATA_SERVICE``: the config as JSON)."""
        return {ENV_VAR: json.dumps(self.trial_config())}

    @property
    def running(self) -> bool:
        """Whether the service is up (its process alive, or its servers not yet stopped)."""
        if self._child is not None:
            return self._child.process.poll() is None
        return self._local is not None or self.streamed

    @property
    def streamed(self) -> bool:
        """Whether the trials read the files from the store themselves (``placement: stream``)."""
        return self.spec.placement == "stream"

    @property
    def restarts(self) -> int:
        """How often the service's process died and was started again."""
        return self._child.restarts if self._child is not None else 0

    def stop(self, *, timeout: float = 20.0) -> None:
        """Stop the dispatcher and the workers; safe to call more than once.

        This process's own worker of it (``placement: colocated``) stops too, after the idle
        readers of it; the workers of trial processes end with their processes.
        """
        from ultron.datamanager import colocated, reader

        reader.close_idle(service=self.service_id)
        colocated.stop(self.service_id)
        if self._local is not None:
            self._local.stop()
            self._local = None
        if self._child is not None:
            self._child.stop(timeout=timeout)
            self._child = None

    def __enter__(self) -> DataServiceHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def service_workers(data_spec: DataSpec) -> int:
    """How many workers the service process runs for ``data_spec`` (0 when colocated)."""
    return 0 if data_spec.placement == "colocated" else data_spec.workers


def start_data_service(
    data_spec: DataSpec,
    *,
    job_id: str,
    seed: int,
    work_dir: str | Path,
    base_dir: str | Path = ".",
    in_process: bool = False,
    startup_timeout: float = 300.0,
    cache_dir: str | Path | None = None,
) -> DataServiceHandle:
    """Stage the data and start the job's data service; returns once trials can read from it.

    With ``placement: stream`` nothing is staged or started: the handle lists the data's files,
    which each trial reads from the store itself (:mod:`ultron.datamanager.streaming`).

    Args:
        data_spec: the job's ``data`` section.
        job_id: the job.
        seed: the job seed.
        base_dir: where a relative ``data.url`` starts (the spec's folder).
        work_dir: where to stage the data and keep the service's log (the job's scratch
            folder's ``data/`` in a job).
        in_process: run the servers in this process instead of a child process.
        startup_timeout: seconds to wait for a child process to be ready.
        cache_dir: placement stream: the folder of the files the trials fetch, shared by
            the jobs of this machine (``ULTRON_HOME/data-cache``); ``None``: no cache.

    Raises:
        DataServiceError: the service did not start; its log is quoted.
    """
    if data_spec.placement == "stream":  # nothing staged and nothing to start
        manifest = streaming.listing(data_spec, base_dir=base_dir)
        logger.info("streamed data: %d files, %d bytes", len(manifest["files"]), manifest["bytes"])
        folder = str(Path(cache_dir).resolve()) if cache_dir is not None else None
        return DataServiceHandle("", manifest, data_spec, seed, cache_dir=folder)
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work / "journal", ignore_errors=True)  # an earlier run's dispatcher state
    if in_process:
        from ultron.datamanager.staging import stage

        manifest = stage(data_spec, base_dir=base_dir, out_dir=work / "staged")
        local = LocalDataService(
            workers=service_workers(data_spec),
            host=data_spec.host,
            port=data_spec.port,
            journal=work / "journal",
        )
        return DataServiceHandle(local.address, manifest, data_spec, seed, _local=local)
    config = {
        "spec": data_spec.model_dump(mode="json"),
        "base_dir": str(Path(base_dir).resolve()),
        "work_dir": str(work.resolve()),
    }
    child = _ServiceProcess(config, work=work, timeout=startup_timeout)
    info = child.info
    logger.info("data service at %s, %d examples staged", info["address"], info["rows"])
    manifest = json.loads(Path(info["manifest"]).read_text())
    return DataServiceHandle(info["address"], manifest, data_spec, seed, _child=child)


class _ServiceProcess:
    """The service's child process, started again on the same port if it dies.

    Its dispatcher journals its state (fault-tolerant mode), so a dispatcher started again
    carries on with the trials' jobs: readers keep reading from their workers meanwhile and
    reconnect, and the staged data is kept. After ``MAX_RESTARTS`` it stays down (trials
    that start then fail with a clear error).
    """

    def __init__(self, config: dict[str, Any], *, work: Path, timeout: float) -> None:
        self.config = config
        self.work = work
        self.timeout = timeout
        self.restarts = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.process, self.info = self._spawn()
        self._watcher = threading.Thread(target=self._watch, name="ultron-data-watch", daemon=True)
        self._watcher.start()

    def stop(self, *, timeout: float) -> None:
        """Stop watching, then end the process."""
        self._stopping.set()
        with self._lock:
            _end_process(self.process, timeout=timeout)
        self._watcher.join(timeout=5)

    def _watch(self) -> None:
        while not self._stopping.wait(WATCH_S):
            code = self.process.poll()
            if code is None:
                continue
            if self.restarts >= MAX_RESTARTS:
                logger.error("the data service process exited (code %s); not restarted", code)
                return
            self.restarts += 1
            port = int(self.info["address"].rsplit(":", 1)[1])
            logger.warning(
                "the data service process exited (code %s); starting it again on port %d "
                "(%d of %d)",
                code,
                port,
                self.restarts,
                MAX_RESTARTS,
            )
            self.config = {**self.config, "port": port, "restart": True}
            with self._lock:
                if self._stopping.is_set():
                    return
                try:
                    self.process, self.info = self._spawn()
                except DataServiceError as exc:
                    logger.error("%s", exc)
                    return

    def _spawn(self) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
        ready = self.work / READY_FILE
        ready.unlink(missing_ok=True)
        log_path = self.work / "service.log"
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                [  # -P: the folder the job started from must not shadow any module name
                    sys.executable,
                    "-P",
                    "-m",
                    "ultron.datamanager.server_process",
                    json.dumps(self.config),
                ],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
            )
        deadline = time.monotonic() + self.timeout
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                _end_process(process, timeout=5)
                tail = log_path.read_text(errors="replace")[-3000:]
                raise DataServiceError(f"the data service did not start (log {log_path}):\n{tail}")
            time.sleep(0.1)
        return process, json.loads(ready.read_text())


def _end_process(process: subprocess.Popen[bytes], *, timeout: float) -> None:
    """Close the child's stdin (it stops its servers and exits), then make sure it is gone."""
    try:
        if process.stdin is not None:
            process.stdin.close()
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
