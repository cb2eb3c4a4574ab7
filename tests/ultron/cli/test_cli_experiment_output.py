"""``ultron experiment`` at the terminal: the same output rules as ``ultron run``.

The real command runs in a process of its own, as a user types it: Prefect's and Dask's logs
go to the experiment's log file, the terminal gets the experiment's own lines, and bad input
is one clean error before anything starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

TOY = Path(__file__).parents[2] / "data" / "toy"
ULTRON = str(Path(sys.executable).with_name("ultron"))

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ultron_home")]


def _experiment(tmp_path: Path, redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    spec = {
        "name": "quiet",
        "code": str(TOY),
        "model": "toy_model:Quadratic",
        "search_space": {"x": {"type": "uniform", "low": 0.0, "high": 4.0}},
        "num_iterations": 2,
        "storage": str(tmp_path / "runs"),
        "redis_url": redis_url,
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return subprocess.run(
        [ULTRON, "experiment", str(path), "--seeds", "1", *args],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_a_misspelled_strategy_is_one_clean_error_before_anything_runs(
    tmp_path: Path, redis_url: str
) -> None:
    done = _experiment(tmp_path, redis_url, "--strategies", "random,tpee")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stdout == "" and done.stderr.startswith("error: ")
    assert "'tpee'" in done.stderr and "Fix:" in done.stderr
    assert not (tmp_path / "runs").exists()  # nothing ran


def test_prefect_and_dask_logs_go_to_the_log_file(tmp_path: Path, redis_url: str) -> None:
    done = _experiment(tmp_path, redis_url, "--experiment-id", "quiet-exp-1")
    assert done.returncode == 0, done.stdout + done.stderr
    # The experiment's own lines: its id, log and resume option; the table and the report.
    assert done.stderr.splitlines() == [
        "experiment quiet-exp-1",
        f"log: {Path(os.environ['ULTRON_HOME']) / 'scratch' / 'quiet-exp-1' / 'experiment.log'}",
        "resume with --experiment-id quiet-exp-1",
    ]
    assert "Flow run" not in done.stdout and "report: " in done.stdout
    assert len(done.stdout.splitlines()) <= 8
    log = Path(os.environ["ULTRON_HOME"]) / "scratch" / "quiet-exp-1" / "experiment.log"
    assert "Flow run" in log.read_text()  # Prefect's logs, kept in the log file
