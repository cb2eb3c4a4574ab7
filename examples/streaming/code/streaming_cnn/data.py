"""The job's augmentation (``data.pipeline`` in job.yaml): it runs in the data service.

It gets the decoded, shuffled batches (``{"x": images, "y": labels, "id": example ids}``)
and returns them with the images augmented and the other columns as they were. It must use
graph ops only (no ``tf.py_function``): it is sent to the service as a graph and runs in the
service's workers (by default one inside each trial process). The flip probability is a
hyper-parameter.
"""

from __future__ import annotations

from typing import Any


def augment(dataset: Any, *, hyperparameters: dict[str, Any], seed: int) -> Any:
    """Per image: a random horizontal flip (with probability ``flip``) and a brightness shift."""
    import tensorflow as tf

    flip = float(hyperparameters.get("flip", 0.5))
    seeds = tf.data.Dataset.random(seed=seed).batch(2)

    def apply(batch: dict[str, Any], pair: Any) -> dict[str, Any]:
        x = batch["x"]
        draw = tf.random.stateless_uniform([tf.shape(x)[0], 1, 1, 1], seed=pair)
        x = tf.where(draw < flip, tf.reverse(x, axis=[2]), x)
        shift = tf.random.stateless_uniform(
            [tf.shape(x)[0], 1, 1, 1], seed=pair + 1, minval=-0.05, maxval=0.05
        )
        return {**batch, "x": x + shift}

    return tf.data.Dataset.zip((dataset, seeds)).map(apply, num_parallel_calls=tf.data.AUTOTUNE)
