"""The trial side of checkpoints (:mod:`ultron.checkpoints`): one folder per checkpoint under
the trial's ``checkpoint_path``, complete once its ``COMPLETE`` file is written, newest by
natural order; and the PyTorch helpers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ultron.worker.checkpoint_stores import write_checkpoint
from ultron.checkpoints import latest_local, mark_complete, new_checkpoint_dir


def test_local_layout(tmp_path: Path) -> None:
    for step in (9, 10):
        write_checkpoint(tmp_path, step)
    write_checkpoint(tmp_path, 11, complete=False)
    latest = latest_local(tmp_path)
    assert latest is not None and latest.name == "epoch-0010"  # natural order, 11 incomplete
    assert (tmp_path / "epoch-0011" / "weights.bin").exists()
    assert new_checkpoint_dir(tmp_path, 11).exists()  # a leftover is emptied ...
    assert list((tmp_path / "epoch-0011").iterdir()) == []
    with pytest.raises(FileExistsError, match="already complete"):  # ... a complete one kept
        new_checkpoint_dir(tmp_path, 10)
    with pytest.raises(ValueError, match="step is -1"):
        new_checkpoint_dir(tmp_path, -1)
    with pytest.raises(FileNotFoundError, match="new_checkpoint_dir"):
        mark_complete(tmp_path / "nope")


def test_torch_helpers_round_trip(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="needs the torch extra")
    from ultron.checkpoints import load_latest_torch, save_torch

    assert load_latest_torch(tmp_path) is None
    for step in (1, 2):
        save_torch({"step": step, "w": torch.full((3,), float(step))}, tmp_path, step)
    state = load_latest_torch(tmp_path)
    assert state is not None
    assert state["step"] == 2 and torch.equal(state["w"], torch.full((3,), 2.0))
