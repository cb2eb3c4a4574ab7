"""``ultron run`` when its output's reader goes away: a closed pipe, a closed terminal.

Each case runs the real ``ultron`` command in a session of its own, as a shell runs a job: a
pipeline into ``head``, and a pseudo-terminal that closes (the kernel hangs it up and sends
SIGHUP to the command's process group, as when an SSH session ends).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import subprocess
import sys
import termios
import time
from pathlib import Path

import psutil
import pytest
import redis
import yaml
from typer.testing import CliRunner

from ultron.cli.main import app
from ultron.redis import keys

TOY = Path(__file__).parents[2] / "data" / "toy"
ULTRON = str(Path(sys.executable).with_name("ultron"))

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ultron_home")]


def _spec(folder: Path, redis_url: str, **fields: object) -> Path:
    spec = {
        "name": "signals",
        "code": str(TOY),
        "model": "toy_model:Quadratic",
        "search_space": {"x": {"type": "uniform", "low": 0.0, "high": 4.0}},
        "num_iterations": 2,
        "storage": str(folder / "runs"),
        "redis_url": redis_url,
        **fields,
    }
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _best(folder: Path, job_id: str) -> dict[str, object]:
    best: dict[str, object] = json.loads((folder / "runs" / job_id / "best.json").read_text())
    return best


def test_a_closed_pipe_never_ends_the_job_and_a_refused_rerun_prints_only_its_error(
    tmp_path: Path, redis_url: str
) -> None:
    job_id = f"piped-{os.getpid()}"
    spec = _spec(tmp_path, redis_url)
    # `head -2` reads two lines of the header and exits: every later line meets a closed pipe.
    script = f"{ULTRON} run {spec} --job-id {job_id} | head -2; exit ${{PIPESTATUS[0]}}"
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].startswith(f"job {job_id}: 2 trials")
    best = _best(tmp_path, job_id)
    assert best["status"] == "completed" and best["error"] is None
    log = Path(os.environ["ULTRON_HOME"]) / "scratch" / job_id / "job.log"
    # The rest went on, there.
    assert f"job {job_id} completed (budget: 2 trials): 2 trials" in log.read_text()
    # `ultron report JOB`, from another folder, finds the results where the job's record says.
    assert Path.cwd() != tmp_path
    shown = CliRunner().invoke(app, ["report", job_id, "--redis-url", redis_url])
    assert shown.exit_code == 0, shown.output
    assert f"report: {tmp_path / 'runs' / job_id / 'report.html'}" in shown.output

    # A changed seed is refused: the error alone, no header and no "resume with" the very
    # command just refused; the job's results stay as they were.
    changed = _spec(tmp_path, redis_url, seed=7)
    refused = subprocess.run(
        [ULTRON, "run", str(changed), "--job-id", job_id],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stdout == ""
    assert refused.stderr.startswith("error: ") and "seed" in refused.stderr
    assert "resume with" not in refused.stderr and "Traceback" not in refused.stderr
    assert _best(tmp_path, job_id) == best


def _controlling_terminal() -> None:
    """In the child: a session of its own, whose controlling terminal is its stdin (a pty)."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def test_a_closed_terminal_cancels_the_job_as_sigterm_does(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    job_id = f"hangup-{os.getpid()}"
    calls = tmp_path / "calls.jsonl"
    spec = _spec(tmp_path, redis_url, num_iterations=40, parallelism=1)
    env = {**os.environ, "TOY_CALLS_FILE": str(calls), "COLUMNS": "120"}
    terminal, child_end = pty.openpty()
    proc = subprocess.Popen(
        [ULTRON, "run", str(spec), "--job-id", job_id],
        stdin=child_end,
        stdout=child_end,
        stderr=child_end,
        preexec_fn=_controlling_terminal,
        env=env,
        cwd=tmp_path,
    )
    os.close(child_end)
    try:
        deadline = time.monotonic() + 300  # a job's start: environment, cluster, Prefect
        shown = b""
        while not calls.exists():  # a trial has started
            assert time.monotonic() < deadline and proc.poll() is None, shown
            shown += os.read(terminal, 65536)  # the terminal's reader keeps up
        tree = [proc.pid, *(c.pid for c in psutil.Process(proc.pid).children(recursive=True))]
        os.close(terminal)  # the terminal closes: SIGHUP to the command's process group
        assert proc.wait(timeout=120) == 129  # 128 + SIGHUP (ultron.cli.exits)
    finally:
        if proc.poll() is None:
            proc.kill()
    # finalize ran: the job is cancelled (resumable), its results written, its units given
    # back, and every process it started has ended.
    assert _best(tmp_path, job_id)["status"] == "cancelled"
    assert redis_client.hget(keys.job(job_id), "status") == "cancelled"
    log = (Path(os.environ["ULTRON_HOME"]) / "scratch" / job_id / "job.log").read_text()
    log = re.sub(r"\x1b\[[0-9;]*m", "", log)  # the lines as the terminal would have shown them
    assert f"cancelling job {job_id} (by SIGHUP (its terminal closed))" in log
    assert "resume with: ultron run" in log
    procs = []
    for pid in tree[1:]:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(procs, timeout=30)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
