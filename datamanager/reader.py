"""A trial's reader of the data service: one service job for all of the trial's epochs.

:mod:`ultron.data` hands each epoch's :class:`~ultron.data.BatchStream` a reader from here.
A reader registers the trial's pipeline with the service once and keeps one iterator over
all epochs; a background thread reads ``(epoch, batch)`` elements into a bounded queue (the
paper's training batch queue) and keeps reading across the end of an epoch, so the next
epoch's first batches wait in the queue while the training loop validates. Between epochs the
reader waits here (:func:`checkin`) until the trial asks for the next epoch (:func:`checkout`);
asking for another epoch, another seed or other settings starts a new reader.

With ``placement: colocated`` (the default) a reader holds this process's worker of the job's
service (:mod:`ultron.datamanager.colocated`) while it reads, and reads only from it.

Importing this module loads neither TensorFlow nor PyTorch.

Example:
    >>> checkout("no such trial", 0) is None
    True
"""

from __future__ import annotations

import atexit
import queue
import threading
from typing import Any

import numpy as np

from ultron.datamanager import colocated
from ultron.datamanager.streaming import EPOCH_END

__all__ = ["END", "EPOCH_END", "EpochReader", "checkin", "checkout", "close_idle"]


class _End:
    """The end of a reader's dataset, or of a stream's epoch."""


END = _End()


_MAX_IDLE_READERS = 2  # readers kept between epochs (one per trial; two trials may share a process)
_EPOCHS_PER_JOB = 1024  # epochs one service job covers; a trial that reads more starts another
_lock = threading.Lock()
_idle: dict[str, EpochReader] = {}
_generation = [0]  # close_idle() bumps it: readers of an older generation are not kept


class EpochReader:
    """One trial's batches, epoch after epoch, from one service job, read ahead by a thread.

    The trial registers its pipeline once (not once per epoch) and keeps one iterator: each
    element is ``(epoch, batch)``; a :class:`ultron.data.BatchStream` takes the batches of
    its epoch and ends after the epoch's known number of batches, or when the next epoch's
    first batch comes. The thread keeps reading across the epoch boundary, so the next epoch's first
    batches are ready when the training loop asks for them.
    """

    def __init__(
        self,
        config: dict[str, Any],
        *,
        key: str,
        first_epoch: int,
        framework: str,
        seed: int,
        hyperparameters: dict[str, Any] | None,
        batch_size: int | None,
    ) -> None:
        from ultron.datamanager.pipeline import load_function

        self.key = key
        self.service = colocated.service_key(config)
        self.generation = _generation[0]
        self.next_epoch = first_epoch
        # With dynamic sharding several workers would interleave epochs: one job per epoch,
        # which ends with the epoch (how many batches the workers make is not known ahead).
        sharded = config.get("sharding", "off") != "off"
        epochs = 1 if sharded else _EPOCHS_PER_JOB
        self.last_epoch = first_epoch + epochs - 1
        pipeline = load_function(config["pipeline"]) if config.get("pipeline") else None
        size = int(batch_size or config["batch_size"])
        self._worker: Any = None
        self.epoch_length: int | None = None  # not known: an epoch ends with the next's start
        self._dataset: Any
        if config.get("placement") == "stream":  # read here from the store, no service
            from ultron.datamanager import streaming

            self._convert = _stream_converter(framework)  # a streamed epoch ends with EPOCH_END
            self._dataset = streaming.epochs(
                config,
                seed=seed,
                first_epoch=first_epoch,
                last_epoch=self.last_epoch,
                batch_size=size,
                pipeline=pipeline,
                hyperparameters=hyperparameters,
            )
        else:
            self._start_service_reader(
                config, first_epoch, epochs, framework, seed, pipeline, hyperparameters, size
            )
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=int(config.get("prefetch", 4)))
        self._held: list[Any] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._fill, name="ultron-data", daemon=True)
        self.thread.start()

    def _start_service_reader(
        self,
        config: dict[str, Any],
        first_epoch: int,
        epochs: int,
        framework: str,
        seed: int,
        pipeline: Any,
        hyperparameters: dict[str, Any] | None,
        size: int,
    ) -> None:
        """Register the trial's pipeline with the job's tf.data service."""
        from ultron.datamanager.pipeline import epoch_length

        sharded = config.get("sharding", "off") != "off"
        drop = bool(config.get("drop_remainder", False))
        self.epoch_length = (
            None
            if sharded
            else epoch_length(
                config["manifest"],
                batch_size=size,
                drop_remainder=drop,
                pipeline=pipeline,
                hyperparameters=hyperparameters,
            )
        )
        self._convert = _converter(framework)
        # colocated: this process's worker, held until the thread is done with it
        self._worker = colocated.acquire(config) if _colocated(config) else None
        try:
            self._dataset = _distributed_dataset(
                config,
                first_epoch=first_epoch,
                epochs=epochs,
                seed=seed,
                pipeline=pipeline,
                hyperparameters=hyperparameters,
                batch_size=size,
            )
        except BaseException:
            self._release()
            raise

    def continues_at(self, epoch: int) -> bool:
        """Whether the next batches this reader gives are the start of ``epoch``."""
        return (
            epoch == self.next_epoch
            and epoch <= self.last_epoch
            and self.generation == _generation[0]
            and not self._stop.is_set()
        )

    def get(self) -> Any:
        """The next ``(epoch, batch)``, an exception, or ``END``; waits for it."""
        return self._held.pop() if self._held else self._queue.get()

    def put_back(self, item: Any) -> None:
        """Keep an item taken too early (the next epoch's first batch) for the next stream."""
        self._held.append(item)

    def close(self, *, timeout: float = 10.0) -> None:
        """Stop the thread; the service ends the job once the iterator is gone."""
        self._stop.set()
        self.thread.join(timeout=timeout)

    def _fill(self) -> None:
        try:
            for epoch, element in self._dataset:
                batch = element if element is EPOCH_END else self._convert(element)
                if not self._put((int(epoch), batch)):
                    return
            self._put(END)
        except Exception as exc:  # handed to the training loop, which raises it
            self._put(exc)
        finally:
            self._release()

    def _release(self) -> None:
        if self._worker is not None:
            colocated.release(self._worker)
            self._worker = None

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False


