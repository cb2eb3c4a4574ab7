"""A logistic regression trained by mini-batch SGD in NumPy: the model of ``benchmarks.hopper``.

``train_epoch`` trains one pass over ``ultron.data.batches()`` from the checkpoint in
``checkpoint_path`` and saves it there: in hopper mode one sub-epoch on one partition.
``passes`` repeats each batch's step to give a sub-epoch some compute.
"""

import os

import numpy as np

import ultron.data


class Logistic:
    def train_epoch(self, hyperparameters, checkpoint_path, resume):
        path = os.path.join(checkpoint_path, "weights.npy")
        weights = np.load(path) if resume else None
        lr, passes = float(hyperparameters["lr"]), int(hyperparameters.get("passes", 1))
        loss, count = 0.0, 0
        for batch in ultron.data.batches(framework="numpy"):
            x, y = batch["x"], batch["y"]
            if weights is None:
                weights = np.zeros(x.shape[1] + 1)
            for _ in range(passes):
                p = 1.0 / (1.0 + np.exp(-(x @ weights[:-1] + weights[-1])))
                weights[:-1] -= lr * (x.T @ (p - y)) / len(y)
                weights[-1] -= lr * float(np.mean(p - y))
            loss -= float(np.sum(y * np.log(p + 1e-12) + (1 - y) * np.log(1 - p + 1e-12)))
            count += len(y)
        np.save(path, weights)
        return {"loss": loss / max(count, 1)}
