"""The trial-side client of the job's data service (the paper's Data Manager API client).

Inside ``score``, :func:`batches` streams one epoch of shuffled, augmented batches from the
job's tf.data service. A background thread reads them and fills a bounded queue (the paper's
training batch queue), so the transfer overlaps the training step; the stream measures how
long the training loop waited for data::

    import ultron.data

    class Model:
        def score(self, hyperparameters, checkpoint_path, resume):
            for epoch in range(hyperparameters["epochs"]):
                with ultron.data.batches(epoch=epoch) as stream:   # torch tensors by default
                    for batch in stream:
                        loss = step(batch["x"], batch["y"])
                print(stream.stats)            # batches, waited 0.4 s of 12.1 s (3%)

How the trial finds the service: the flow puts the job's
``DataServiceHandle.trial_config()`` into the trial request as ``data``; the trial process calls
:func:`set_service` with it, the trial's seed and its hyper-parameters before ``score`` and
with ``None`` afterwards. Outside a trial, :func:`set_service` can be called by hand, or the
``ULTRON_DATA_SERVICE`` environment variable can hold the same config as JSON.

The same seed and epoch give the same batches in the same order; another seed its own order.
Importing this module is light: TensorFlow and PyTorch load on the first :func:`batches`.

Example:
    >>> set_service(None)
    >>> stats().batches
    0
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["BatchStream", "DataStats", "batches", "service_config", "set_service", "stats"]

logger = logging.getLogger(__name__)

ENV_VAR = "ULTRON_DATA_SERVICE"
Framework = Literal["torch", "tf", "numpy"]

_config: dict[str, Any] | None = None
_seed: int | None = None
_hyperparameters: dict[str, Any] | None = None
_totals: list[float] = [0, 0.0, 0.0]  # batches, seconds waited, seconds elapsed


@dataclass(frozen=True)
class DataStats:
    """How a stream (or all streams of this trial) went.

    Attributes:
        batches: batches handed to the training loop.
        wait_seconds: time the training loop spent waiting for a batch.
        elapsed_seconds: time from the first request to the end of the stream.
    """

    batches: int
    wait_seconds: float
    elapsed_seconds: float

    @property
    def wait_share(self) -> float:
        """The share of the time the training loop waited for data (0 to 1)."""
        return self.wait_seconds / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    def __str__(self) -> str:
        return (
            f"{self.batches} batches, waited {self.wait_seconds:.2f} s of "
            f"{self.elapsed_seconds:.2f} s ({100 * self.wait_share:.0f}%)"
        )


def set_service(
    config: dict[str, Any] | None,
    *,
    seed: int | None = None,
    hyperparameters: dict[str, Any] | None = None,
) -> None:
    """Point this process at a data service (the trial process calls it around ``score``).

    Args:
        config: ``DataServiceHandle.trial_config()``, or ``None`` to forget the service.
        seed: the trial's seed; it fixes the trial's batch order.
        hyperparameters: the trial's configuration, handed to the user's pipeline function.
    """
    global _config, _seed, _hyperparameters
    _config = dict(config) if config is not None else None
    _seed = seed
    _hyperparameters = dict(hyperparameters) if hyperparameters is not None else None
    _totals[:] = [0, 0.0, 0.0]


def service_config() -> dict[str, Any] | None:
    """The service this process reads from: what :func:`set_service` set, else the env var."""
    if _config is not None:
        return _config
    raw = os.environ.get(ENV_VAR)
    return json.loads(raw) if raw else None


def stats() -> DataStats:
    """All streams since the last :func:`set_service`, added up."""
    return DataStats(int(_totals[0]), _totals[1], _totals[2])


def batches(
    *,
    epoch: int = 0,
    framework: Framework = "torch",
    seed: int | None = None,
    hyperparameters: dict[str, Any] | None = None,
    batch_size: int | None = None,
) -> BatchStream:
    """One epoch of batches from the job's data service, each a ``dict`` column -> tensor.

    Args:
        epoch: which epoch; each epoch of a trial has its own order.
        framework: ``torch`` (tensors shared with TensorFlow through DLPack, no copy),
            ``tf`` or ``numpy``.
        seed: overrides the trial's seed.
        hyperparameters: override the trial's configuration for the pipeline function.
        batch_size: overrides the spec's ``data.batch_size`` (e.g. a tuned batch size).

    Raises:
        RuntimeError: no data service is set for this process.
    """
    config = service_config()
    if config is None:
        raise RuntimeError(
            "ultron.data.batches() found no data service: the job spec has no data section, "
            f"or this is not a trial. Fix: add data: to the spec, or call "
            f"ultron.data.set_service(config) (or set {ENV_VAR})"
        )
    trial_seed = seed if seed is not None else _seed
    return BatchStream(
        config,
        epoch=epoch,
        framework=framework,
        seed=int(trial_seed if trial_seed is not None else config.get("job_seed", 0)),
        hyperparameters=hyperparameters if hyperparameters is not None else _hyperparameters,
        batch_size=batch_size,
    )


class _End:
    pass


class BatchStream:
    """An iterator over one epoch of batches, filled by a background thread into a bounded queue.

    Use it as a context manager (or call :meth:`close`) when leaving the loop early.
    """

    def __init__(
        self,
        config: dict[str, Any],
        *,
        epoch: int,
        framework: Framework,
        seed: int,
        hyperparameters: dict[str, Any] | None,
        batch_size: int | None,
    ) -> None:
        self._dataset = _distributed_dataset(
            config, epoch=epoch, seed=seed, hyperparameters=hyperparameters, batch_size=batch_size
        )
        self._convert = _converter(framework)
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=int(config.get("prefetch", 4)))
        self._stop = threading.Event()
        self._batches = 0
        self._waited = 0.0
        self._started = time.perf_counter()
        self._finished: float | None = None
        self._thread = threading.Thread(target=self._fill, name="ultron-data", daemon=True)
        self._thread.start()

    @property
    def stats(self) -> DataStats:
        """Batches so far, time waited and time elapsed."""
        end = self._finished if self._finished is not None else time.perf_counter()
        return DataStats(self._batches, self._waited, end - self._started)

    def __iter__(self) -> BatchStream:
        return self

    def __next__(self) -> Any:
        if self._finished is not None:
            raise StopIteration
        started = time.perf_counter()
        item = self._queue.get()
        self._waited += time.perf_counter() - started
        if isinstance(item, _End):
            self._finish()
            raise StopIteration
        if isinstance(item, BaseException):
            self._finish()
            raise RuntimeError(f"the data service stream failed: {item}") from item
        self._batches += 1
        return item

    def close(self) -> None:
        """Stop the background thread (leaving the epoch unfinished is fine)."""
        self._stop.set()
        self._thread.join(timeout=10)
        if self._finished is None:
            self._finish()

    def __enter__(self) -> BatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _finish(self) -> None:
        self._finished = time.perf_counter()
        stats = self.stats
        _totals[0] += stats.batches
        _totals[1] += stats.wait_seconds
        _totals[2] += stats.elapsed_seconds
        logger.info("data stream: %s", stats)

    def _fill(self) -> None:
        try:
            for element in self._dataset:
                if not self._put(self._convert(element)):
                    return
            self._put(_End())
        except Exception as exc:  # handed to the training loop, which raises it
            self._put(exc)

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False


def _distributed_dataset(
    config: dict[str, Any],
    *,
    epoch: int,
    seed: int,
    hyperparameters: dict[str, Any] | None,
    batch_size: int | None,
) -> Any:
    """The trial's pipeline, registered with the service; iterating it reads from the workers."""
    from datamanager.pipeline import build_dataset, epoch_seed, import_tensorflow, load_function

    tf = import_tensorflow()
    pipeline = load_function(config["pipeline"]) if config.get("pipeline") else None
    dataset = build_dataset(
        config["manifest"],
        batch_size=int(batch_size or config["batch_size"]),
        seed=epoch_seed(seed, epoch),
        shuffle_buffer=int(config.get("shuffle_buffer", 10_000)),
        drop_remainder=bool(config.get("drop_remainder", False)),
        pipeline=pipeline,
        hyperparameters=hyperparameters,
    )
    policy = tf.data.experimental.service.ShardingPolicy
    sharding = policy.OFF if config.get("sharding", "off") == "off" else policy.DYNAMIC
    return dataset.apply(
        tf.data.experimental.service.distribute(
            processing_mode=sharding,
            service=config["dispatcher"],
            job_name=None,
            compression=None if config.get("compression", "none") == "none" else "AUTO",
        )
    )


def _converter(framework: Framework) -> Any:
    """A function from a TF batch (a nest of tensors) to the framework's tensors."""
    if framework == "tf":
        return lambda element: element
    from datamanager.pipeline import import_tensorflow

    tf = import_tensorflow()
    if framework == "numpy":
        return lambda element: tf.nest.map_structure(lambda t: t.numpy(), element)
    if framework != "torch":
        raise ValueError(f"framework is {framework!r}; it must be torch, tf or numpy")
    try:
        import torch
    except ImportError as exc:
        raise ImportError(
            "framework='torch' needs PyTorch: pip install 'ultron-automl[torch]'"
        ) from exc
    return lambda element: tf.nest.map_structure(torch.from_dlpack, element)
