"""The tf.data pipeline a trial registers with the service: read, shuffle, batch, augment.

The pipeline is built in the trial process (it knows its seed and hyper-parameters) and runs in
a worker of the service (the trial process's own with ``placement: colocated``); it reaches the
worker as a serialized graph through the dispatcher, so it holds graph ops only:
``tf.py_function`` and ``Dataset.from_generator`` cannot be serialized.

Order of operations: the staged shards are shuffled, read a few at a time, the examples go
through a shuffle buffer, are batched and decoded into a ``dict`` of column -> tensor with a
leading batch axis; then the user's ``pipeline`` function (if any) adds augmentation to those
batches; then it is prefetched. Seeds come from the trial's seed and the epoch, so the same
trial gets the same order every time and another trial its own.

One dataset covers many epochs of a trial (the trial registers it with the service once):
its elements are ``(epoch, batch)``, each epoch's seeds are looked up in a table computed
here, and the next epoch is opened while the current one drains.

Example:
    >>> epoch_seed(7, 0) == epoch_seed(7, 0), epoch_seed(7, 0) == epoch_seed(7, 1)
    (True, False)
"""

from __future__ import annotations

import hashlib
import importlib
import os
from collections.abc import Callable
from typing import Any

__all__ = [
    "batches_per_epoch",
    "build_dataset",
    "epoch_length",
    "epoch_seed",
    "import_tensorflow",
    "load_function",
]

_INTERLEAVE = 4


