"""A GPU job's warm trial process starts CUDA; with no PyTorch imported or no GPU, nothing."""

from __future__ import annotations

import sys

import pytest

from ultron.worker.cuda_warmup import start_cuda


def test_start_cuda_needs_the_models_pytorch_and_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert start_cuda() is False  # the model did not import PyTorch: it is not imported for it
    assert "torch" not in sys.modules
    torch = pytest.importorskip("torch")
    # A context where CUDA is here (the lent GPU machine), none where it is not (no error).
    assert start_cuda() is torch.cuda.is_available()
