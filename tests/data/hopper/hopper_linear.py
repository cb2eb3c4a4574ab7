"""A linear regression trained by plain SGD in NumPy, one ``train_epoch`` per sub-epoch.

``HOPPER_HOLD_DIR`` (tests only): the first resumed sub-epoch to claim ``hold`` there writes
its process id and the model's name into it and then waits to be killed (the test kills its
Dask worker), so a worker dies mid-sub-epoch at a known moment.
"""

import os
import time

import numpy as np

import ultron.data


def _hold(name: str) -> None:
    folder = os.environ.get("HOPPER_HOLD_DIR")
    if not folder:
        return
    try:
        fd = os.open(os.path.join(folder, "hold"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, f"{os.getpid()} {name}".encode())
    os.close(fd)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # killed long before: the test waits on the file
        time.sleep(0.05)
    raise RuntimeError("held for 120 s and never killed")


class Linear:
    def train_epoch(self, hyperparameters, checkpoint_path, resume):
        path = os.path.join(checkpoint_path, "weights.npy")
        weights = np.load(path) if resume else None
        if resume:
            _hold(str(hyperparameters.get("name", hyperparameters["lr"])))
        lr = float(hyperparameters["lr"])
        loss, count = 0.0, 0
        for batch in ultron.data.batches(framework="numpy"):
            x, y = batch["x"], batch["y"]
            if weights is None:
                weights = np.zeros(x.shape[1] + 1)
            error = x @ weights[:-1] + weights[-1] - y
            loss += float(error @ error)
            count += len(y)
            weights[:-1] -= lr * (x.T @ error) / len(y)
            weights[-1] -= lr * error.mean()
        np.save(path, weights)
        return {"loss": loss / max(count, 1)}
