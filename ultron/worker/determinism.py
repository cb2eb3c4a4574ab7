"""Deterministic settings of the trial process, for a spec with ``deterministic: true``.

The seed of a trial (derived from the job seed and the configuration,
:func:`ultron.trial_records.trial_seed`) already seeds ``random``, numpy and torch before
``score`` runs. With ``deterministic: true`` the frameworks also give up their nondeterministic
kernels: PyTorch (``torch.use_deterministic_algorithms``, cuDNN's deterministic mode without
benchmarking, ``CUBLAS_WORKSPACE_CONFIG``) and TensorFlow (op determinism and its seeds).

Only a framework that the trial process has already imported (the model's module imports it
at its top) is set: importing TensorFlow for a model that does not use it would cost seconds and
hundreds of MB per trial process. A warm trial process serves trials of several jobs, so the
settings are undone for the next trial that does not ask for them.
"""

from __future__ import annotations

import os
import sys

__all__ = ["apply_determinism"]

_CUBLAS = "CUBLAS_WORKSPACE_CONFIG"
_applied: dict[str, object] = {}  # what this process changed, to undo it for the next trial


def apply_determinism(seed: int, *, enabled: bool) -> list[str]:
    """Make the imported frameworks deterministic for a trial (or undo it when not ``enabled``).

    Args:
        seed: the trial's seed.
        enabled: the spec's ``deterministic``.

    Returns:
        The frameworks that were set (``torch``, ``tensorflow``), for the trial's log.
    """
    if not enabled:
        _undo()
        return []
    # cuBLAS reads it when CUDA starts: in time for a trial whose process has not used CUDA yet.
    _applied.setdefault(_CUBLAS, os.environ.get(_CUBLAS))
    os.environ[_CUBLAS] = ":4096:8"
    done = []
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "use_deterministic_algorithms"):
        torch.manual_seed(seed)
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        _applied["torch"] = True
        done.append("torch")
    tf = sys.modules.get("tensorflow")
    if tf is not None and hasattr(tf, "config"):
        tf.keras.utils.set_random_seed(seed)  # Python's, numpy's and TensorFlow's seeds
        tf.config.experimental.enable_op_determinism()
        done.append("tensorflow")  # TensorFlow has no switch back: the process stays so
    return done


def _undo() -> None:
    if not _applied:
        return
    if _applied.pop("torch", None):
        torch = sys.modules["torch"]
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False
    if _CUBLAS in _applied:
        before = _applied.pop(_CUBLAS)
        if before is None:
            os.environ.pop(_CUBLAS, None)
        else:
            os.environ[_CUBLAS] = str(before)
