"""What the elastic job tests share: a job of timed trials, scaled from another thread at
moments chosen by the job's state (trials done), and the overlap its trial table shows."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

import ultron
from ultron.redis import keys

TOY = Path(__file__).parents[1] / "data" / "toy"
TRIALS = 12
SLEEP_S = 2.0
# A request is read before each dispatch (and every 0.5 s while the master waits); a trial
# launched just before it was read starts with the old parallelism. Trials that start this
# long after a request are held to the new one.
SETTLE_S = 1.5


def timed_spec(tmp_path: Path, redis_url: str, **extra: Any) -> dict[str, Any]:
    """A job of TRIALS trials of SLEEP_S seconds each, one configuration each."""
    return {
        "name": "elastic",
        "code": str(TOY),
        "model": "toy_model:Timed",
        "search_space": {"x": [float(x) for x in range(TRIALS)], "sleep": [SLEEP_S]},
        "strategy": "grid",
        "num_iterations": TRIALS,
        "parallelism": 1,
        "objective": {"metric": "loss"},
        "storage": str(tmp_path / "runs"),
        "redis_url": redis_url,
        "cache": False,
        **extra,
    }


def done(client: redis.Redis, job_id: str) -> int:
    """Trials in the job's trial table."""
    return int(client.hlen(keys.job_trials(job_id)))


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


def scaling(
    client: redis.Redis,
    job_id: str,
    steps: list[tuple[int, int]],
    redis_url: str,
    on_step: Callable[[int], None] = lambda parallelism: None,
) -> tuple[threading.Thread, list[tuple[float, int]]]:
    """A thread that, for each (trials done, parallelism) of ``steps``, waits until the job's
    table holds that many trials, calls ``on_step`` and scales the job; and the (time,
    parallelism) of each request as it is made."""
    asked: list[tuple[float, int]] = []

    def drive() -> None:
        for trials, parallelism in steps:
            wait_for(lambda trials=trials: done(client, job_id) >= trials, f"{trials} trials")
            on_step(parallelism)
            asked.append((time.time(), parallelism))
            assert ultron.api.scale(job_id, parallelism, redis_url=redis_url) == "running"

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    return thread, asked


def spans_of(result: Any) -> list[tuple[float, float]]:
    return [(t.metrics["start"], t.metrics["end"]) for t in result.trials]


def assert_each_once(result: Any) -> None:
    """All trials completed, each configuration once, in one attempt: none lost or repeated."""
    from ultron.trial_records import TrialStatus

    assert result.status == "completed"
    xs = sorted(t.hyperparameters["x"] for t in result.trials)
    assert xs == [float(x) for x in range(TRIALS)]
    assert all(t.status is TrialStatus.COMPLETED and t.attempts == 1 for t in result.trials)