def import_tensorflow() -> Any:
    """TensorFlow, imported on first use, with its C++ logging quieted."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise ImportError(
            "the data service needs TensorFlow: pip install 'ultron-automl[tf]'"
        ) from exc
    return tf


def epoch_seed(seed: int, epoch: int) -> int:
    """A 63-bit seed for one epoch of one trial, stable across runs and machines."""
    digest = hashlib.sha256(f"ultron-data|{int(seed)}|{int(epoch)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def load_function(path: str) -> Callable[..., Any]:
    """The function ``module:name`` names (the user's pipeline function)."""
    module_name, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ImportError(
            f"data.pipeline is {path!r}; it cannot be imported ({exc}). "
            "Fix: name a function of your code base as module:function"
        ) from exc


def batches_per_epoch(manifest: dict[str, Any], *, batch_size: int, drop_remainder: bool) -> int:
    """How many batches one epoch of the staged data makes (before the user's pipeline)."""
    rows = int(manifest["rows"])
    return rows // batch_size if drop_remainder else -(-rows // batch_size)


def epoch_length(
    manifest: dict[str, Any],
    *,
    batch_size: int,
    drop_remainder: bool = False,
    pipeline: Callable[..., Any] | None = None,
    hyperparameters: dict[str, Any] | None = None,
) -> int | None:
    """Batches in one epoch after the user's pipeline; ``None`` when tf.data cannot tell.

    Without a pipeline it is :func:`batches_per_epoch`. A pipeline that keeps one batch per
    batch (``map``, ``zip`` with an endless dataset) keeps the count; one that filters or
    re-batches makes it unknown, and a reader then ends an epoch when the next one begins.
    """
    count = batches_per_epoch(manifest, batch_size=batch_size, drop_remainder=drop_remainder)
    if pipeline is None:
        return count
    tf = import_tensorflow()
    seed = tf.constant(0, tf.int64)
    probe = _epoch_batches(
        manifest,
        batch_size=batch_size,
        seeds=(seed, seed + 1),
        shuffle_buffer=0,
        drop_remainder=drop_remainder,
    )
    probe = pipeline(probe, hyperparameters=dict(hyperparameters or {}), seed=seed)
    known = int(probe.cardinality())
    return known if known >= 0 else None


def build_dataset(
    manifest: dict[str, Any],
    *,
    batch_size: int,
    seed: int,
    first_epoch: int = 0,
    epochs: int = 1,
    shuffle_buffer: int = 10_000,
    drop_remainder: bool = False,
    pipeline: Callable[..., Any] | None = None,
    hyperparameters: dict[str, Any] | None = None,
    sharded: bool = False,
) -> Any:
    """Epochs ``first_epoch`` to ``first_epoch + epochs - 1`` of one trial, one after the other.

    Each element is ``(epoch, batch)``: the epoch's number (an int64 scalar) and a batch, a
    ``dict`` of column -> tensor (or what the user's pipeline makes of it). Each epoch has its
    own order from :func:`epoch_seed`, so epoch ``e`` of a trial is the same whichever epoch
    the dataset starts at. With more than one epoch, the next epoch's shuffle buffer fills
    while the current epoch drains, so a reader sees no pause between epochs.

    Args:
        manifest: what :func:`ultron.datamanager.staging.stage` wrote.
        batch_size: examples per batch.
        seed: the trial's seed.
        first_epoch: the first epoch the dataset yields.
        epochs: how many epochs it yields.
        shuffle_buffer: examples in the shuffle buffer; 0 keeps the stored order.
        drop_remainder: drop a last, smaller batch.
        pipeline: the user's function ``(dataset, *, hyperparameters, seed) -> dataset``
            applied to each epoch's decoded batches; ``seed`` is the epoch's seed, an int64
            scalar tensor (hand it to ``tf.data`` and ``tf.random`` ops).
        hyperparameters: the trial's configuration, for the user's function.
        sharded: the service's workers split each epoch's shards among them (dynamic
            sharding); then ``epochs`` must be 1.
    """
    tf = import_tensorflow()
    if sharded and epochs != 1:
        raise ValueError(f"epochs is {epochs} with sharded=True; a sharded job reads 1 epoch")

    def one_epoch(epoch: Any, seed_: Any, record_seed: Any) -> Any:
        dataset = _epoch_batches(
            manifest,
            batch_size=batch_size,
            seeds=(seed_, record_seed),
            shuffle_buffer=shuffle_buffer,
            drop_remainder=drop_remainder,
            whole=not sharded,
        )
        if pipeline is not None:
            dataset = pipeline(dataset, hyperparameters=dict(hyperparameters or {}), seed=seed_)
        tag = tf.cast(epoch, tf.int64)

        def tagged(*parts: Any) -> Any:  # map unpacks a tuple element into arguments
            return tag, (parts[0] if len(parts) == 1 else parts)

        # map, not zip with a tag dataset: no second source for dynamic sharding to split
        return dataset.map(tf.autograph.experimental.do_not_convert(tagged))

    numbers = range(int(first_epoch), int(first_epoch) + int(epochs))
    if len(numbers) == 1:  # the epoch's files are the source: dynamic sharding splits them
        first = epoch_seed(seed, numbers[0])
        tensors = (tf.constant(first, tf.int64), tf.constant((first + 1) % 2**63, tf.int64))
        return one_epoch(numbers[0], *tensors).prefetch(tf.data.AUTOTUNE)
    seeds = [epoch_seed(seed, number) for number in numbers]
    table = tf.data.Dataset.from_tensor_slices(
        (
            tf.constant(list(numbers), tf.int64),
            tf.constant(seeds, tf.int64),
            tf.constant([(s + 1) % 2**63 for s in seeds], tf.int64),
        )
    )
    # One epoch at a time, each read to its end; the parallel interleave opens the next
    # input element ahead of time, so the next epoch fills its shuffle buffer while this one
    # drains (flat_map would start it only at the boundary). A cycle of two with a whole
    # epoch as block_length would buffer whole epochs in memory.
    dataset = table.interleave(
        tf.autograph.experimental.do_not_convert(one_epoch),
        cycle_length=1,
        block_length=1,
        num_parallel_calls=1,
        deterministic=True,
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


def _epoch_batches(
    manifest: dict[str, Any],
    *,
    batch_size: int,
    seeds: tuple[Any, Any],
    shuffle_buffer: int,
    drop_remainder: bool,
    whole: bool = True,
) -> Any:
    """One epoch of decoded batches: shards shuffled, records shuffled, batched, decoded."""
    tf = import_tensorflow()
    files = [os.path.join(manifest["root"], shard["file"]) for shard in manifest["shards"]]
    row_bytes = int(manifest["row_bytes"])
    dataset = tf.data.Dataset.from_tensor_slices(files)
    if shuffle_buffer > 0:
        dataset = dataset.shuffle(len(files), seed=seeds[0], reshuffle_each_iteration=False)
    dataset = dataset.interleave(
        lambda name: tf.data.FixedLengthRecordDataset(name, row_bytes),
        cycle_length=min(_INTERLEAVE, len(files)),
        block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if shuffle_buffer > 0:
        dataset = dataset.shuffle(shuffle_buffer, seed=seeds[1], reshuffle_each_iteration=False)
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    if whole:  # each worker of a dynamically sharded job reads only some of the shards
        count = batches_per_epoch(manifest, batch_size=batch_size, drop_remainder=drop_remainder)
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(count))
    decode = _decoder(manifest["columns"], row_bytes)
    return dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _decoder(columns: list[dict[str, Any]], row_bytes: int) -> Callable[[Any], dict[str, Any]]:
    """A graph function from a batch of records to a ``dict`` of column -> tensor."""
    tf = import_tensorflow()

    def decode(records: Any) -> dict[str, Any]:
        raw = tf.io.decode_raw(records, tf.uint8, fixed_length=row_bytes)
        out = {}
        for column in columns:
            part = raw[:, column["offset"] : column["offset"] + column["nbytes"]]
            dtype = tf.dtypes.as_dtype(column["dtype"])
            if dtype == tf.uint8:
                values = part
            elif dtype == tf.bool:
                values = tf.cast(part, tf.bool)
            else:
                values = tf.bitcast(tf.reshape(part, [-1, dtype.size]), dtype)
            out[column["name"]] = tf.reshape(values, [-1, *column["shape"]])
        return out

    return decode
