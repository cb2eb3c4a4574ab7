"""The slurm backend's worker jobs, as dask-jobqueue writes their batch scripts (no SLURM
needed: ``job_script`` only renders); the job itself runs in tests/slurm/."""

from __future__ import annotations

from pathlib import Path

import pytest

from ultron.cluster.slurm import (
    _cluster_class,
    check_slurm,
    partition_worker_specs,
    worker_job_options,
)
from ultron.errors import SpecError
from ultron.spec.job import JobSpec


def _spec(resources: dict, hopper: bool = False, **cluster: object) -> JobSpec:
    fields = {
        "name": "slurm-unit",
        "code": ".",
        "model": "m:M",
        "search_space": {"a": [1]},
        "parallelism": 3,
        "resources": resources,
        "cluster": {"type": "slurm", **cluster},
    }
    if hopper:
        fields["execution"] = {"mode": "hopper", "epochs": 2}
        fields["data"] = {"url": "/shared/corpus/", "format": "numpy"}
    return JobSpec.model_validate(fields)


def test_a_worker_job_books_one_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("dask_jobqueue", reason="needs the slurm extra (ultron-automl[slurm])")
    monkeypatch.setenv("ULTRON_HOME", str(tmp_path))
    spec = _spec(
        {"cpu": 2.5, "memory": "3Gi", "gpu": 2},
        partition="gpu",
        account="proj-7",
        walltime="02:00:00",
        python="/shared/venv/bin/python",
        job_directives=["--constraint=a100"],
    )
    cluster = _cluster_class()(target=3, **worker_job_options(spec, "ultron-unit-1"))
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    directives = [
        line.removeprefix("#SBATCH ") for line in script.splitlines() if "#SBATCH" in line
    ]
    for wanted in (
        "-J ultron-unit-1",
        "-p gpu",
        "-A proj-7",
        "-t 02:00:00",
        "--cpus-per-task=3",  # 2.5 cores, rounded up
        "--mem=3G",
        "--gres=gpu:2",
        "--constraint=a100",
    ):
        assert wanted in directives, (wanted, directives)
    command = script.strip().splitlines()[-1]
    assert command.startswith("/shared/venv/bin/python -m distributed.cli.dask_worker")
    assert "--nthreads 1" in command and "--resources GPU=2" in command
    # sbatch writes the jobs' output under ULTRON_HOME, which the nodes share
    assert f"-o {tmp_path}/slurm/ultron-unit-1/" in script


def test_defaults_without_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ULTRON_HOME", str(tmp_path))
    options = worker_job_options(_spec({"cpu": 1}), "ultron-unit-2")
    assert (options["job_cpu"], options["memory"], options["walltime"]) == (1, "2GiB", "01:00:00")
    assert options["job_extra_directives"] == [] and options["worker_extra_args"] == []
    assert options["queue"] is None and options["account"] is None  # the site's defaults


def test_no_sbatch_is_a_spec_error_before_any_compute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no sbatch on it
    with pytest.raises(SpecError) as info:
        check_slurm(_spec({"cpu": 1}))
    message = str(info.value)
    assert "cluster.type is 'slurm'" in message and "sbatch" in message and "Fix:" in message


def test_a_hopper_job_gets_one_worker_job_per_partition_holding_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("dask_jobqueue", reason="needs the slurm extra (ultron-automl[slurm])")
    monkeypatch.setenv("ULTRON_HOME", str(tmp_path))
    spec = _spec({"cpu": 1, "gpu": 1}, hopper=True, walltime="00:30:00")
    name = "ultron-hop-1"
    cluster = _cluster_class()(target=3, **worker_job_options(spec, name))
    try:
        specs = partition_worker_specs(cluster.new_spec, spec, name)
        # each job's batch script, as the cluster submits it for that worker
        scripts = {
            worker: entry["cls"](cluster.scheduler_address, name=worker, **entry["options"])
            .job_script()
            .strip()
            for worker, entry in specs.items()
        }
    finally:
        cluster.close()
    assert list(scripts) == [f"{name}-partition-{k}" for k in range(3)]
    for k, script in enumerate(scripts.values()):
        command = script.splitlines()[-1]
        assert f"--name {name}-partition-{k} " in command
        assert f"--resources GPU=1,partition-{k}=1" in command  # its partition, and its GPU
        assert "--gres=gpu:1" in script and "-t 00:30:00" in script
        assert f"-J {name}" in script  # one job name: closing the cluster sweeps them all
