"""Local workers forked from the warm forkserver (ultron.services.forkserver), on real Dask
clusters of processes: each worker is a child of the forkserver and has ultron's trial runner
imported before its first task, it sees this process's environment as a spawned worker would,
and a change of environment since the forkserver started makes the next cluster spawn its
workers instead. Each case runs in a fresh interpreter: a process has one forkserver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

TOY = Path(__file__).parents[2] / "data" / "toy"

SCRIPT = textwrap.dedent(
    """
    import json, multiprocessing.forkserver, os, sys

    from ultron.services.cluster import start_cluster, warm_local_workers
    from ultron.spec.loader import load_spec

    def workers(spec):
        handle = start_cluster(spec)
        try:
            def look():
                return {
                    "ppid": os.getppid(),
                    "runner": "ultron.worker.runner" in sys.modules,
                    "probe": os.environ.get("ULTRON_TEST_PROBE"),
                    "omp": os.environ.get("OMP_NUM_THREADS"),
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
        warm_local_workers(spec)
        server = multiprocessing.forkserver._forkserver._forkserver_pid
        rounds = {"first": workers(spec), "again": workers(spec)}
        os.environ["ULTRON_TEST_PROBE"] = "after"  # the forkserver has "before"
        rounds["changed"] = workers(spec)
        print(json.dumps({"master": os.getpid(), "forkserver": server, "rounds": rounds}))
    """
)


def _run(tmp_path: Path, **env: str) -> dict[str, Any]:
    script = tmp_path / "forked.py"
    script.write_text(SCRIPT)
    environ = {k: v for k, v in os.environ.items() if k not in ("ULTRON_DASK_ADDRESS", *env)}
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
    # The environment changed since the forkserver started: spawned, and they see the change.
    changed = rounds["changed"]
    assert {w["ppid"] for w in changed} == {master}, rounds
    assert {w["probe"] for w in changed} == {"after"}, rounds
    assert not any(w["runner"] for w in changed), rounds


def test_the_baseline_setting_spawns_every_worker(tmp_path: Path) -> None:
    seen = _run(tmp_path, ULTRON_SPAWN_WORKERS="1")
    assert seen["forkserver"] is None
    for workers in seen["rounds"].values():
        assert {w["ppid"] for w in workers} == {seen["master"]}
        assert not any(w["runner"] for w in workers)
