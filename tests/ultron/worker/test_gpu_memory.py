"""A fractional GPU's memory cap and CUDA out-of-memory, without a GPU.

The trials import the real (CPU) PyTorch: the cap is set on its import (queued for when CUDA
starts, which it never does here) and a ``torch.cuda.OutOfMemoryError`` is built and raised as
the CUDA allocator raises it. ``test_gpu_memory_cuda.py`` does the same on a real GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ultron.spec.sections import Resources
from ultron.trial_records import TrialRequest, TrialStatus
from ultron.worker.gpu_memory import is_gpu_out_of_memory
from ultron.worker.pool import shutdown_processes
from ultron.worker.runner import run_trial

pytest.importorskip("torch")

MODEL = """
import os, sys


class Cuda:
    def score(self, hp, checkpoint_path, resume):
        if hp.get("light"):  # uses no framework: none is imported for it
            return {"loss": 0.0, "pid": os.getpid(), "torch": "torch" in sys.modules}
        import torch  # here, not at the top: the cap follows a lazy import too

        from ultron.worker.gpu_memory import applied_caps

        if hp.get("oom"):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 30.00 GiB")
        return {"loss": 0.0, "pid": os.getpid(), "caps": applied_caps()}
"""


@pytest.fixture
def code_base(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / f"code-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    (folder / "gpu_memory_model.py").write_text(MODEL)
    yield folder
    shutdown_processes()


def _request(tmp_path: Path, code: Path, redis_url: str, **hp: Any) -> dict[str, Any]:
    trial_id = uuid.uuid4().hex[:8]
    return TrialRequest(
        job_id=f"gpu-memory-{uuid.uuid4().hex[:8]}",
        trial_id=trial_id,
        hyperparameters=hp,
        model="gpu_memory_model:Cuda",
        python=sys.executable,
        metric="loss",
        seed=1,
        checkpoint_path=str(tmp_path / "ckpt" / trial_id),
        log_path=str(tmp_path / "logs" / f"{trial_id}.log"),
        redis_url=redis_url,
        code_paths=(str(code),),
        gpu_memory_fraction=Resources(gpu=0.25).gpu_memory_fraction,
    ).to_dict()


def test_gpu_out_of_memory_is_told_apart_from_other_errors() -> None:
    import torch

    class ResourceExhaustedError(Exception):
        """TensorFlow's, by name (its import costs seconds; the check is by class name)."""

    assert is_gpu_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory."))
    # What torch before 1.13 raised, and what a kernel's failed allocation raises.
    assert is_gpu_out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_gpu_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert is_gpu_out_of_memory(ResourceExhaustedError("OOM when allocating tensor"))
    assert not is_gpu_out_of_memory(RuntimeError("CUDA error: device-side assert triggered"))
    assert not is_gpu_out_of_memory(ValueError("CUDA out of memory"))  # not an allocator's


@pytest.mark.slow
def test_a_cuda_out_of_memory_is_recorded_and_the_next_trial_gets_a_fresh_process(
    tmp_path: Path, code_base: Path, redis_url: str
) -> None:
    light = run_trial(_request(tmp_path, code_base, redis_url, light=True))
    assert light["status"] == TrialStatus.COMPLETED
    assert light["metrics"]["torch"] is False  # the cap imported no framework

    first = run_trial(_request(tmp_path, code_base, redis_url))
    assert first["status"] == TrialStatus.COMPLETED
    assert first["metrics"]["caps"] == {"torch": 0.25}  # resources.gpu 0.25, set on import
    assert first["metrics"]["pid"] == light["metrics"]["pid"]  # warm reuse

    over = run_trial(_request(tmp_path, code_base, redis_url, oom=True))
    assert over["status"] == TrialStatus.OUT_OF_MEMORY
    assert "resources.gpu 0.25" in over["error"] and "25% of its GPU's memory" in over["error"]
    assert "Fix: raise resources.gpu" in over["error"]
    assert "OutOfMemoryError" in over["traceback"]

    after = run_trial(_request(tmp_path, code_base, redis_url))
    assert after["status"] == TrialStatus.COMPLETED
    assert after["metrics"]["pid"] != first["metrics"]["pid"]  # the OOM's process was retired
    assert after["metrics"]["caps"] == {"torch": 0.25}


# A stand-in for TensorFlow with its config calls: the real one takes over a minute to import
# on CI's shared cores and has no GPU here; the stand-in records what the cap asks of it.
FAKE_TENSORFLOW = """
import types
calls = []
class LogicalDeviceConfiguration:
    def __init__(self, memory_limit):
        self.memory_limit = memory_limit
def _set(device, configs):
    calls.append((device, [c.memory_limit for c in configs]))
config = types.SimpleNamespace(
    list_physical_devices=lambda kind: ["/physical_device:GPU:0"] if kind == "GPU" else [],
    LogicalDeviceConfiguration=LogicalDeviceConfiguration,
    set_logical_device_configuration=_set,
)
"""

# nvidia-smi's answer for a GPU of 80 GiB, for the cap to take its share of.
FAKE_SMI = "#!/bin/sh\necho 81920\n"


def test_tensorflow_is_capped_on_import_to_its_share_of_the_gpu_memory(tmp_path: Path) -> None:
    (tmp_path / "tensorflow.py").write_text(FAKE_TENSORFLOW)
    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    # A process of its own: the cap's import hook stays in the process it is installed in.
    code = (
        "import sys\n"
        "from ultron.worker.gpu_memory import applied_caps, cap_gpu_memory\n"
        "cap_gpu_memory(0.25)\n"
        "assert 'tensorflow' not in sys.modules\n"
        "import tensorflow\n"
        "print(applied_caps(), tensorflow.calls)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "CUDA_VISIBLE_DEVICES": "0",
    }
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    caps = "{'tensorflow': 0.25} [('/physical_device:GPU:0', [20480])]"
    assert done.stdout.strip() == caps  # a quarter of 81920 MiB
