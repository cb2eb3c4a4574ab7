"""When a job's workers start: at the first trial dispatched, a GPU job's as its units are held.

The real start (:func:`~ultron.tasks.acquire_resources.start_workers`: a local Dask cluster of
worker processes and a warm trial process on each), a real ``TrialDispatcher`` and the
session's Redis. The order of events is read from the start itself and from the scheduler
(a plugin hears the first trial's graph arrive), never from a clock. This machine has no GPU:
the GPU job's start builds the workers of its CPU twin (the warm-up's CUDA step is a no-op
without CUDA), which is all the order needs.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from distributed.diagnostics.plugin import SchedulerPlugin

from ultron.cluster.factory import ClusterHandle
from ultron.containerize.environment import TrialEnvironment
from ultron.master.dispatcher import TrialDispatcher
from ultron.master.job_state import JobStore
from ultron.master.score_cache import job_score_cache
from ultron.spec.job import JobSpec
from ultron.tasks.acquire_resources import lazy_cluster, start_workers
from ultron.trial_records import TrialStatus

TOY = Path(__file__).parents[1] / "data" / "toy"


class Dispatches(SchedulerPlugin):
    """Appends ``dispatch`` to ``events`` as a graph of tasks reaches the scheduler."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def update_graph(self, scheduler: Any, **kwargs: Any) -> None:
        self.events.append("dispatch")


def _spec(tmp_path: Path, gpu: float) -> JobSpec:
    return JobSpec.model_validate(
        {
            "code": str(TOY),
            "model": "toy_model:Quadratic",
            "search_space": {"x": [1.0]},
            "num_iterations": 1,
            "parallelism": 1,
            "resources": {"cpu": 1, "gpu": gpu},
            "storage": str(tmp_path / "runs"),
        },
        context={"check_paths": False},
    )


@pytest.mark.parametrize("gpu", [0, 1], ids=["cpu-job", "gpu-job"])
def test_workers_start_at_the_first_dispatch_and_a_gpu_jobs_before_it(
    tmp_path: Path, redis_url: str, gpu: float
) -> None:
    spec, cpu_twin = _spec(tmp_path, gpu), _spec(tmp_path, 0)
    job_id = f"lazy-{uuid.uuid4().hex[:8]}"
    env = TrialEnvironment(
        python=Path(sys.executable), code_hash="0" * 64, root=tmp_path, source=TOY, reused=True
    )
    events: list[str] = []
    threads: list[str] = []

    def start(parallelism: int) -> ClusterHandle:
        events.append("start workers")
        threads.append(threading.current_thread().name)
        logger = logging.getLogger(__name__)
        handle = start_workers(cpu_twin, job_id, env, logger, parallelism, redis_url=redis_url)
        events.append("warm-up done")  # start_workers returns once the warm-up has run
        handle.cluster.scheduler.add_plugin(Dispatches(events))
        return handle

    cluster = lazy_cluster(spec, start, parallelism=1)
    try:
        # Where the master restores its state and makes its first proposals: a GPU job's
        # workers are starting meanwhile (in a thread of their own), a CPU job's are not.
        assert cluster.started is bool(gpu)
        events.append("master prepared")
        store = JobStore(redis.Redis.from_url(redis_url), job_id)
        dispatcher = TrialDispatcher(
            cluster,
            store,
            spec=spec,
            env=env,
            redis_url=redis_url,
            scratch=str(tmp_path / "scratch"),
            resources={},  # the GPU job's twin workers have no GPU to claim
        )
        dispatcher.start(dispatcher.request("0000", {"x": 1.0}))
        waited = dispatcher.wait_one(timeout=120)
        assert waited is not None and waited[0].status is TrialStatus.COMPLETED
    finally:
        cluster.close()
    if gpu:  # started as the units were held, beside the master
        assert threads == ["ultron-start-cluster"]
    else:  # nothing started until the first trial needed a worker, by the master's thread
        assert events[:2] == ["master prepared", "start workers"]
        assert threads == [threading.current_thread().name]
    assert events.index("warm-up done") < events.index("dispatch")


def test_a_job_whose_score_cache_is_empty_starts_its_workers_with_its_units(
    tmp_path: Path, redis_url: str
) -> None:
    """Nothing can answer its first trial: the workers start beside the master at once, in
    the caller's context; one entry of its computation in the cache and they wait for the
    first proposal's answer."""
    spec = _spec(tmp_path, 0)
    cache = job_score_cache(
        spec,
        redis.Redis.from_url(redis_url),
        code_hash=uuid.uuid4().hex,  # a code base the cache has never seen
        namespace=f"lazy-{uuid.uuid4().hex[:8]}",
        data_hash=None,
    )
    started = threading.Event()
    seen: list[str] = []
    caller = contextvars.ContextVar("caller", default="none")
    caller.set("the task's")  # as Prefect's settings and run context are

    def start(parallelism: int) -> ClusterHandle:
        # The real start is the test above's; here only when it is called counts, and in
        # which context (Prefect's, where its log lines go).
        seen.append(caller.get())
        started.set()
        return ClusterHandle(None, None, {})

    empty = lazy_cluster(spec, start, parallelism=1, cache=cache)
    assert empty.started
    assert started.wait(timeout=60)  # in its background thread
    empty.close()
    assert seen == ["the task's"]
    cache.put({"x": 2.0}, {"score": 4.0, "metrics": {"score": 4.0}})
    started.clear()
    known = lazy_cluster(spec, start, parallelism=1, cache=cache)
    assert not known.started and not started.is_set()
    known.close()
