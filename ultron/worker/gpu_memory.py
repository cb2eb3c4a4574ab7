"""A fractional GPU's memory cap in a trial process, and what counts as a GPU out-of-memory.

A trial of ``gpu: 0.25`` shares its GPU with three others (:mod:`ultron.worker.devices`), so
it is held to a quarter of that GPU's memory: PyTorch's
``torch.cuda.set_per_process_memory_fraction`` for each GPU the process sees, TensorFlow's
logical device ``memory_limit`` (the fraction of the GPU's total memory, in MiB). An
allocation past the cap fails in the trial that made it, not in its neighbours.

The trial process (:mod:`ultron.worker.process`) calls :func:`cap_gpu_memory` before it
imports the user's code. Neither framework is imported for it: a hook on ``sys.meta_path``
applies a framework's cap right after the model (or anything it calls) imports that framework,
so a trial that uses neither stays light. PyTorch's cap is queued to run when PyTorch sets up
CUDA (as its own deferred calls are): importing PyTorch does not start CUDA, and the cap is in
place before the first allocation. TensorFlow's must come before it sets up its GPUs, which is
at its first operation: right after its import.

:func:`is_gpu_out_of_memory` tells a GPU allocation failure (PyTorch's
``torch.cuda.OutOfMemoryError`` or the ``CUDA out of memory`` RuntimeError of older versions,
TensorFlow's ``ResourceExhaustedError``) from the user's other errors, again without importing
either framework. Such a trial is recorded ``out_of_memory`` and its process is not reused.

The fraction is ``Resources.gpu_memory_fraction`` (:mod:`ultron.spec.sections`), which the
trial request carries and the warm process is started with (:mod:`ultron.worker.pool`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = ["applied_caps", "cap_gpu_memory", "is_gpu_out_of_memory"]

# What this process capped, by framework (the fraction): for logs and tests.
_applied: dict[str, float] = {}

# Exception class names (anywhere in the exception's class hierarchy) and messages of a
# failed GPU allocation. torch.cuda.OutOfMemoryError (torch >= 1.13; torch.OutOfMemoryError
# since 2.5) is a RuntimeError; older torch raised a plain RuntimeError with the message.
_OOM_CLASSES = ("OutOfMemoryError", "ResourceExhaustedError")
_OOM_MESSAGES = ("CUDA out of memory", "CUDA error: out of memory", "OOM when allocating")


def is_gpu_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is a failed GPU allocation (PyTorch, TensorFlow), by class or message."""
    if any(cls.__name__ in _OOM_CLASSES for cls in type(exc).__mro__):
        return True
    text = str(exc) if isinstance(exc, RuntimeError) else ""
    return any(message in text for message in _OOM_MESSAGES)


def applied_caps() -> dict[str, float]:
    """The caps this process set so far: ``{"torch": 0.25}`` once PyTorch was imported."""
    return dict(_applied)


def cap_gpu_memory(fraction: float | None) -> None:
    """Hold this process to ``fraction`` of each visible GPU's memory in PyTorch and
    TensorFlow, as each is imported (now, for one already imported). Nothing for None."""
    if fraction is None:
        return
    caps: dict[str, Callable[[ModuleType], None]] = {
        "torch": lambda torch: _cap_torch(torch, fraction),
        "tensorflow": lambda tf: _cap_tensorflow(tf, fraction),
    }
    for name in [name for name in caps if name in sys.modules]:
        caps.pop(name)(sys.modules[name])
    if caps:
        sys.meta_path.insert(0, _AfterImport(caps))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs an action on a top-level module once it is imported, whichever finder finds it."""

    def __init__(self, actions: dict[str, Callable[[ModuleType], None]]) -> None:
        self.actions = actions

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        action = self.actions.get(fullname)
        if action is None:
            return None
        spec = self._real_spec(fullname, path, target)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        del self.actions[fullname]
        run = loader.exec_module

        def exec_then_act(module: ModuleType) -> None:
            run(module)
            action(module)

        # The loader is this module's own (a finder makes one per spec): wrapping its method
        # keeps the module's __loader__ the real one, for its resources.
        loader.exec_module = exec_then_act
        return spec

    def _real_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None
    ) -> importlib.machinery.ModuleSpec | None:
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target)
            if spec is not None:
                return spec
        return None


def _cap_torch(torch: Any, fraction: float) -> None:
    """PyTorch: the fraction on every GPU this process sees, set as CUDA starts up."""

    def apply() -> None:
        for device in range(torch.cuda.device_count()):
            torch.cuda.set_per_process_memory_fraction(fraction, device)

    # torch.cuda._lazy_call is how PyTorch defers its own CUDA calls (seeds, for one) until
    # CUDA starts; without it (a future PyTorch) the cap is set now, which starts CUDA.
    lazy = getattr(torch.cuda, "_lazy_call", None)
    if lazy is not None:
        lazy(apply)
    elif torch.cuda.is_available():
        apply()
    _applied["torch"] = fraction


def _cap_tensorflow(tf: Any, fraction: float) -> None:
    """TensorFlow: one logical device per GPU, limited to the fraction of its memory."""
    gpus = tf.config.list_physical_devices("GPU")
    totals = _total_memory_mib(len(gpus))
    for gpu, total in zip(gpus, totals, strict=False):
        config = tf.config.LogicalDeviceConfiguration(memory_limit=int(total * fraction))
        try:
            tf.config.set_logical_device_configuration(gpu, [config])
        except RuntimeError as exc:  # its GPUs were set up already: too late to cap
            print(f"ultron: could not cap TensorFlow's GPU memory: {exc}", file=sys.stderr)
            return
    _applied["tensorflow"] = fraction


def _total_memory_mib(count: int) -> list[int]:
    """Total memory (MiB) of the first ``count`` GPUs this process sees, in CUDA's order
    (``nvidia-smi``, by the ids in ``CUDA_VISIBLE_DEVICES``); fewer where it cannot say."""
    smi = shutil.which("nvidia-smi")
    if smi is None or count == 0:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [i.strip() for i in visible.split(",")] if visible else [str(i) for i in range(count)]
    totals = []
    for device in ids[:count]:
        query = [smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", device]
        try:
            out = subprocess.run(query, capture_output=True, text=True, timeout=20, check=True)
            totals.append(int(float(out.stdout.split()[0])))
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            break
    return totals
