"""``ultron run`` from a terminal: progress, leaderboard, best configuration, exit status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TOY = Path(__file__).parents[2] / "data" / "toy"

pytestmark = pytest.mark.slow


def test_ultron_run_prints_leaderboard_and_best(tmp_path: Path, redis_url: str) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"name: cli-job\ncode: {TOY}\nmodel: toy_model:Quadratic\n"
        "search_space: {x: {type: uniform, low: 0, high: 4}}\n"
        f"num_iterations: 4\nparallelism: 2\nstorage: {tmp_path / 'runs'}\n"
        f"redis_url: {redis_url}\n"
    )
    env = {**os.environ, "COLUMNS": "200"}
    out = subprocess.run(
        [sys.executable, "-m", "ultron.cli", "run", str(spec), "--job-id", "cli-job-1"],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Leaderboard (top 4 of 4 trials)" in out.stdout
    assert "best configuration" in out.stdout and "{'x': " in out.stdout
    assert (tmp_path / "runs" / "cli-job-1" / "leaderboard.csv").exists()
