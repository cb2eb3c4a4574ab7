"""What the elastic job tests share: a job of timed trials, scaled from another thread at
moments chosen by the job's state (trials done), and the overlap its trial table shows."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

import ultron
import ultron.api
from ultron.master.overview import find_job
from ultron.redis import keys

TOY = Path(__file__).parents[1] / "data" / "toy"
TRIALS = 12
SLEEP_S = 2.0
# A request is read before each dispatch (and every 0.5 s while the master waits); a trial
# launched just before it was read starts with the old parallelism. Trials that start this
# long after a request are held to the new one.
SETTLE_S = 1.5


def timed_spec(
    tmp_path: Path, redis_url: str, *, trials: int = TRIALS, **extra: Any
) -> dict[str, Any]:
    """A job of ``trials`` trials of SLEEP_S seconds each, one configuration each."""
    return {
        "name": "elastic",
        "code": str(TOY),
        "model": "toy_model:Timed",
        "search_space": {"x": [float(x) for x in range(trials)], "sleep": [SLEEP_S]},
        "strategy": "grid",
        "num_iterations": trials,
        "parallelism": 1,
        "objective": {"metric": "loss"},
        "storage": str(tmp_path / "runs"),
        "redis_url": redis_url,
        "cache": False,
        **extra,
    }


def done(client: redis.Redis, job_id: str) -> int:
    """Trials in the job's trial table, in its tenant's namespace (0 before the job exists)."""
    namespace = find_job(client, job_id)
    return int(client.hlen(keys.job_trials(job_id, namespace=namespace))) if namespace else 0


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"never reached: {what}")
        time.sleep(0.05)


def at_once(spans: list[tuple[float, float]], moment: float) -> int:
    """How many of the trials' (start, end) spans hold ``moment``."""
    return sum(start <= moment < end for start, end in spans)


def most_at_once(spans: list[tuple[float, float]], after: float, before: float) -> int:
    """The most trials that ran at once when one of them started in (after, before)."""
    starts = [start for start, _ in spans if after < start < before]
    return max((at_once(spans, start) for start in starts), default=0)


def ran_at_once(client: redis.Redis, job_id: str) -> int:
    """The most trials in the job's table so far that ran at once (their own start and end)."""
    rows = [json.loads(row) for row in client.hvals(keys.job_trials(job_id))]
    spans = [(r["metrics"]["start"], r["metrics"]["end"]) for r in rows if "start" in r["metrics"]]
    return most_at_once(spans, 0, float("inf"))


def scaling(
    client: redis.Redis,
    job_id: str,
    steps: list[tuple[Callable[[], bool], int]],
    redis_url: str,
) -> tuple[threading.Thread, list[tuple[float, int]], list[BaseException]]:
    """A thread that, for each (condition, parallelism) of ``steps``, waits until the
    condition holds and scales the job; the (time, parallelism) of each request as it is
    made; and the errors of the thread, for the test to raise."""
    asked: list[tuple[float, int]] = []
    errors: list[BaseException] = []

    def drive() -> None:
        try:
            for condition, parallelism in steps:
                wait_for(condition, f"the moment to scale to {parallelism}")
                asked.append((time.time(), parallelism))
                assert ultron.api.scale(job_id, parallelism, redis_url=redis_url) == "running"
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    return thread, asked, errors


def spans_of(result: Any) -> list[tuple[float, float]]:
    return [(t.metrics["start"], t.metrics["end"]) for t in result.trials]


def assert_each_once(result: Any, trials: int = TRIALS) -> None:
    """All trials completed, each configuration once, in one attempt: none lost or repeated."""
    from ultron.trial_records import TrialStatus

    assert result.status == "completed"
    xs = sorted(t.hyperparameters["x"] for t in result.trials)
    assert xs == [float(x) for x in range(trials)]
    assert all(t.status is TrialStatus.COMPLETED and t.attempts == 1 for t in result.trials)
