"""A small CNN on scikit-learn's digits (bundled, no download), one thread per trial.

The scaling benchmark (``benchmarks/scaling.py``) trains the same configurations with ultron
and with Optuna: both call :func:`train`, so a trial costs the same CPU work in every mode.
A configuration is an index into :data:`CONFIGS` (64 of them, every trial the same network
and the same number of steps, so the cost per trial does not depend on which one it is).
Training is seeded and single-threaded, and no step draws from torch's global generator after
the network's initialisation (done under a lock): a configuration gives the same accuracy in
every mode, threads included.

The data is loaded and one training step run at import: a warm trial process imports its model
before its first trial, and Optuna's worker processes before they start, so no mode's timed
trials pay sklearn's import or torch's first-call set-up.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

# One intra-op thread: P trials at once use P cores, none competes with another for them.
torch.set_num_threads(1)

_GRID = {
    "lr": (0.003, 0.01, 0.03, 0.1),
    "momentum": (0.0, 0.5, 0.9, 0.95),
    "weight_decay": (0.0, 1e-4),
    "label_smoothing": (0.0, 0.1),
}
CONFIGS: tuple[dict[str, float], ...] = tuple(
    dict(zip(_GRID, values, strict=True)) for values in itertools.product(*_GRID.values())
)
"""The 64 configurations, in a fixed order: ``CONFIGS[i]`` is configuration ``i``."""


@functools.cache
def _data() -> tuple[torch.Tensor, ...]:
    """Train and validation tensors (1,347 / 450 images of 1 x 8 x 8), loaded once a process."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    x_tr, x_va, y_tr, y_va = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    return tuple(torch.from_numpy(a) for a in (x_tr, y_tr, x_va, y_va))


_INIT = threading.Lock()  # torch's global generator initialises the weights: one trial at a time


def _cnn(seed: int) -> nn.Module:
    with _INIT:
        torch.manual_seed(seed)
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 4 * 4, 10),
        )


def train(index: int, epochs: int, report: Callable[[int, float], Any] | None = None) -> float:
    """Train configuration ``index`` for ``epochs`` epochs; the last validation accuracy.

    Args:
        index: which of :data:`CONFIGS`.
        epochs: passes over the 1,347 training images, in batches of 32.
        report: called with (epoch, accuracy) after each epoch; training stops early when it
            returns something false (ultron's early stopping), a ``None`` return goes on.
    """
    torch.set_num_threads(1)  # again: a thread pool's worker thread may not have run the import
    hp = CONFIGS[index]
    x_tr, y_tr, x_va, y_va = _data()
    net = _cnn(index)
    optimizer = torch.optim.SGD(
        net.parameters(), lr=hp["lr"], momentum=hp["momentum"], weight_decay=hp["weight_decay"]
    )
    loss_fn = nn.CrossEntropyLoss(label_smoothing=hp["label_smoothing"])
    generator = torch.Generator().manual_seed(index)
    accuracy = 0.0
    for epoch in range(epochs):
        net.train()
        order = torch.randperm(len(x_tr), generator=generator)
        for i in range(0, len(order), 32):
            batch = order[i : i + 32]
            optimizer.zero_grad()
            loss_fn(net(x_tr[batch]), y_tr[batch]).backward()
            optimizer.step()
        net.eval()
        with torch.no_grad():
            accuracy = float((net(x_va).argmax(1) == y_va).float().mean())
        if report is not None and report(epoch, accuracy) is False:
            break
    return accuracy


def _prime() -> None:
    """Load the data and run one training step, so the first trial pays neither (building the
    first optimizer imports much of ``torch._dynamo``: seconds)."""
    x_tr, y_tr, _, _ = _data()
    net = _cnn(0)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    nn.CrossEntropyLoss(label_smoothing=0.1)(net(x_tr[:32]), y_tr[:32]).backward()
    optimizer.step()
    with torch.no_grad():
        net(x_tr[:64])


_prime()


class Model:
    """The paper's model interface: ``hyperparameters`` holds ``config`` and ``epochs``."""

    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> dict:
        import ultron

        def report(epoch: int, accuracy: float) -> bool:
            return bool(ultron.report(epoch, accuracy=accuracy))

        index, epochs = int(hyperparameters["config"]), int(hyperparameters["epochs"])
        started_at = time.time()  # the benchmark's trials' span: first start to last end
        accuracy = train(index, epochs, report)
        return {"accuracy": accuracy, "started_at": started_at, "ended_at": time.time()}
