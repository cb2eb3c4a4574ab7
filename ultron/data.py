"""The trial-side client of the job's data service (the paper's Data Manager API client).

Inside ``score``, :func:`batches` streams one epoch of shuffled, augmented batches from the
job's tf.data service. A background thread reads them and fills a bounded queue (the paper's
training batch queue), so the transfer overlaps the training step; the stream measures how
long the training loop waited for data. A trial registers its pipeline with the service once
for all its epochs: when an epoch is read to its end, the same reader goes on with the next
epoch (its shuffle buffer fills while the current epoch drains), and the next
``batches(epoch=e + 1)`` takes over from it without starting anything::

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

The same seed and epoch give the same batches in the same order, whether the trial reads the
epochs one after the other or starts at that epoch (a resumed trial); another seed its own
order. Asking for another epoch than the next one, or leaving an epoch early, stops the reader;
the next :func:`batches` starts a new one at the epoch it asks for.
Importing this module is light: TensorFlow and PyTorch load on the first :func:`batches`.

Example:
    >>> set_service(None)
    >>> stats().batches
    0
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ultron.datamanager import reader as readers
from ultron.datamanager.reader import END, EpochReader
from ultron.datamanager.streaming import EPOCH_END

if TYPE_CHECKING:
    from ultron.datamanager.partitions import PartitionStream

__all__ = ["BatchStream", "DataStats", "batches", "service_config", "set_service", "stats"]

logger = logging.getLogger(__name__)

ENV_VAR = "ULTRON_DATA_SERVICE"  # read through ultron.settings (its data_service field)
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
    readers.close_idle()


def service_config() -> dict[str, Any] | None:
    """The service this process reads from: what :func:`set_service` set, else the env var.

    Raises:
        ultron.errors.EnvironmentVariableError: the variable is not a JSON object.
    """
    if _config is not None:
        return _config
    from ultron.settings import settings  # here: importing ultron.data stays light

    shared = settings().data_service  # the settings are shared: the caller gets its own copy
    return None if shared is None else dict(shared)


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
) -> BatchStream | PartitionStream:
    """One epoch of batches from the job's data service, each a ``dict`` column -> tensor.

    In hopper mode (:mod:`ultron.master.hopper`) it is one pass over the partition the current
    sub-epoch trains on, in the partition's fixed order.

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
    if "partition_path" in config:  # hopper mode: this sub-epoch's partition, on local disk
        from ultron.datamanager.partitions import PartitionStream

        size = batch_size or int(config.get("batch_size", 32))
        return PartitionStream(config["partition_path"], batch_size=size, framework=framework)
    trial_seed = seed if seed is not None else _seed
    return BatchStream(
        config,
        epoch=epoch,
        framework=framework,
        seed=int(trial_seed if trial_seed is not None else config.get("job_seed", 0)),
        hyperparameters=hyperparameters if hyperparameters is not None else _hyperparameters,
        batch_size=batch_size,
    )


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
        reader = readers.checkout(key, epoch)
        if reader is None:
            reader = EpochReader(
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
        if batch is END:
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
            readers.checkin(self._reader)
        else:
            self._reader.close()

    def __enter__(self) -> BatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next_of_epoch(self) -> Any:
        """The epoch's next batch, or ``END`` after its last one."""
        if self._reader.epoch_length is not None and self._batches >= self._reader.epoch_length:
            return END
        while True:
            item = self._reader.get()
            if item is END:
                self._reader.put_back(item)
                return END
            if isinstance(item, BaseException):
                raise RuntimeError(f"the data service stream failed: {item}") from item
            epoch, batch = item
            if epoch == self.epoch:
                return END if batch is EPOCH_END else batch
            if epoch > self.epoch:
                self._reader.put_back(item)
                return END

    def _finish(self) -> None:
        self._finished = time.perf_counter()
        stats = self.stats
        _totals[0] += stats.batches
        _totals[1] += stats.wait_seconds
        _totals[2] += stats.elapsed_seconds
        logger.info("data stream: %s", stats)
