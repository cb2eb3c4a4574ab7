"""The warm runner (ultron.runner, ultron.runner_server): real commands, real runners.

A job is forked from the runner (the command's process runs nothing of it), its workers from a
fork of the job; the next command with the same environment reuses the runner, another
environment gets its own; the job dies with its command; a runner whose imported code or
configuration changed on disk refuses the job, which runs in the command's process, and the
next command starts a fresh runner. Each test has its own ``XDG_RUNTIME_DIR``, so its runners
are its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

TOY = Path(__file__).parents[1] / "data" / "toy"
ULTRON = str(Path(sys.executable).with_name("ultron"))
SERVE = "from ultron.runner_server import serve"

pytestmark = pytest.mark.slow


@pytest.fixture
def runtime() -> Iterator[Path]:
    """A short private runtime folder (a socket path holds at most 108 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="ur-"))
    yield folder
    for proc in _runners(folder):  # not left for the idle timeout
        with contextlib.suppress(psutil.Error):
            proc.kill()


def _runners(runtime: Path) -> list[psutil.Process]:
    """The runners of ``runtime`` (not their jobs and the jobs' forks: same command line)."""
    found = {}
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            command = " ".join(proc.info["cmdline"] or [])
            if SERVE in command and proc.environ().get("XDG_RUNTIME_DIR") == str(runtime):
                found[proc.pid] = proc
    return [proc for proc in found.values() if proc.ppid() not in found]


def _spec(tmp_path: Path, name: str, sleep: float, x: float = 0.25) -> Path:
    """A one-trial job; another ``x`` for each job, so the score cache never answers."""
    spec = {
        "name": name,
        "code": str(TOY),
        "model": "toy_model:Sleepy",
        "search_space": {"x": [x], "sleep": [sleep]},
        "num_iterations": 1,
        "parallelism": 1,
        "storage": str(tmp_path / "runs"),
    }
    path = tmp_path / f"{name}-{x}.json"
    path.write_text(json.dumps(spec))
    return path


