"""The trial process's deterministic settings: set for a trial that asks, undone after it."""

from __future__ import annotations

import os

import pytest

from ultron.worker.determinism import apply_determinism

torch = pytest.importorskip("torch", reason="needs the torch extra")


def test_torch_deterministic_for_one_trial_then_undone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    assert "torch" in apply_determinism(5, enabled=True)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    first = torch.rand(3)
    apply_determinism(5, enabled=True)
    assert torch.equal(torch.rand(3), first)  # seeded from the trial's seed

    assert apply_determinism(5, enabled=False) == []  # the warm process's next trial
    assert not torch.are_deterministic_algorithms_enabled()
    assert not torch.backends.cudnn.deterministic
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
