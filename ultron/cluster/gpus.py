"""GPUs of a trial: which ones this machine has, and the local cluster that packs trials on them.

:func:`visible_gpus` finds the GPUs trials may use, first of: ``ULTRON_GPUS=N`` (GPUs 0 to
N-1: tests, or a machine that should advertise fewer), ``CUDA_VISIBLE_DEVICES`` (what CUDA
lets this process see, e.g. a SLURM allocation), NVML (``nvidia-ml-py``, if installed) and
``nvidia-smi -L``; else none.

The local backend starts one single-threaded worker per trial slot, each pinned to GPUs that
exist through ``CUDA_VISIBLE_DEVICES`` and advertising a ``GPU`` resource of one trial's
amount. A trial of ``gpu: 0.25`` shares its GPU with three others (``1/gpu`` workers per
GPU, spread over the GPUs); a trial of ``gpu: 2`` gets two GPUs of its own. A job whose
``parallelism`` needs more slots than the GPUs give is refused before any compute
(:func:`check_local_gpus`): it would hold limiter units for GPUs that are not there.

Example:
    >>> gpu_slots(0.25, ["0", "1"]), gpu_slots(2, ["0", "1", "2"]), gpu_slots(1, [])
    (8, 1, 0)
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import subprocess
from typing import Any

from ultron.errors import ConfigIssue, SpecError
from ultron.settings import settings
from ultron.spec.cluster import dashboard_address
from ultron.spec.job import JobSpec

__all__ = [
    "check_local_gpus",
    "gpu_slots",
    "local_gpu_cluster",
    "local_gpu_workers",
    "pinned_gpus",
    "visible_gpus",
]


def visible_gpus() -> tuple[list[str], str]:
    """The ids of the GPUs trials may use here (values for ``CUDA_VISIBLE_DEVICES``), and
    where they were found (for messages)."""
    override = settings().gpus
    if override is not None:
        return [str(i) for i in range(override)], f"ULTRON_GPUS={override}"
    cuda = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cuda is not None:
        return _cuda_ids(cuda), f"CUDA_VISIBLE_DEVICES={cuda!r}"
    count = _nvml_count()
    if count is not None:
        return [str(i) for i in range(count)], "NVML"
    count = _smi_count()
    if count is not None:
        return [str(i) for i in range(count)], "nvidia-smi -L"
    return [], "neither NVML, CUDA_VISIBLE_DEVICES nor nvidia-smi found one"


def _cuda_ids(value: str) -> list[str]:
    """The devices ``CUDA_VISIBLE_DEVICES`` names: CUDA stops at the first invalid entry, and
    ``-1`` or an empty value hides every GPU."""
    ids: list[str] = []
    for entry in (part.strip() for part in value.split(",")):
        if not entry or entry.startswith("-"):
            break
        ids.append(entry)
    return ids


def _nvml_count() -> int | None:
    """GPUs NVML sees; None without ``nvidia-ml-py`` or a driver."""
    try:
        import pynvml  # nvidia-ml-py; optional, and Dask's own GPU diagnostics use it too
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: no usable GPU
        return None


def _smi_count() -> int | None:
    """GPUs ``nvidia-smi -L`` lists (lines ``GPU 0: ...``); None without it."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if listed.returncode != 0:
        return None
    return sum(1 for line in listed.stdout.splitlines() if line.startswith("GPU "))


def gpu_slots(amount: float, devices: list[str]) -> int:
    """How many trials of ``amount`` GPUs run at once on ``devices``: ``1/amount`` per GPU for
    a fraction, ``len(devices) // amount`` for whole GPUs."""
    if amount <= 0:
        return 0
    if amount < 1:
        return len(devices) * round(1 / amount)
    return len(devices) // int(amount)


