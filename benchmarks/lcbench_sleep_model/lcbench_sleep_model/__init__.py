"""A model that trains nothing: each epoch sleeps the LCBench surrogate's (scaled) epoch time
and reports the surrogate's accuracy. As it returns (told to stop, or finished) it writes a
checkpoint; resumed, it reads it back and goes on from the next epoch.

The curves come from a table (JSON) that ``benchmarks/sim_vs_live.py`` writes before the job,
named by the ``table`` hyper-parameter: ``{"checkpoint_bytes": n, "rows": [{"config": {...},
"values": [...], "durations": [...]}, ...]}``. A checkpoint is ``n`` bytes (the size of a real
model's) and the epoch it was written after.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import ultron
from ultron.checkpoints import latest_local, mark_complete, new_checkpoint_dir

_tables: dict[str, dict[str, Any]] = {}  # path -> table, once per warm trial process


def curve(hyperparameters: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The table's row for this configuration, and the table's checkpoint size in bytes.

    Raises:
        KeyError: the configuration is not in the table.
    """
    path = str(hyperparameters["table"])
    if path not in _tables:
        _tables[path] = json.loads(Path(path).read_text())
    table = _tables[path]
    for row in table["rows"]:
        if all(
            math.isclose(float(hyperparameters[k]), float(v), rel_tol=1e-12, abs_tol=1e-15)
            for k, v in row["config"].items()
        ):
            return row, int(table["checkpoint_bytes"])
    raise KeyError(f"configuration {hyperparameters} is not in {path}")


def save(checkpoint_path: str, epoch: int, size: int) -> Path:
    """Write the checkpoint after ``epoch``: ``size`` bytes of state and the epoch."""
    folder = new_checkpoint_dir(checkpoint_path, epoch)
    with open(folder / "state.bin", "wb") as handle:
        handle.write(bytes(size))
        handle.flush()
    (folder / "epoch.json").write_text(json.dumps({"epoch": epoch}))
    mark_complete(folder)
    return folder


def load(checkpoint_path: str) -> int:
    """Read the newest complete checkpoint back; the epoch it was written after (0: none)."""
    folder = latest_local(checkpoint_path)
    if folder is None:
        return 0
    with open(folder / "state.bin", "rb") as handle:
        while handle.read(1 << 22):
            pass
    return int(json.loads((folder / "epoch.json").read_text())["epoch"])


class Model:
    def score(self, hyperparameters: dict[str, Any], checkpoint_path: str, resume: bool) -> dict:
        row, size = curve(hyperparameters)
        values, durations = row["values"], row["durations"]
        start = load(checkpoint_path) if resume else 0
        epoch, accuracy = start, values[start - 1] if start else 0.0
        while epoch < len(values):
            time.sleep(durations[epoch])
            accuracy, epoch = values[epoch], epoch + 1
            if not ultron.report(epoch, accuracy=accuracy):
                break
        if epoch > start:  # told to stop, or finished: the checkpoint a resume (or user) reads
            save(checkpoint_path, epoch, size)
        return {"accuracy": accuracy}
