"""A local job asking for more GPU slots than this machine has: refused at the terminal before
any compute, naming the field, the value, the rule and the fixes; no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ULTRON = str(Path(sys.executable).with_name("ultron"))
TOY = Path(__file__).parents[3] / "tests" / "data" / "toy"


def test_more_gpu_slots_than_the_machine_has_are_refused_before_any_compute(
    tmp_path: Path,
) -> None:
    spec = {
        "name": "gpus",
        "code": str(TOY),
        "model": "toy_model:Quadratic",
        "search_space": {"x": {"type": "uniform", "low": 0.0, "high": 4.0}},
        "num_iterations": 4,
        "parallelism": 4,
        "resources": {"gpu": 0.5},  # four trials of half a GPU: two GPUs' worth
        "storage": str(tmp_path / "runs"),
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(spec))
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "ULTRON_DASK_ADDRESS")}
    env.update(ULTRON_HOME=str(tmp_path / "home"), ULTRON_GPUS="1")

    done = subprocess.run(
        [ULTRON, "run", "job.yaml"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )

    assert done.returncode == 2, done.stdout + done.stderr
    assert "resources.gpu is 0.5" in done.stderr
    assert "parallelism 4 x gpu 0.5 needs 4 GPU slots" in done.stderr
    assert "1 GPU(s) (ULTRON_GPUS=1), room for 2" in done.stderr
    assert "Fix: lower parallelism to 2; or share the GPUs: gpu: 0.25" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr and "Nanny" not in done.stderr
    assert not (tmp_path / "runs").exists()  # nothing ran, nothing was written
