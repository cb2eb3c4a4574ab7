"""The model: a small CNN trained on batches from the job's data service.

``ultron.data.batches(epoch=...)`` streams one epoch of the trial's own shuffled, augmented
batches as torch tensors; a background thread keeps a few batches ready while the step runs.
"""

from __future__ import annotations

from typing import Any

import ultron
import ultron.data
from streaming_cnn.synthetic import CLASSES, make


class Model:
    """Conv -> ReLU -> pool, twice, then a linear layer; width and learning rate are tuned."""

    def score(
        self, hyperparameters: dict[str, Any], checkpoint_path: str, resume: bool
    ) -> dict[str, float]:
        import torch
        from torch import nn

        width = int(hyperparameters.get("width", 16))
        net = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(width * 16, CLASSES),
        )
        optimizer = torch.optim.Adam(net.parameters(), lr=float(hyperparameters.get("lr", 1e-3)))
        x_valid, y_valid = (torch.from_numpy(a) for a in make(512, seed=12345))
        accuracy = 0.0
        for epoch in range(int(hyperparameters.get("epochs", 2))):
            net.train()
            with ultron.data.batches(epoch=epoch) as stream:
                for batch in stream:
                    loss = nn.functional.cross_entropy(
                        net(batch["x"].permute(0, 3, 1, 2)), batch["y"]
                    )
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            net.eval()
            with torch.no_grad():
                predicted = net(x_valid.permute(0, 3, 1, 2)).argmax(dim=1)
                accuracy = float((predicted == y_valid).float().mean())
            if not ultron.report(epoch, accuracy=accuracy, data_wait=stream.stats.wait_share):
                break
        totals = ultron.data.stats()
        return {"accuracy": accuracy, "data_wait_seconds": totals.wait_seconds}
