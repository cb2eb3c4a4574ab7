"""The job's cluster starts once, at its first use; what it starts with and what it raises.

The start functions here build a ``ClusterHandle`` of no client: what is tested is when the
start runs and how often (the real start, a Dask cluster and its warm trial processes, is in
tests/tasks/test_lazy_start.py).
"""

from __future__ import annotations

import threading

import pytest

from ultron.cluster.elastic import ElasticWorkers
from ultron.cluster.factory import ClusterHandle
from ultron.cluster.lazy import LazyCluster
from ultron.spec.job import JobSpec


class Starts:
    """A start function that records each call's parallelism."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.calls: list[int] = []
        self.error = error
        self.closed = 0

    def __call__(self, parallelism: int) -> ClusterHandle:
        self.calls.append(parallelism)
        if self.error is not None:
            raise self.error
        starts = self

        class Closing(ClusterHandle):
            def close(self) -> None:
                starts.closed += 1

        return Closing(None, None, {})


def _spec() -> JobSpec:
    return JobSpec.model_validate(
        {"code": ".", "model": "m:M", "search_space": {"x": [1]}, "parallelism": 2},
        context={"check_paths": False},
    )


def test_nothing_starts_before_the_first_use_and_it_starts_once() -> None:
    starts = Starts()
    lazy = LazyCluster(starts, parallelism=2, resources={"GPU": 0.5})
    assert not lazy.started and lazy.running is None and lazy.dashboard_link is None
    assert lazy.resources == {"GPU": 0.5} and starts.calls == []  # known without a start
    first = lazy.handle()
    assert lazy.handle() is first and lazy.running is first
    assert starts.calls == [2] and lazy.start_s is not None
    lazy.close()
    assert starts.closed == 1


def test_a_resize_before_the_start_sets_the_workers_it_starts_with() -> None:
    starts = Starts()
    lazy = LazyCluster(starts, parallelism=2)
    ElasticWorkers(lazy, _spec(), "job").resize(5)  # ultron scale before the first trial
    assert starts.calls == [] and not lazy.started
    lazy.handle()
    assert starts.calls == [5]


def test_a_failed_start_is_raised_to_each_user_and_not_retried() -> None:
    starts = Starts(error=OSError("no workers"))
    lazy = LazyCluster(starts, parallelism=1)
    for _ in range(2):
        with pytest.raises(OSError, match="no workers"):
            lazy.handle()
    assert starts.calls == [1]
    lazy.close()  # nothing to close
    assert lazy.running is None


def test_a_background_start_is_waited_for_and_a_closed_one_never_starts() -> None:
    gate = threading.Event()
    starts = Starts()

    def slow(parallelism: int) -> ClusterHandle:
        gate.wait(timeout=60)
        return starts(parallelism)

    lazy = LazyCluster(slow, parallelism=3)
    lazy.start_soon()
    lazy.start_soon()  # once
    assert lazy.started and lazy.running is None
    gate.set()
    assert lazy.handle() is lazy.running and starts.calls == [3]
    lazy.close()
    assert starts.closed == 1

    never = LazyCluster(starts, parallelism=1)
    never.close()
    never.start_soon()
    with pytest.raises(RuntimeError, match="released"):
        never.handle()
    assert starts.calls == [3]
