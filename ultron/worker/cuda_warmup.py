"""Starting CUDA in a warm trial process of a GPU job, before its first trial.

A GPU trial's first seconds go to importing PyTorch and creating its CUDA context (tens of
seconds on a fresh machine, with the GPU idle). A warm trial process of a GPU job imports the
model (and so PyTorch) and creates the context as it starts (:func:`ultron.worker.pool.warm_up`
asks it to), while the master is still preparing the job's first trials; the trial then finds
CUDA ready. Where the model did not import PyTorch, or there is no GPU, it does nothing: a
job of another framework, or a machine without CUDA, starts as before.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["start_cuda"]

logger = logging.getLogger(__name__)


def start_cuda() -> bool:
    """Create this process's CUDA context, when the model imported PyTorch and a GPU is here.

    Returns:
        True when a CUDA context was created; False when there is nothing to start (PyTorch
        not imported by the model, or no CUDA device).
    """
    torch = sys.modules.get("torch")  # the model's framework; never imported for it
    cuda = getattr(torch, "cuda", None)
    if torch is None or cuda is None or not cuda.is_available():
        return False
    cuda.init()
    torch.empty(0, device="cuda")  # the context comes with the first call that needs a device
    logger.info("CUDA started for %d device(s)", cuda.device_count())
    return True
