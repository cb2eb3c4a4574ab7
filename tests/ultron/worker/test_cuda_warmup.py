"""A GPU job's warm trial process starts CUDA; with no PyTorch imported or no GPU, nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ultron.worker.cuda_warmup import start_cuda


def test_a_model_without_pytorch_gets_no_pytorch_imported_for_it() -> None:
    # A fresh process: PyTorch cannot be taken out of this one and imported again (its
    # libraries register once per process).
    code = (
        "import sys\nfrom ultron.worker.cuda_warmup import start_cuda\n"
        "print(start_cuda(), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_cuda_starts_where_the_model_imported_pytorch_and_a_gpu_is_here() -> None:
    torch = pytest.importorskip("torch")
    # A context where CUDA is here (the lent GPU machine), none where it is not (no error).
    assert start_cuda() is torch.cuda.is_available()