def _env(tmp_path: Path, runtime: Path, ultron_home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ULTRON_DASK_ADDRESS"}
    env.update(
        XDG_RUNTIME_DIR=str(runtime),
        ULTRON_HOME=str(ultron_home),
        ULTRON_WARM_RUNNER="1",
        TOY_CALLS_FILE=str(tmp_path / "calls.jsonl"),
    )
    env.update(extra)
    return env


def _wait_for_trial(command: subprocess.Popen[str], calls: Path, starts: int) -> None:
    """Until the job's ``starts``-th trial started (the model logs it)."""
    deadline = time.monotonic() + 240
    while not calls.exists() or calls.read_text().count('"start"') < starts:
        assert command.poll() is None, command.communicate()
        assert time.monotonic() < deadline, "no trial started"
        time.sleep(0.05)


def _lineage(command: subprocess.Popen[str], runtime: Path) -> dict[str, object]:
    """While a trial runs: who runs the job, the workers' forkserver and the trial."""
    runners = _runners(runtime)
    jobs = [child for runner in runners for child in runner.children()]
    # The first command starts the runner: its child until the command ends.
    mine = [p for p in psutil.Process(command.pid).children() if p not in runners]
    trial_chain = []
    for job in jobs:
        for forkserver in job.children():
            for worker in forkserver.children():
                if worker.children():
                    trial_chain.append((job, forkserver))
    return {
        "runners": sorted(r.pid for r in runners),
        "jobs": [j.pid for j in jobs],
        "command_children": [p.pid for p in mine],
        "forkserver_cmdlines": [" ".join(f.cmdline()) for _, f in trial_chain],
        "job_with_trial": [j.pid for j, _ in trial_chain],
    }


def _finish(command: subprocess.Popen[str]) -> str:
    output, _ = command.communicate(timeout=300)
    assert command.returncode == 0, output
    assert "Traceback" not in output
    return output


def _start(spec: Path, job_id: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [ULTRON, "run", str(spec), "--job-id", job_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=spec.parent,
    )


def test_jobs_fork_from_one_warm_runner_per_environment(
    tmp_path: Path, runtime: Path, ultron_home: Path
) -> None:
    calls = tmp_path / "calls.jsonl"
    env = _env(tmp_path, runtime, ultron_home)
    seen = []
    for index in range(2):
        command = _start(_spec(tmp_path, "warm", 2.0, x=index), f"warm-{index}", env)
        _wait_for_trial(command, calls, index + 1)
        seen.append(_lineage(command, runtime))
        assert f"job warm-{index} completed: 1 trials" in _finish(command)
    first, second = seen
    # One runner, the same for both commands; each job is its child, not the command's.
    assert len(first["runners"]) == 1 and first["runners"] == second["runners"], seen
    for look in seen:
        assert look["command_children"] == [], look
        assert len(look["job_with_trial"]) == 1 and look["job_with_trial"][0] in look["jobs"]
        # The workers' forkserver is a fork of the job (the runner's command line), not a
        # fresh interpreter (multiprocessing.forkserver's).
        assert SERVE in look["forkserver_cmdlines"][0], look
    assert first["jobs"] != second["jobs"]
    # Another environment: a runner of its own; the first one stays.
    spec = _spec(tmp_path, "warm", 2.0, x=2)
    other = _start(spec, "warm-other", {**env, "ULTRON_TEST_PROBE": "other"})
    _wait_for_trial(other, calls, 3)
    third = _lineage(other, runtime)
    assert "job warm-other completed: 1 trials" in _finish(other)
    assert len(third["runners"]) == 2 and set(first["runners"]) < set(third["runners"]), third


def test_the_job_dies_with_its_command(tmp_path: Path, runtime: Path, ultron_home: Path) -> None:
    spec = _spec(tmp_path, "orphan", 60.0, x=0.5)
    command = _start(spec, "orphan-1", _env(tmp_path, runtime, ultron_home))
    _wait_for_trial(command, tmp_path / "calls.jsonl", 1)
    jobs = [child for runner in _runners(runtime) for child in runner.children()]
    assert len(jobs) == 1
    command.send_signal(signal.SIGKILL)  # the command is gone, as if its terminal closed
    command.communicate(timeout=60)
    _, alive = psutil.wait_procs(jobs, timeout=60)
    assert not alive, "the job's process outlived its command"
    runners = _runners(runtime)
    assert len(runners) == 1 and runners[0].children() == []


def test_a_runner_whose_configuration_changed_refuses_and_the_next_starts_afresh(
    tmp_path: Path, runtime: Path, ultron_home: Path
) -> None:
    dask_config = tmp_path / "dask"
    dask_config.mkdir()
    calls = tmp_path / "calls.jsonl"
    env = _env(tmp_path, runtime, ultron_home, DASK_CONFIG=str(dask_config))
    _finish(_start(_spec(tmp_path, "stale", 1.0, x=0), "stale-1", env))
    (before,) = _runners(runtime)
    # A Dask configuration file appears: what the runner imported no longer matches the disk.
    (dask_config / "extra.yaml").write_text("distributed:\n  admin:\n    tick:\n      limit: 4s\n")
    command = _start(_spec(tmp_path, "stale", 1.0, x=1), "stale-2", env)
    _wait_for_trial(command, calls, 2)
    look = _lineage(command, runtime)
    output = _finish(command)
    assert "job stale-2 completed: 1 trials" in output
    # Refused: the job ran in the command's own process, and the stale runner left.
    assert look["command_children"] != [] and look["jobs"] == [], look
    _, alive = psutil.wait_procs([before], timeout=60)
    assert not alive, "the stale runner did not stop"
    command = _start(_spec(tmp_path, "stale", 1.0, x=2), "stale-3", env)
    _wait_for_trial(command, calls, 3)
    fresh = _lineage(command, runtime)
    _finish(command)
    assert len(fresh["runners"]) == 1 and fresh["runners"] != [before.pid], fresh
    assert fresh["command_children"] == [], fresh


def test_the_setting_off_runs_the_job_in_the_command(
    tmp_path: Path, runtime: Path, ultron_home: Path
) -> None:
    spec = _spec(tmp_path, "off", 1.0, x=0.75)
    env = _env(tmp_path, runtime, ultron_home, ULTRON_WARM_RUNNER="0")
    command = _start(spec, "off-1", env)
    _wait_for_trial(command, tmp_path / "calls.jsonl", 1)
    look = _lineage(command, runtime)
    _finish(command)
    assert look["runners"] == [] and look["command_children"] != [], look
    assert list(runtime.iterdir()) == []