def checkout(key: str, epoch: int) -> EpochReader | None:
    """The trial's idle reader when it continues at ``epoch``; others with that key close."""
    with _lock:
        reader = _idle.pop(key, None)
    if reader is not None and reader.continues_at(epoch):
        return reader
    if reader is not None:
        reader.close()
    return None


def checkin(reader: EpochReader) -> None:
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


def close_idle(*, service: str | None = None, timeout: float = 10.0) -> None:
    """Close the readers kept between epochs: of one service, or (``None``) all of them.

    ``set_service`` and interpreter exit close them all; a service that stops, its own.
    """
    with _lock:
        if service is None:
            _generation[0] += 1
        readers = [r for r in _idle.values() if service is None or r.service == service]
        for reader in readers:
            _idle.pop(reader.key)
    for reader in readers:
        reader.close(timeout=timeout)


# At exit the threads are daemons; a reader of a service already gone may be stuck in a read.
atexit.register(close_idle, timeout=1.0)


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
    from ultron.datamanager.pipeline import build_dataset, import_tensorflow

    tf = import_tensorflow()
    sharded = config.get("sharding", "off") != "off"
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
        sharded=sharded,
    )
    local = _colocated(config)
    compress = not local and config.get("compression", "none") != "none"  # nothing to send
    policy = tf.data.experimental.service.ShardingPolicy
    return dataset.apply(
        tf.data.experimental.service.distribute(
            processing_mode=policy.DYNAMIC if sharded else policy.OFF,
            service=config["dispatcher"],
            job_name=None,
            compression="AUTO" if compress else None,
            target_workers="LOCAL" if local else "AUTO",
        )
    )


def _colocated(config: dict[str, Any]) -> bool:
    """Whether the trial reads from its own worker (the spec's default placement)."""
    return config.get("placement", "colocated") == "colocated"


def _converter(framework: str) -> Any:
    """A function from a TF batch (a nest of tensors) to the framework's tensors."""
    if framework == "tf":
        return lambda element: element
    from ultron.datamanager.pipeline import import_tensorflow

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


def _stream_converter(framework: str) -> Any:
    """A function from a streamed batch (NumPy arrays and lists) to the framework's tensors:
    arrays of numbers become tensors; strings and lists of any length stay Python lists."""
    if framework == "numpy":
        return lambda element: element
    if framework == "tf":
        from ultron.datamanager.pipeline import import_tensorflow

        to_tensor = import_tensorflow().convert_to_tensor
    elif framework == "torch":
        try:
            import torch
        except ImportError as exc:
            raise ImportError(
                "framework='torch' needs PyTorch: pip install 'ultron-automl[torch]'"
            ) from exc
        to_tensor = torch.from_numpy
    else:
        raise ValueError(f"framework is {framework!r}; it must be torch, tf or numpy")

    def convert(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: convert(v) for key, v in value.items()}
        if isinstance(value, tuple):
            return tuple(convert(v) for v in value)
        if isinstance(value, np.ndarray) and value.dtype != object:
            return to_tensor(value)
        return value

    return convert
