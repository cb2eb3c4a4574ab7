"""Local workers forked from the warm forkserver (ultron.cluster.forkserver), on real Dask
clusters of processes: each worker is a child of the forkserver, has ultron's trial runner
imported before its first task, blocks SIGINT (Ctrl-C reaches the job's process only) and sees
this process's environment as a spawned worker would; a change of environment or umask since
the forkserver started makes the next cluster spawn its workers instead. The cluster cases run
in a fresh interpreter (a process has one forkserver); a real ``ultron run`` job runs its trials
on forked workers."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

TOY = Path(__file__).parents[2] / "data" / "toy"

SCRIPT = textwrap.dedent(
    """
    import json, multiprocessing.forkserver, os, signal, sys

    from ultron.cluster.factory import start_cluster, stop_warm_workers, warm_local_workers
    from ultron.cluster.forkserver import restoring_environ
    from ultron.spec.loader import load_spec

    def workers(spec):
        handle = start_cluster(spec)
        try:
            def look():
                umask = os.umask(0o022)
                os.umask(umask)
                status = open("/proc/self/status").read()
                blocked = int(status.split("SigBlk:")[1].split()[0], 16)
                return {
                    "ppid": os.getppid(),
                    "runner": "ultron.worker.runner" in sys.modules,
                    "probe": os.environ.get("ULTRON_TEST_PROBE"),
                    "omp": os.environ.get("OMP_NUM_THREADS"),
                    "umask": umask,
                    "sigint_blocked": bool(blocked & (1 << (signal.SIGINT - 1))),
                }
            return list(handle.client.run(look).values())
        finally:
            handle.close()

    if __name__ == "__main__":
        spec = load_spec({
            "name": "forked", "code": sys.argv[1], "model": "toy_model:Quadratic",
            "search_space": {"x": [1.0, 2.0]}, "parallelism": 2,
        })
        os.environ["ULTRON_TEST_PROBE"] = "before"
        dask_set = ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS")
        with restoring_environ():  # as ultron.run runs a job
            warm_local_workers(spec)
            server = multiprocessing.forkserver._forkserver._forkserver_pid
            rounds = {"first": workers(spec)}
            during = {name: os.environ.get(name) for name in dask_set}
        after = {name: os.environ.get(name) for name in dask_set}
        rounds["again"] = workers(spec)
        os.umask(0o077)  # the forkserver has the umask of before
        rounds["umask"] = workers(spec)
        os.umask(0o022)
        os.environ["ULTRON_TEST_PROBE"] = "after"  # the forkserver has "before"
        rounds["changed"] = workers(spec)
        stop_warm_workers()  # as a job ends; the next job starts a forkserver of its own
        stopped = not os.path.exists(f"/proc/{server}") if server else None
        warm_local_workers(spec)
        again = multiprocessing.forkserver._forkserver._forkserver_pid
        rounds["restarted"] = workers(spec)
        stop_warm_workers()
        print(json.dumps({
            "master": os.getpid(), "forkserver": server, "rounds": rounds,
            "stopped": stopped, "second": again, "during": during, "after": after,
        }))
    """
)


def _run(tmp_path: Path, **env: str) -> dict[str, Any]:
    script = tmp_path / "forked.py"
    script.write_text(SCRIPT)
    # Without what Dask's nannies set in this process if a test before started a local cluster
    # here: the script sees them set and undone.
    dask_set = ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    environ = {
        k: v for k, v in os.environ.items() if k not in ("ULTRON_DASK_ADDRESS", *dask_set, *env)
    }
    done = subprocess.run(
        [sys.executable, str(script), str(TOY)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**environ, **env},
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return answer


def test_workers_fork_from_the_warm_forkserver_while_the_environment_is_the_same(
    tmp_path: Path,
) -> None:
    seen = _run(tmp_path)
    master, server, rounds = seen["master"], seen["forkserver"], seen["rounds"]
    assert server is not None and server != master
    # Both clusters: forked from the forkserver, the runner imported there once.
    for name in ("first", "again"):
        workers = rounds[name]
        assert len(workers) == 2, rounds
        assert {w["ppid"] for w in workers} == {server}, (name, rounds)
        assert all(w["runner"] for w in workers), (name, rounds)
        assert {w["probe"] for w in workers} == {"before"}, (name, rounds)
        # Set by each worker's nanny: in a forked worker too (the first cluster also set it in
        # this process, which does not count as a change of environment).
        assert {w["omp"] for w in workers} == {"1"}, (name, rounds)
        # Ctrl-C reaches the job's process only (ultron.master.cancel), never a forked worker.
        assert all(w["sigint_blocked"] for w in workers), (name, rounds)
    # A changed umask: spawned, with the umask of now.
    assert {w["ppid"] for w in rounds["umask"]} == {master}, rounds
    assert {w["umask"] for w in rounds["umask"]} == {0o077}, rounds
    # The environment changed since the forkserver started: spawned, and they see the change.
    changed = rounds["changed"]
    assert {w["ppid"] for w in changed} == {master}, rounds
    assert {w["probe"] for w in changed} == {"after"}, rounds
    assert not any(w["runner"] for w in changed), rounds
    # Stopped as a job ends (its process gone); the next job's forkserver has the new state.
    assert seen["stopped"] is True and seen["second"] not in (None, server), seen
    restarted = rounds["restarted"]
    assert {w["ppid"] for w in restarted} == {seen["second"]}, rounds
    assert {w["probe"] for w in restarted} == {"after"}, rounds
    # Dask's nannies (and the forkserver's start) set their variables in the job's process; the
    # job's end takes them back, so processes the program starts later do not inherit them.
    assert seen["during"] == {"MALLOC_TRIM_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}, seen
    assert seen["after"] == {"MALLOC_TRIM_THRESHOLD_": None, "OMP_NUM_THREADS": None}, seen


def test_the_baseline_setting_spawns_every_worker(tmp_path: Path) -> None:
    seen = _run(tmp_path, ULTRON_SPAWN_WORKERS="1")
    assert seen["forkserver"] is None and seen["second"] is None
    for workers in seen["rounds"].values():
        assert {w["ppid"] for w in workers} == {seen["master"]}
        assert not any(w["runner"] for w in workers)


def _forked_trial_seen(job: subprocess.Popen[str], calls: Path) -> bool:
    """While a trial runs (its ``start`` logged): the job's forkserver is the parent of a Dask
    worker that runs the trial's process."""
    while job.poll() is None:
        if calls.exists() and '"event": "start"' in calls.read_text():
            for proc in psutil.Process(job.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if "multiprocessing.forkserver" in " ".join(proc.cmdline()):
                        workers = proc.children()
                        if any(worker.children() for worker in workers):
                            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_a_job_runs_its_trials_on_workers_forked_from_the_forkserver(
    tmp_path: Path, ultron_home: Path
) -> None:
    spec = {
        "name": "forked-job",
        "code": str(TOY),
        "model": "toy_model:Sleepy",
        "search_space": {"x": [0.25, 0.75], "sleep": [3.0]},
        "num_iterations": 2,
        "parallelism": 1,
        "storage": str(tmp_path / "runs"),
    }
    (tmp_path / "job.yaml").write_text(json.dumps(spec))
    calls = tmp_path / "calls.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "ULTRON_DASK_ADDRESS"}
    # The `ultron` command runs the job in its own process, which starts the forkserver.
    env.update(TOY_CALLS_FILE=str(calls), ULTRON_HOME=str(ultron_home))
    ultron = str(Path(sys.executable).with_name("ultron"))
    with subprocess.Popen(
        [ultron, "run", str(tmp_path / "job.yaml"), "--job-id", "forked-1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp_path,
    ) as job:
        seen = _forked_trial_seen(job, calls)
        output, _ = job.communicate(timeout=300)
    assert job.returncode == 0, output
    assert "job forked-1 completed (budget: 2 trials): 2 trials" in output, output
    assert "Traceback" not in output
    assert seen, "no trial ran on a worker forked from the job's forkserver"
