"""A small real PyTorch model for the checkpoint benchmark: an MLP on noisy digits.

``hidden=768`` gives about 650,000 weights: 2.6 MB of weights and, with Adam's two moments,
a checkpoint of about 7.8 MB (model + optimizer), written with ``torch.save`` every epoch.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def digits_data(samples: int, *, seed: int = 0) -> tuple[Any, Any]:
    """``samples`` noisy copies of scikit-learn's 8x8 digits as float tensors (x, y)."""
    import torch
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(seed)
    index = rng.integers(0, len(x), size=samples)
    noisy = x[index] / 16.0 + rng.normal(0.0, 0.1, size=(samples, x.shape[1]))
    return torch.tensor(noisy, dtype=torch.float32), torch.tensor(y[index], dtype=torch.long)


class DigitsTrainer:
    """Trains an MLP (64 -> hidden -> hidden -> 10) with Adam, one epoch per call."""

    def __init__(self, samples: int, *, hidden: int = 768, batch: int = 128, seed: int = 0):
        import torch

        torch.manual_seed(seed)
        self.x, self.y = digits_data(samples, seed=seed)
        self.batch = batch
        self.model = torch.nn.Sequential(
            torch.nn.Linear(64, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, 10),
        )
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.generator = torch.Generator().manual_seed(seed)

    def train_epoch(self) -> float:
        """One pass over the data in shuffled batches; returns the last batch's loss."""
        import torch

        order = torch.randperm(len(self.x), generator=self.generator)
        loss = torch.tensor(0.0)
        for start in range(0, len(order), self.batch):
            rows = order[start : start + self.batch]
            self.optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(self.model(self.x[rows]), self.y[rows])
            loss.backward()
            self.optimizer.step()
        return float(loss.detach())

    def state(self, epoch: int) -> dict[str, Any]:
        """What a checkpoint holds: weights, optimizer state, epoch."""
        return {
            "epoch": epoch,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
        }

    def restore(self, state: dict[str, Any]) -> int:
        """Load a checkpoint's weights and optimizer state (what a resumed trial does); its
        epoch."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        return int(state["epoch"])
