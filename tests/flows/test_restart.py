"""Nothing lost, nothing repeated: a killed master, a killed worker, a killed Redis.

Each test injects its fault at a chosen point (watching the trials' own log or the job's state
in Redis) with SIGKILL, then checks exact counts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

import ultron
from ultron.limiter.resource_limiter import ResourceLimiter
from ultron.servers.redis_process import EmbeddedRedis
from ultron.trial_records import TrialStatus

TOY = Path(__file__).parents[1] / "data" / "toy"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]

RUN_JOB = (
    "import json, sys, ultron\n"
    "if __name__ == '__main__':\n"
    "    ultron.run(json.loads(open(sys.argv[1]).read()), job_id=sys.argv[2])\n"
)


def _log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _wait_for(condition: Callable[[], bool], timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the fault's moment never came")
        time.sleep(0.05)


def _job_in_subprocess(spec: dict, job_id: str, tmp_path: Path, **env: str) -> subprocess.Popen:
    from prefect.settings import PREFECT_API_URL

    spec_file = tmp_path / f"{job_id}.json"
    spec_file.write_text(json.dumps(spec))
    environment = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), **env}
    return subprocess.Popen(
        [sys.executable, "-c", RUN_JOB, str(spec_file), job_id],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / f"{job_id}.log").open("w"),
    )


def _stored_configs(client: redis.Redis, job_id: str) -> set[float]:
    """x of every trial whose result the job had stored: its trial table and its cache entries."""
    rows = [json.loads(v) for v in client.hvals(f"ultron:job:{job_id}:trials")]
    for key in client.scan_iter(match="ultron:cache:*"):
        rows += [e["result"] for e in map(json.loads, client.hvals(key)) if e["job_id"] == job_id]
    return {row["hyperparameters"]["x"] for row in rows}


def _table(result: ultron.HPOResult) -> list[tuple]:
    return [(t.trial_id, t.hyperparameters["x"], t.status, t.score) for t in result.trials]


@pytest.mark.parametrize("loop", ["batch", "async"])
def test_master_killed_mid_round_resumes_exactly(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch, loop: str
) -> None:
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))

    def spec(tag: str) -> dict:
        return {
            "name": "restart",
            "seed": 3,
            "code": str(TOY),
            "model": "toy_model:Sleepy",
            "search_space": {"x": {"type": "uniform", "low": 0, "high": 1}, "tag": [tag]},
            "num_iterations": 8,
            "parallelism": 2,
            "loop": loop,
            "storage": str(tmp_path / "runs"),
            "redis_url": redis_url,
        }

    job_id = f"restart-{uuid.uuid4().hex[:8]}"
    interrupted = spec(uuid.uuid4().hex)
    proc = _job_in_subprocess(interrupted, job_id, tmp_path)
    client = redis.Redis.from_url(redis_url)
    # The chosen point: two rounds committed (k = 4 trials), a trial of round three running.
    _wait_for(
        lambda: (
            client.hlen(f"ultron:job:{job_id}:trials") >= 4
            and sum(e["event"] == "start" for e in _log(calls)) >= 5
        )
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    stored_before = _stored_configs(client, job_id)  # results the job had kept when it died
    assert len(stored_before) >= 4

    resumed = ultron.run(interrupted, job_id=job_id)

    log = _log(calls)
    starts = Counter(e["x"] for e in log if e["event"] == "start")
    ends = Counter(e["x"] for e in log if e["event"] == "end")
    assert len(resumed.trials) == 8 and len(ends) == 8  # n distinct configurations scored
    assert all(starts[x] == ends[x] == 1 for x in stored_before)  # none of those run again
    # A trial running at the kill runs again (from its checkpoint, if it had one): at most once.
    assert all(ends[x] <= 2 for x in ends)
    assert all(t.status is TrialStatus.COMPLETED for t in resumed.trials)
    assert set(starts) == set(ends)  # a trial running at the kill was finished, not dropped
    interrupted = [e for e in log if e["event"] == "start" and e["resume"]]
    assert interrupted  # and it ran again as a resumed trial
    if loop == "async":
        return  # the same final table is promised for batch mode with a seed

    monkeypatch.delenv("TOY_CALLS_FILE")
    reference = ultron.run(spec(uuid.uuid4().hex))  # the same job, never interrupted
    assert _table(resumed) == _table(reference)


def test_killed_worker_resumes_the_trial_from_its_checkpoint(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    killed: dict[str, object] = {}

    def kill_a_worker() -> None:
        # The chosen point: some trial has finished epoch 3; kill -9 its Dask worker.
        _wait_for(lambda: any(e["epoch"] >= 3 for e in _log(calls)))
        victim = next(e for e in _log(calls) if e["epoch"] >= 3)
        killed.update(victim)
        os.kill(victim["worker_pid"], signal.SIGKILL)

    killer = threading.Thread(target=kill_a_worker, daemon=True)
    killer.start()
    result = ultron.run(
        {
            "name": "worker-killed",
            "code": str(TOY),
            "model": "toy_model:Epochs",
            "search_space": {"x": [1.0, 2.0, 3.0], "epochs": [8], "tag": [uuid.uuid4().hex]},
            "strategy": "grid",
            "num_iterations": 3,
            "parallelism": 2,
            "retries": 2,
            "objective": {"metric": "loss"},
            "storage": str(tmp_path / "runs"),
            "redis_url": redis_url,
        }
    )
    killer.join(timeout=5)
    assert killed, "no worker was killed"
    assert result.status == "completed"
    assert all(t.status is TrialStatus.COMPLETED for t in result.trials)
    epochs = Counter(e["x"] for e in _log(calls))
    victim = killed["x"]
    by_x = {t.hyperparameters["x"]: t for t in result.trials}
    assert by_x[victim].attempts == 2  # retried once, on a healthy worker
    resumed = [e for e in _log(calls) if e["x"] == victim and e["resume"]]
    assert resumed and resumed[0]["epoch"] >= killed["epoch"]  # from epoch e-1 or later
    assert epochs[victim] <= 8 + 1  # at most the epoch in progress was trained twice
    others = [x for x in epochs if x != victim]
    assert all(epochs[x] == 8 and by_x[x].attempts == 1 for x in others)  # nothing else twice


def test_redis_killed_and_restarted_mid_job_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    data = tmp_path / "redis"
    server = EmbeddedRedis(data, appendonly=True)
    url = server.start()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    restarted: list[EmbeddedRedis] = []

    def kill_and_restart_redis() -> None:
        _wait_for(lambda: sum(e["event"] == "end" for e in _log(calls)) >= 3)
        assert server.pid is not None
        os.kill(server.pid, signal.SIGKILL)
        time.sleep(2.0)  # the job runs on without Redis for a while
        again = EmbeddedRedis(data, port=port, appendonly=True)
        again.start()
        restarted.append(again)

    chaos = threading.Thread(target=kill_and_restart_redis, daemon=True)
    chaos.start()
    try:
        result = ultron.run(
            {
                "name": "redis-killed",
                "code": str(TOY),
                "model": "toy_model:Sleepy",
                "search_space": {
                    "x": {"type": "uniform", "low": 0, "high": 1},
                    "tag": [uuid.uuid4().hex],
                },
                "num_iterations": 8,
                "parallelism": 2,
                "storage": str(tmp_path / "runs"),
                "redis_url": url,
            }
        )
        chaos.join(timeout=5)
        assert restarted, "Redis was never restarted"
        ends = Counter(e["x"] for e in _log(calls) if e["event"] == "end")
        assert len(result.trials) == 8 and len(ends) == 8 and set(ends.values()) == {1}
        client = redis.Redis.from_url(url)
        assert ResourceLimiter(client, max_units=64).in_use() == 0  # no units leaked
        assert list(client.scan_iter(match=f"ultron:job:{result.job_id}:run:*")) == []
    finally:
        for s in (server, *restarted):
            s.stop()


def test_units_of_a_job_killed_hard_come_back_after_the_lease_ttl(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "redis", appendonly=False) as server:
        client = redis.Redis.from_url(server.url)
        client.set("ultron:limiter:max_units", 3)  # room for one job of 2 units at a time
        spec = {
            "name": "holder",
            "code": str(TOY),
            "model": "toy_model:Sleepy",
            "search_space": {"x": {"type": "uniform", "low": 0, "high": 1}, "sleep": [5.0]},
            "num_iterations": 20,
            "parallelism": 2,
            "storage": str(tmp_path / "runs"),
            "redis_url": server.url,
        }
        holder = _job_in_subprocess(spec, "holder", tmp_path, ULTRON_LEASE_TTL="6")
        limiter = ResourceLimiter(client, max_units=3)
        _wait_for(lambda: limiter.in_use() == 2)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        assert limiter.in_use() == 2  # the dead job still holds its units...
        started = time.monotonic()
        result = ultron.run(
            {
                **spec,
                "name": "next",
                "num_iterations": 2,
                "search_space": {"x": [0.5], "sleep": [0.1]},
                "acquire_timeout": 60,
            },
        )
        assert result.status == "completed"
        assert time.monotonic() - started >= 3  # ...until its lease ran out
        # Granted once the TTL freed the units, well before acquire_timeout (60 s) would fail it;
        # no tighter wall-clock bound: starting the workers alone may take 10 s on a busy machine.
        assert result.timings["acquire_resources"] < 60
        assert limiter.in_use() == 0


def test_a_trial_that_lost_its_disk_resumes_from_the_object_store(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    result = ultron.run(
        {
            "name": "lost-disk",
            "code": str(TOY),
            "model": "toy_model:Checkpointed",
            "search_space": {"x": [1.0], "lose_disk_once": [True], "tag": [uuid.uuid4().hex]},
            "num_iterations": 1,
            "storage": str(tmp_path / "store"),  # the object store: a folder, through fsspec
            "redis_url": redis_url,
        }
    )
    (trial,) = result.trials
    assert (trial.status, trial.attempts) == (TrialStatus.COMPLETED, 2)
    log = _log(calls)
    resumed = [e["epoch"] for e in log if e["resume"]]
    assert resumed == [4, 5]  # restored epoch 3 from the store: nothing trained twice
    remote = tmp_path / "store" / result.job_id / "checkpoints" / trial.trial_id
    committed = sorted(p.parent.name for p in remote.glob("*/_COMMITTED"))
    assert committed == ["epoch-0004", "epoch-0005"]  # the last two kept, all committed


def test_a_prefect_flow_retry_resumes_the_same_job(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ultron.flows.hpo_job import hpo_job

    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    spec = {
        "name": "flow-retry",
        "code": str(TOY),
        "model": "toy_model:Quadratic",
        "search_space": {"x": [0, 1, 2, 3, 4, 5], "y": [float(uuid.uuid4().int % 1000)]},
        "strategy": "toy_model:CountingSearch",
        "strategy_options": {"fail_at": 4},
        "num_iterations": 6,
        "parallelism": 2,
        "storage": str(tmp_path / "runs"),
        "redis_url": redis_url,
    }
    summary = hpo_job.with_options(retries=1, retry_delay_seconds=0)(spec)
    assert (tmp_path / "calls.jsonl.failed").exists()  # the first flow run did die
    trained = [json.loads(line)["x"] for line in calls.read_text().splitlines()]
    assert sorted(trained) == [0, 1, 2, 3, 4, 5]  # each once: the retry went on, not over
    assert summary["status"] == "completed" and len(summary["trials"]) == 6