def pinned_gpus(amount: float, devices: list[str], slot: int) -> list[str]:
    """The GPUs of local trial slot ``slot``: fractions take the GPUs in turn (no GPU idles
    while another runs two trials; at most ``1/amount`` per GPU while slots last), whole GPUs
    a block of their own.

    Example:
        >>> [pinned_gpus(0.5, ["0", "1"], slot) for slot in range(3)]
        [['0'], ['1'], ['0']]
    """
    if amount < 1:
        return [devices[slot % len(devices)]]
    per = int(amount)
    return devices[slot * per : (slot + 1) * per]


def uses_local_gpus(spec: JobSpec) -> bool:
    """Whether the job's trials ask for GPUs of this machine (the local backend, no
    ``ULTRON_DASK_ADDRESS``)."""
    return spec.resources.gpu > 0 and spec.cluster.type == "local" and not settings().dask_address


def check_local_gpus(spec: JobSpec) -> list[str]:
    """This machine's GPUs, if the job's ``parallelism`` trials of ``resources.gpu`` fit on them.

    Returns:
        The GPU ids (empty when the job runs no GPU trials here).

    Raises:
        SpecError: more slots asked for than there are; names both fields, the GPUs found and
            the fixes. Raised before any compute, so no worker fails to start.
    """
    if not uses_local_gpus(spec):
        return []
    devices, source = visible_gpus()
    amount, parallelism = spec.resources.gpu, spec.parallelism
    slots = gpu_slots(amount, devices)
    if slots >= parallelism:
        return devices
    fixes = []
    if slots:
        fixes.append(f"lower parallelism to {slots}")
    if devices:
        share = math.ceil(parallelism / len(devices))
        fixes.append(
            f"share the GPUs: gpu: {1 / share:g} runs {share} trials per GPU"
            if share > 1
            else "gpu: 1 gives each trial a GPU of its own"
        )
    fixes += [
        "run on a cluster with more GPUs (cluster: type address, kubernetes or slurm)",
        "set ULTRON_GPUS=N if this machine has N GPUs that were not found",
    ]
    rule = (
        f"parallelism {parallelism} x gpu {amount:g} needs {parallelism} GPU slots at once; "
        f"this machine has {len(devices)} GPU(s) ({source}), room for {slots}"
    )
    issue = ConfigIssue(field="resources.gpu", value=amount, rule=rule, fix="; or ".join(fixes))
    raise SpecError([issue])


def local_gpu_workers(spec: JobSpec, memory_limit: int) -> dict[str, dict[str, Any]]:
    """The options of ``parallelism`` single-threaded local workers, each pinned to GPUs that
    exist (:func:`pinned_gpus`) and advertising one trial's ``GPU`` amount.

    Raises:
        SpecError: the GPUs here have fewer slots than ``parallelism`` (:func:`check_local_gpus`).
    """
    devices = check_local_gpus(spec)
    amount = spec.resources.gpu
    return {
        f"gpu-worker-{i}": {
            "nthreads": 1,
            "memory_limit": memory_limit,
            "resources": {"GPU": amount},
            # The worker finds its GPUs in CUDA_VISIBLE_DEVICES (ultron.worker.devices): an
            # empty ULTRON_GPUS counts as unset, so the job's own override does not hide it.
            "env": {
                "CUDA_VISIBLE_DEVICES": ",".join(pinned_gpus(amount, devices, i)),
                "ULTRON_GPUS": "",
            },
        }
        for i in range(spec.parallelism)
    }


def local_gpu_cluster(spec: JobSpec, memory_limit: int) -> Any:
    """A ``SpecCluster`` of the workers of :func:`local_gpu_workers`, each under a nanny.

    Raises:
        SpecError: the GPUs here have fewer slots than ``parallelism`` (:func:`check_local_gpus`).
    """
    from distributed import Nanny, Scheduler, SpecCluster

    workers = {
        name: {"cls": Nanny, "options": options}
        for name, options in local_gpu_workers(spec, memory_limit).items()
    }
    # On loopback, as LocalCluster's: the workers are this machine's, nothing else need reach it.
    options = {"host": "127.0.0.1", "dashboard_address": dashboard_address(spec.cluster)}
    scheduler = {"cls": Scheduler, "options": options}
    return SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.WARNING)
