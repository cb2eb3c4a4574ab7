"""What the elastic job tests share: a job of timed trials, scaled from another thread at
moments chosen by the job's state (trials done), the moments its lease shows each request
applied, and the overlap its trial table shows."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

import ultron
import ultron.api
from tests.flows.dask_processes import wait_for
from ultron.limiter.resource_limiter import ResourceLimiter
from ultron.master.overview import find_job
from ultron.redis import keys

TOY = Path(__file__).parents[1] / "data" / "toy"
TRIALS = 12
SLEEP_S = 2.0


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


def at_once(spans: list[tuple[float, float]], moment: float) -> int:
    """How many of the trials' (start, end) spans hold ``moment``."""
    return sum(start <= moment < end for start, end in spans)


def most_at_once(spans: list[tuple[float, float]], after: float, before: float) -> int:
    """The most trials that ran at once when one of them started in (after, before)."""
    starts = [start for start, _ in spans if after < start < before]
    return max((at_once(spans, start) for start in starts), default=0)


def ran_at_once(client: redis.Redis, job_id: str, *, after: float = 0.0) -> int:
    """The most trials in the job's table so far that ran at once when one of them started
    after ``after`` (their own start and end)."""
    rows = [json.loads(row) for row in client.hvals(keys.job_trials(job_id))]
    spans = [(r["metrics"]["start"], r["metrics"]["end"]) for r in rows if "start" in r["metrics"]]
    return most_at_once(spans, after, float("inf"))


@dataclass
class Scaling:
    """What a scaling thread did, as it did it.

    Attributes:
        asked: each request's (time, parallelism).
        applied: for each request, when the job's lease first held units for exactly that
            many trials (read in Redis): from then on the master runs that many at most.
        errors: the thread's errors, for the test to raise.
    """

    asked: list[tuple[float, int]] = field(default_factory=list)
    applied: list[float] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)


def lease_units(client: redis.Redis, job_id: str) -> float | None:
    """Units the job's lease holds now (a trial of the timed spec holds one); None: no lease."""
    holding = ResourceLimiter(client, max_units=1).holders().get(job_id)
    return None if holding is None else holding.units


def scaling(
    client: redis.Redis,
    job_id: str,
    steps: list[tuple[Callable[[Scaling], bool], int]],
    redis_url: str,
) -> tuple[threading.Thread, Scaling]:
    """A thread that, for each (condition, parallelism) of ``steps``, waits until the
    condition holds, scales the job, and waits until the job's lease holds units for that
    parallelism (or the job has ended); and what it did (conditions see it too)."""
    scaled = Scaling()

    def apply(condition: Callable[[Scaling], bool], parallelism: int) -> None:
        wait_for(lambda: condition(scaled), f"the moment to scale to {parallelism}")
        scaled.asked.append((time.time(), parallelism))
        assert ultron.api.scale(job_id, parallelism, redis_url=redis_url) == "running"
        wait_for(
            lambda: lease_units(client, job_id) in (parallelism, None),
            f"the job's lease at {parallelism} trials, or the job's end",
        )
        if lease_units(client, job_id) == parallelism:
            scaled.applied.append(time.time())

    def drive() -> None:
        try:
            for condition, parallelism in steps:
                apply(condition, parallelism)
        except BaseException as exc:  # handed to the test
            scaled.errors.append(exc)

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    return thread, scaled


def up_then_down(
    client: redis.Redis, job_id: str, *, done_first: int = 6
) -> list[tuple[Callable[[Scaling], bool], int]]:
    """The steps of a job scaled from 1 to 3 after its first trial, then back to 1 once a
    trial started since the lease grew ran with two others (and ``done_first`` trials are in
    its table)."""

    def grown(scaled: Scaling) -> bool:
        if not scaled.applied or done(client, job_id) < done_first:
            return False
        return ran_at_once(client, job_id, after=scaled.applied[0]) >= 3

    return [(lambda scaled: done(client, job_id) >= 1, 3), (grown, 1)]


def spans_of(result: Any) -> list[tuple[float, float]]:
    return [(t.metrics["start"], t.metrics["end"]) for t in result.trials]


def assert_each_once(result: Any, trials: int = TRIALS) -> None:
    """All trials completed, each configuration once, in one attempt: none lost or repeated."""
    from ultron.trial_records import TrialStatus

    assert result.status == "completed"
    xs = sorted(t.hyperparameters["x"] for t in result.trials)
    assert xs == [float(x) for x in range(trials)]
    assert all(t.status is TrialStatus.COMPLETED and t.attempts == 1 for t in result.trials)


def assert_scaled_up_then_down(result: Any, scaled: Scaling, trials: int = TRIALS) -> None:
    """The job of :func:`up_then_down` ran every trial once, one at a time until scaled up,
    three at once after its lease grew, one at a time after its lease shrank; and some trials
    started after it shrank (the check is not vacuous)."""
    assert not scaled.errors, scaled.errors
    assert_each_once(result, trials)
    (up_at, _), (down_at, _) = scaled.asked
    assert len(scaled.applied) == 2, "the job ended before its lease showed both requests"
    grown, shrunk = scaled.applied  # when the lease held units for 3, then for 1 trial
    spans = spans_of(result)
    seen = f"trials' (start, end) {sorted(spans)}; asked {scaled.asked}; applied {scaled.applied}"
    assert most_at_once(spans, 0, up_at) == 1, seen
    assert most_at_once(spans, grown, down_at) == 3, seen  # from then on, 3 at once
    assert most_at_once(spans, 0, float("inf")) <= 3, seen
    # Not vacuous: a trial started after the request ran alone. (Not "started after `shrunk`":
    # `shrunk` is when this test's poll saw the lease shrink, which can be a few ms after the
    # master took the freed units' trial and started it.)
    alone = [start for start, _ in spans if start > down_at and at_once(spans, start) == 1]
    assert alone, f"none ran alone after it was asked to shrink; {seen}"
    assert most_at_once(spans, shrunk, float("inf")) <= 1, seen  # and from then on, all alone
