"""Bad input and failed jobs at the terminal: one clean error, no traceback, nothing outside.

Each case runs the real ``ultron`` command in a process of its own, as a user types it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).parents[3]
ULTRON = str(Path(sys.executable).with_name("ultron"))
TOY = REPO / "tests" / "data" / "toy"


def _spec(folder: Path, **fields: object) -> Path:
    spec = {
        "name": "clean",
        "code": str(TOY),
        "model": "toy_model:Quadratic",
        "search_space": {"x": {"type": "uniform", "low": 0.0, "high": 4.0}},
        "num_iterations": 2,
        "storage": str(folder / "runs"),
        **fields,
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _ultron(*args: str, home: Path, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["ULTRON_HOME"] = str(home)
    return subprocess.run(
        [ULTRON, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout
    )


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")} if folder.exists() else set()


@pytest.mark.parametrize(
    "job_id",
    ["../escape", "../../outside/checkpoints", "a/b", "/tmp/abs", "", "x" * 300, "..", "a b"],
)
def test_unsafe_job_ids_are_refused_before_anything_is_written(tmp_path: Path, job_id: str) -> None:
    outside = tmp_path / "outside" / "checkpoints"
    outside.mkdir(parents=True)
    (outside / "keep.txt").write_text("not the job's")
    spec = _spec(tmp_path / "work")
    home = tmp_path / "home"
    before = _files(tmp_path)

    done = _ultron("run", str(spec), "--job-id", job_id, home=home, cwd=spec.parent)

    assert done.returncode == 2, done.stdout + done.stderr
    assert "job_id" in done.stderr and "Fix:" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert (outside / "keep.txt").read_text() == "not the job's"
    assert _files(tmp_path) == before  # no home, no storage, no log: nothing written


def test_a_wrong_redis_url_fails_at_once_naming_the_field(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"redis://:hunter2@127.0.0.1:{port}/0"
    spec = _spec(tmp_path, redis_url=url)

    done = _ultron("run", str(spec), home=tmp_path / "home", cwd=tmp_path, timeout=30)

    assert done.returncode == 3  # a service unreachable (ultron.cli.exits)
    assert "redis_url" in done.stderr and f"127.0.0.1:{port}" in done.stderr
    assert "hunter2" not in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_a_script_without_a_main_guard_is_told_what_to_add(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    script = tmp_path / "tune.py"
    script.write_text(f"import ultron\n\nresult = ultron.run({str(spec)!r})\nprint(result)\n")
    env = {**os.environ, "ULTRON_HOME": str(tmp_path / "home")}
    env.pop("ULTRON_DASK_ADDRESS", None)

    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )

    assert done.returncode != 0
    assert 'if __name__ == "__main__":' in done.stderr
    assert f"{script}, line 3" in done.stderr
    assert "Nanny" not in done.stderr  # refused before any worker was started


@pytest.mark.slow
def test_a_failed_job_prints_one_error_with_its_results_and_log(tmp_path: Path) -> None:
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "setup.py").write_text(
        "from setuptools import setup\nraise RuntimeError('this setup.py is broken')\n"
    )
    (code / "pkg" / "__init__.py").write_text(
        "class Model:\n    def score(self, hyperparameters, checkpoint_path, resume):\n"
        "        return 1.0\n"
    )
    spec = _spec(tmp_path, code=str(code), model="pkg:Model")
    home = tmp_path / "home"

    done = _ultron("run", str(spec), "--job-id", "broken-1", home=home, cwd=tmp_path, timeout=300)

    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "RuntimeError: this setup.py is broken" in errors[0]
    log = home / "scratch" / "broken-1" / "job.log"
    assert f"results: {tmp_path / 'runs' / 'broken-1'}" in done.stderr
    assert f"log: {log}" in done.stderr
    assert "Traceback" in log.read_text()  # Prefect's traceback is kept, in the log file
    assert len(done.stderr.splitlines()) <= 6
