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

import atexit
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
    _close_idle()


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
    """The end of a reader's dataset, or of a stream's epoch."""


_END = _End()


_MAX_IDLE_READERS = 2  # readers kept between epochs (one per trial; two trials may share a process)
_EPOCHS_PER_JOB = 1024  # epochs one service job covers; a trial that reads more starts another
_lock = threading.Lock()
_idle: dict[str, _Reader] = {}
_generation = [0]  # set_service() bumps it: readers of an older generation are not kept


class _Reader:
    """One trial's batches, epoch after epoch, from one service job, read ahead by a thread.

    The trial registers its pipeline once (not once per epoch) and keeps one iterator: each
    element is ``(epoch, batch)``; a :class:`BatchStream` takes the batches of its epoch and
    ends after the epoch's known number of batches, or when the next epoch's first batch
    comes. The thread keeps reading across the epoch boundary, so the next epoch's first
    batches are ready when the training loop asks for them.
    """

    def __init__(
        self,
        config: dict[str, Any],
        *,
        key: str,
        first_epoch: int,
        framework: Framework,
        seed: int,
        hyperparameters: dict[str, Any] | None,
        batch_size: int | None,
    ) -> None:
        from datamanager.pipeline import epoch_length, load_function

        self.key = key
        self.generation = _generation[0]
        self.next_epoch = first_epoch
        # With dynamic sharding several workers would interleave epochs: one job per epoch.
        epochs = 1 if config.get("sharding", "off") != "off" else _EPOCHS_PER_JOB
        self.last_epoch = first_epoch + epochs - 1
        pipeline = load_function(config["pipeline"]) if config.get("pipeline") else None
        size = int(batch_size or config["batch_size"])
        drop = bool(config.get("drop_remainder", False))
        self.epoch_length = epoch_length(
            config["manifest"],
            batch_size=size,
            drop_remainder=drop,
            pipeline=pipeline,
            hyperparameters=hyperparameters,
        )
        self._dataset = _distributed_dataset(
            config,
            first_epoch=first_epoch,
            epochs=epochs,
            seed=seed,
            pipeline=pipeline,
            hyperparameters=hyperparameters,
            batch_size=size,
        )
        self._convert = _converter(framework)
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=int(config.get("prefetch", 4)))
        self._held: list[Any] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._fill, name="ultron-data", daemon=True)
        self.thread.start()

    def continues_at(self, epoch: int) -> bool:
        """Whether the next batches this reader gives are the start of ``epoch``."""
        return (
            epoch == self.next_epoch
            and epoch <= self.last_epoch
            and self.generation == _generation[0]
            and not self._stop.is_set()
        )

    def get(self) -> Any:
        """The next ``(epoch, batch)``, an exception, or ``_END``; waits for it."""
        return self._held.pop() if self._held else self._queue.get()

    def put_back(self, item: Any) -> None:
        """Keep an item taken too early (the next epoch's first batch) for the next stream."""
        self._held.append(item)

    def close(self) -> None:
        """Stop the thread; the service ends the job once the iterator is gone."""
        self._stop.set()
        self.thread.join(timeout=10)

    def _fill(self) -> None:
        try:
            for epoch, element in self._dataset:
                if not self._put((int(epoch), self._convert(element))):
                    return
            self._put(_END)
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


def _checkout(key: str, epoch: int) -> _Reader | None:
    """The trial's idle reader when it continues at ``epoch``; others with that key close."""
    with _lock:
        reader = _idle.pop(key, None)
    if reader is not None and reader.continues_at(epoch):
        return reader
    if reader is not None:
        reader.close()
    return None


def _checkin(reader: _Reader) -> None:
    """Keep a reader whose stream read its epoch to the end, for the trial's next epoch."""
    closing = []
    with _lock:
        if reader.generation != _generation[0]:
            closing.append(reader)
        else:
            if reader.key in _idle:
                closing.append(_idle.pop(reader.key))
            _idle[reader.key] = reader
            while len(_idle) > _MAX_IDLE_READERS:
                closing.append(_idle.pop(next(iter(_idle))))
    for old in closing:
        old.close()


def _close_idle() -> None:
    """Close the readers kept between epochs (set_service and interpreter exit call it)."""
    with _lock:
        _generation[0] += 1
        readers = list(_idle.values())
        _idle.clear()
    for reader in readers:
        reader.close()


atexit.register(_close_idle)


class BatchStream:
    """An iterator over one epoch of batches, taken from the trial's reader (a bounded queue).

    Use it as a context manager (or call :meth:`close`) when leaving the loop early. An epoch
    read to its end leaves the reader running for the next epoch; leaving early stops it.
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
        self._started = time.perf_counter()
        self.epoch = epoch
        key = json.dumps(
            [config, seed, hyperparameters, batch_size, framework], sort_keys=True, default=str
        )
        reader = _checkout(key, epoch)
        if reader is None:
            reader = _Reader(
                config,
                key=key,
                first_epoch=epoch,
                framework=framework,
                seed=seed,
                hyperparameters=hyperparameters,
                batch_size=batch_size,
            )
        self._reader = reader
        self._thread = reader.thread
        self._batches = 0
        self._waited = 0.0
        self._finished: float | None = None
        self._complete = False

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
        try:
            batch = self._next_of_epoch()
        except BaseException:
            self.close()
            raise
        finally:
            self._waited += time.perf_counter() - started
        if batch is _END:
            self._complete = True
            self.close()
            raise StopIteration
        self._batches += 1
        return batch

    def close(self) -> None:
        """Hand the reader on (epoch read to its end) or stop it (left early); idempotent."""
        if self._finished is not None:
            return
        self._finish()
        if self._complete:
            self._reader.next_epoch = self.epoch + 1
            _checkin(self._reader)
        else:
            self._reader.close()

    def __enter__(self) -> BatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next_of_epoch(self) -> Any:
        """The epoch's next batch, or ``_END`` after its last one."""
        if self._reader.epoch_length is not None and self._batches >= self._reader.epoch_length:
            return _END
        while True:
            item = self._reader.get()
            if isinstance(item, _End):
                self._reader.put_back(item)
                return _END
            if isinstance(item, BaseException):
                raise RuntimeError(f"the data service stream failed: {item}") from item
            epoch, batch = item
            if epoch == self.epoch:
                return batch
            if epoch > self.epoch:
                self._reader.put_back(item)
                return _END

    def _finish(self) -> None:
        self._finished = time.perf_counter()
        stats = self.stats
        _totals[0] += stats.batches
        _totals[1] += stats.wait_seconds
        _totals[2] += stats.elapsed_seconds
        logger.info("data stream: %s", stats)


def _distributed_dataset(
    config: dict[str, Any],
    *,
    first_epoch: int,
    epochs: int,
    seed: int,
    pipeline: Any,
    hyperparameters: dict[str, Any] | None,
    batch_size: int,
) -> Any:
    """The trial's pipeline, registered with the service; iterating it reads from the workers."""
    from datamanager.pipeline import build_dataset, import_tensorflow

    tf = import_tensorflow()
    dataset = build_dataset(
        config["manifest"],
        batch_size=batch_size,
        seed=seed,
        first_epoch=first_epoch,
        epochs=epochs,
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
