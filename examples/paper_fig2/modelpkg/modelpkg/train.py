"""``modelpkg.train.Model``: the class the paper's Fig. 2 spec names.

PCA down to ``pca_components`` features (the digits have 64), then an MLP of ``num_layers``
hidden layers trained with ``optimizer`` at learning rate ``lr``; returns validation accuracy.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA
from sklearn.model_selection import train_test_split
from torch import nn

import ultron

torch.set_num_threads(1)

OPTIMIZERS = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD, "rmsprop": torch.optim.RMSprop}


class Model:
    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> dict:
        hp = hyperparameters
        x, y = load_digits(return_X_y=True)
        x_tr, x_va, y_tr, y_va = train_test_split(x / 16.0, y, test_size=0.25, random_state=0)
        pca = PCA(n_components=int(hp["pca_components"]), random_state=0).fit(x_tr)
        x_tr = torch.from_numpy(pca.transform(x_tr).astype(np.float32))
        x_va = torch.from_numpy(pca.transform(x_va).astype(np.float32))
        y_tr, y_va = torch.from_numpy(y_tr), torch.from_numpy(y_va)
        layers: list[nn.Module] = []
        width = x_tr.shape[1]
        for _ in range(int(hp["num_layers"])):
            layers += [nn.Linear(width, 64), nn.ReLU()]
            width = 64
        net = nn.Sequential(*layers, nn.Linear(width, 10))
        optimizer = OPTIMIZERS[hp["optimizer"]](net.parameters(), lr=float(hp["lr"]))
        accuracy = 0.0
        for epoch in range(10):
            for i in range(0, len(x_tr), 64):
                optimizer.zero_grad()
                nn.functional.cross_entropy(net(x_tr[i : i + 64]), y_tr[i : i + 64]).backward()
                optimizer.step()
            with torch.no_grad():
                accuracy = (net(x_va).argmax(1) == y_va).float().mean().item()
            ultron.report(epoch, accuracy=accuracy)
        return {"score": accuracy}
