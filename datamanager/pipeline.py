"""The tf.data pipeline a trial registers with the service: read, shuffle, batch, augment.

The pipeline is built in the trial process (it knows its seed and hyper-parameters) and runs in
the service's workers, so it holds graph ops only: ``tf.py_function`` and
``Dataset.from_generator`` cannot cross into the worker's process.

Order of operations: the staged shards are shuffled, read a few at a time, the examples go
through a shuffle buffer, are batched and decoded into a ``dict`` of column -> tensor with a
leading batch axis; then the user's ``pipeline`` function (if any) adds augmentation to those
batches; then it is prefetched. Seeds come from the trial's seed and the epoch, so the same
trial gets the same order every time and another trial its own.

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

__all__ = ["build_dataset", "epoch_seed", "import_tensorflow", "load_function"]

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


def build_dataset(
    manifest: dict[str, Any],
    *,
    batch_size: int,
    seed: int,
    shuffle_buffer: int = 10_000,
    drop_remainder: bool = False,
    pipeline: Callable[..., Any] | None = None,
    hyperparameters: dict[str, Any] | None = None,
) -> Any:
    """One epoch of batches as a ``tf.data.Dataset`` of ``dict`` column -> tensor.

    Args:
        manifest: what :func:`datamanager.staging.stage` wrote.
        batch_size: examples per batch.
        seed: the epoch's seed (:func:`epoch_seed`).
        shuffle_buffer: examples in the shuffle buffer; 0 keeps the stored order.
        drop_remainder: drop a last, smaller batch.
        pipeline: the user's function ``(dataset, *, hyperparameters, seed) -> dataset``
            applied to the decoded batches.
        hyperparameters: the trial's configuration, for the user's function.
    """
    tf = import_tensorflow()
    files = [os.path.join(manifest["root"], shard["file"]) for shard in manifest["shards"]]
    row_bytes = int(manifest["row_bytes"])
    dataset = tf.data.Dataset.from_tensor_slices(files)
    if shuffle_buffer > 0:
        dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=False)
    dataset = dataset.interleave(
        lambda name: tf.data.FixedLengthRecordDataset(name, row_bytes),
        cycle_length=min(_INTERLEAVE, len(files)),
        block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if shuffle_buffer > 0:
        dataset = dataset.shuffle(
            shuffle_buffer, seed=(seed + 1) % 2**63, reshuffle_each_iteration=False
        )
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    decode = _decoder(manifest["columns"], row_bytes)
    dataset = dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if pipeline is not None:
        dataset = pipeline(dataset, hyperparameters=dict(hyperparameters or {}), seed=seed)
    return dataset.prefetch(tf.data.AUTOTUNE)


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
