"""A PyTorch MLP on scikit-learn's digits (1,797 8x8 images, bundled: no download).

``Model.score`` trains with the given hyper-parameters, checkpoints every epoch under
``checkpoint_path`` (ultron syncs complete checkpoints to the job's storage), resumes from the
last checkpoint when ``resume`` is true, reports the validation accuracy of each epoch to
Ultron, stops when told to, and returns the accuracy.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

import ultron
from ultron.checkpoints import load_latest_torch, save_torch

torch.set_num_threads(1)  # trials share the machine's cores with each other


def _data(seed: int = 0) -> tuple[torch.Tensor, ...]:
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_tr, x_va, y_tr, y_va = train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)
    return (
        torch.from_numpy(x_tr),
        torch.from_numpy(y_tr),
        torch.from_numpy(x_va),
        torch.from_numpy(y_va),
    )


def build_mlp(hidden: int, layers: int, dropout: float) -> nn.Module:
    blocks: list[nn.Module] = []
    width = 64
    for _ in range(layers):
        blocks += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
        width = hidden
    blocks.append(nn.Linear(width, 10))
    return nn.Sequential(*blocks)


class Model:
    """The model interface of the paper (Fig. 4)."""

    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> dict:
        hp = hyperparameters
        x_tr, y_tr, x_va, y_va = _data()
        net = build_mlp(int(hp["hidden"]), int(hp["layers"]), float(hp["dropout"]))
        optimizer_class = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[hp["optimizer"]]
        optimizer = optimizer_class(net.parameters(), lr=float(hp["lr"]))
        epochs = int(hp.get("epochs", 15))
        start, accuracy = 0, 0.0
        saved = load_latest_torch(checkpoint_path) if resume else None
        if saved is not None:  # a resumed trial continues after its last checkpoint
            net.load_state_dict(saved["net"])
            optimizer.load_state_dict(saved["optimizer"])
            start, accuracy = saved["epoch"] + 1, saved["accuracy"]
        loss_fn = nn.CrossEntropyLoss()
        for epoch in range(start, epochs):
            net.train()
            order = torch.randperm(len(x_tr))
            for i in range(0, len(order), 64):
                batch = order[i : i + 64]
                optimizer.zero_grad()
                loss_fn(net(x_tr[batch]), y_tr[batch]).backward()
                optimizer.step()
            net.eval()
            with torch.no_grad():
                accuracy = (net(x_va).argmax(1) == y_va).float().mean().item()
            # One folder per epoch, marked complete: ultron uploads it to the job's storage.
            state = {
                "net": net.state_dict(),
                "optimizer": optimizer.state_dict(),
                "epoch": epoch,
                "accuracy": accuracy,
            }
            save_torch(state, checkpoint_path, epoch)
            if not ultron.report(epoch, accuracy=accuracy):
                break  # early stopping asked us to stop
        return {"accuracy": accuracy}
