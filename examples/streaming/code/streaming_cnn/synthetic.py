"""Synthetic 16 x 16 colour images of 4 classes: each class has its own colour and stripe.

Made here (no download); the same function makes the training data written to the object
store and the validation data the model scores on.
"""

from __future__ import annotations

import numpy as np

CLASSES = 4
SIZE = 16


def make(rows: int, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` images (float32 in [0, 1], rows x 16 x 16 x 3) and their labels (int64)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, CLASSES, rows)
    colours = np.array([[0.8, 0.2, 0.2], [0.2, 0.8, 0.2], [0.2, 0.2, 0.8], [0.7, 0.7, 0.2]])
    x = 0.5 * colours[y][:, None, None, :] + 0.25 * rng.random((rows, SIZE, SIZE, 3))
    stripe = (np.arange(SIZE) // 4) % 2 == y[:, None] % 2
    x[:, :, :, 0] += 0.2 * stripe[:, None, :]
    return np.clip(x, 0.0, 1.0).astype(np.float32), y.astype(np.int64)
