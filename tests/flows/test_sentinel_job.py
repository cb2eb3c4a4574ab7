"""A whole job on Redis Sentinel rides through a failover: the master is killed mid-job.

The spec's ``redis_url`` is the ``redis+sentinel://`` URL of a real setup on loopback (one
master, one replica, three sentinels); the flow, the Dask workers and the trial processes all
get that URL. Once two trials are in the trial table the master is SIGKILLed from a thread;
the sentinels promote the replica and the job completes with all six trials, the two stored
before the kill among them.
"""

from __future__ import annotations

import importlib.util
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import ultron
from ultron.redis.client import connect
from ultron.trial_records import TrialStatus

TOY = Path(__file__).parents[1] / "data" / "toy"
TRIALS = 6

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def _setup_module() -> ModuleType:
    # pytest runs in importlib mode, so test folders are not packages to import from: load the
    # Sentinel setup from the services test that defines it, by path.
    path = Path(__file__).parents[1] / "ultron" / "services" / "test_sentinel.py"
    spec = importlib.util.spec_from_file_location("_sentinel_setup", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def sentinel_setup(tmp_path: Path) -> Iterator[Any]:
    setup = _setup_module().SentinelSetup(tmp_path / "sentinel")
    try:
        yield setup.start()
    finally:
        setup.stop()


def _log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_job_completes_across_a_failover_with_nothing_lost(
    tmp_path: Path, sentinel_setup: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup = sentinel_setup
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    job_id = f"sentinel-{uuid.uuid4().hex[:8]}"
    table = f"ultron:job:{job_id}:trials"
    watcher = connect(setup.url)
    stored_before: dict[str, bytes] = {}
    errors: list[BaseException] = []

    def kill_when_two_are_stored() -> None:
        try:
            deadline = time.monotonic() + 240
            while watcher.hlen(table) < 2:
                if time.monotonic() > deadline:
                    raise TimeoutError("two trials were never stored")
                time.sleep(0.05)
            stored_before.update(watcher.hgetall(table))
            assert int(watcher.execute_command("WAIT", 1, 2000)) >= 1  # the replica has them
            setup.kill_master()
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    killer = threading.Thread(target=kill_when_two_are_stored, daemon=True)
    killer.start()
    try:
        result = ultron.run(
            {
                "name": "sentinel",
                "seed": 5,
                "code": str(TOY),
                "model": "toy_model:Sleepy",
                "search_space": {"x": {"type": "uniform", "low": 0, "high": 1}, "sleep": [1.0]},
                "num_iterations": TRIALS,
                "parallelism": 2,
                "storage": str(tmp_path / "runs"),
                "redis_url": setup.url,
            },
            job_id=job_id,
        )
        killer.join(30)
        assert not errors, errors
        assert setup.processes["master"].poll() is not None  # the master was killed mid-job
        assert watcher.connection_pool.get_master_address()[1] == setup.replica_port

        assert len(result.trials) == TRIALS
        assert all(t.status is TrialStatus.COMPLETED for t in result.trials)
        assert sorted(t.trial_id for t in result.trials) == [f"{i:04d}" for i in range(TRIALS)]
        after = watcher.hgetall(table)
        assert len(after) == TRIALS
        assert len(stored_before) >= 2
        assert {k: after[k] for k in stored_before} == stored_before  # nothing stored was lost
        ends = Counter(e["x"] for e in _log(calls) if e["event"] == "end")
        assert {t.hyperparameters["x"] for t in result.trials} <= set(ends)
    finally:
        watcher.close()
