"""Task 3 of a job: the master (paper V-E). Sample, score on Dask, update, checkpoint, repeat.

The task sets up the master's parts (strategy, restored state, dispatcher, score cache) and
runs one of the loops of :mod:`ultron.master.loops`; the trial table and the strategy's state are in
Redis after every update, so a restarted master picks up from there.
"""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from ultron.algorithms.base import HPOAlgorithm
from ultron.algorithms.stoppers.base import Stopper
from ultron.cluster.elastic import ElasticWorkers
from ultron.containerize.environment import TrialEnvironment
from ultron.containerize.image import worker_paths
from ultron.errors import JobCancelledError
from ultron.master.cancel import CANCEL
from ultron.master.dispatcher import TrialDispatcher
from ultron.master.early_stopping import StopperDriver
from ultron.master.goals import JobGoals
from ultron.master.hopper_search import data_fingerprint, run_hopper_search
from ultron.master.job_state import JobState, JobStatus, JobStore
from ultron.master.loops import Master, SearchSettings
from ultron.master.scaler import Scaler
from ultron.master.score_cache import job_score_cache
from ultron.master.warm_start import WarmStartPrior, read_prior
from ultron.paths import job_results_url, scratch_dir
from ultron.redis.client import connect
from ultron.redis.keys import tenant_namespace
from ultron.settings import settings
from ultron.spec.job import JobSpec
from ultron.spec.objectives import asked_metrics
from ultron.tasks.acquire_resources import JobResources
from ultron.tasks.monitor import JobMonitor

__all__ = ["search_loop"]


def _stopper_driver(
    spec: JobSpec, stopper: Stopper | None, client: Any, job_id: str, state: JobState
) -> StopperDriver | None:
    if stopper is None or spec.early_stopping is None:
        return None
    metric = spec.early_stopping.metric or spec.objective.metric
    namespace = tenant_namespace(spec.tenant)
    driver = StopperDriver(stopper, client, job_id, metric=metric, namespace=namespace)
    if state.stopper:
        driver.load_state_dict(state.stopper)
    return driver.start()


def _warm_start_prior(spec: JobSpec, client: Any, job_id: str) -> WarmStartPrior | None:
    if spec.warm_start is None:
        return None
    return read_prior(client, spec, job_id)


def _hopper_search(
    spec: JobSpec, job_id: str, env: TrialEnvironment, resources: JobResources, client: Any,
    store: JobStore, state: JobState, strategy: HPOAlgorithm, stopper: Stopper | None,
) -> JobState:  # fmt: skip
    """``execution: hopper``: every configuration hops over the workers' partitions."""
    assert spec.data is not None  # the spec's validation: hopper needs data
    progress = JobMonitor(spec, job_id, state)
    try:
        cluster = resources.cluster.handle()  # the running cluster (started now if not yet)
        run_hopper_search(
            spec, job_id, client=cluster.client, store=store, state=state,
            strategy=strategy, stopper=stopper,
            cache=job_score_cache(
                spec, client, code_hash=env.code_hash, namespace=store.namespace,
                data_hash=data_fingerprint(spec.data.url),
            ),
            code_paths=worker_paths(env)[1], check=lambda: _check_lease(resources, job_id),
            on_result=progress.update, own_workers=cluster.cluster is not None,
        )  # fmt: skip
    finally:
        progress.close()
    return state


def _begin(spec: JobSpec, store: JobStore, state: JobState) -> dict[str, Any]:
    """Mark the job running and take over from an earlier master; returns the trials that
    ran when it died (they run again from their checkpoints)."""
    state.status = JobStatus.RUNNING  # a completed job that continues runs again
    state.end_reason = None
    # Now, not at the first checkpoint (in the batch loop: when the first round has ended):
    # `ultron status` and `ultron jobs` show the job running, with its running trials.
    store.set_status(JobStatus.RUNNING, end_reason="")
    store.set_results_url(job_results_url(spec.storage, store.job_id))  # `ultron logs` reads it
    running_before = store.running()  # trials that ran when a previous master died
    store.clear_running()
    store.clear_job_stops(sorted(running_before))  # an earlier master's goal or cancel
    return running_before


def _search_settings(spec: JobSpec, resources: JobResources) -> SearchSettings:
    return SearchSettings(
        num_iterations=spec.num_iterations,
        parallelism=resources.parallelism,
        max_failed_share=spec.max_failed_share,
        tell_stopped=spec.early_stopping is None or spec.early_stopping.tell_stopped,
        metrics=asked_metrics(spec),
        # A stopper resumes its suspended trials in the slots that free: none queued ahead.
        queue_ahead=spec.early_stopping is None,
    )


def _scaler(
    spec: JobSpec, job_id: str, client: Any, resources: JobResources, store: JobStore
) -> Scaler:
    """What grows or shrinks the job's parallelism with its lease (``ultron scale``)."""
    return Scaler(
        client,
        job_id,
        limiter=resources.limiter,
        keeper=resources.keeper,
        workers=ElasticWorkers(resources.cluster, spec, job_id),
        units_for=spec.resources.units_for,
        granted=resources.parallelism,
        wanted=spec.parallelism,
        namespace=store.namespace,
    )


def _check_lease(resources: JobResources, job_id: str) -> None:
    CANCEL.raise_if_requested(job_id)
    if resources.keeper.lost:
        raise RuntimeError(
            f"job {job_id} lost its resource lease (it stalled past the lease TTL); "
            "rerun it with the same job id to resume"
        )


@task(name="search-loop", task_run_name="search-loop-{job_id}", cache_policy=NONE)
def search_loop(
    spec: JobSpec,
    job_id: str,
    env: TrialEnvironment,
    resources: JobResources,
    redis_url: str,
    strategy: HPOAlgorithm,
    stopper: Stopper | None,
) -> JobState:
    """Run the search until ``num_iterations`` trials are scored, the strategy runs dry or a
    goal of the job is reached (its time budget, its target: :mod:`ultron.master.goals`).

    ``strategy`` and ``stopper`` are the job's (built once, in the flow); their state is
    restored here from what a previous master saved.
    """
    logger = get_run_logger()
    client = connect(redis_url)
    store = JobStore(client, job_id, namespace=tenant_namespace(spec.tenant))
    state = store.load() or JobState(job_id)
    running_before = _begin(spec, store, state)
    if running_before:
        logger.info(
            "resuming job %s: trials %s run again from their checkpoints",
            job_id,
            sorted(running_before),
        )
    if state.algorithm and hasattr(strategy, "load_state_dict"):
        strategy.load_state_dict(state.algorithm)
    if spec.execution.hopper:  # model hopper parallelism instead of a trial loop
        return _hopper_search(spec, job_id, env, resources, client, store, state, strategy, stopper)
    dispatcher = TrialDispatcher(
        resources.cluster,  # started at the first submit: a trial the cache cannot answer
        store,
        spec=spec,
        env=env,
        redis_url=redis_url,
        scratch=str(scratch_dir(job_id)),
        resources=resources.cluster.resources,
        data=resources.data.trial_config() if resources.data is not None else None,
    )
    progress = JobMonitor(spec, job_id, state)  # progress and leaderboard artifacts
    driver = _stopper_driver(spec, stopper, client, job_id, state)
    if driver is not None:  # POP's slots: the trials that run now (min_parallelism: fewer)
        driver.set_slots(resources.parallelism)
    # A warm start's earlier trials, read once: a resumed job has them in its strategy's state.
    prior = None if state.warm_start is not None else _warm_start_prior(spec, client, job_id)
    if prior is not None:  # told by the master before its first proposal
        logger.info("%s", prior.summary())
    master = Master(
        settings=_search_settings(spec, resources),
        strategy=strategy,
        cache=job_score_cache(
            spec,
            client,
            code_hash=env.code_hash,
            namespace=store.namespace,
            data_hash=resources.data.fingerprint() if resources.data is not None else None,
        ),
        dispatcher=dispatcher,
        store=store,
        state=state,
        on_result=progress.update,
        check=lambda: _check_lease(resources, job_id),
        driver=driver,
        scaler=_scaler(spec, job_id, client, resources, store),
        goals=JobGoals.of(spec),
        grace_s=settings().cancel_grace,
        interrupted={tid: info["hyperparameters"] for tid, info in running_before.items()},
        prior=prior,
        interrupted_attempts={
            tid: int(info.get("attempt", 1)) for tid, info in running_before.items()
        },
    )
    try:
        if spec.loop_kind == "async":
            master.run_async()
        else:
            master.run_batch()
    except JobCancelledError:
        stopped = dispatcher.stop_running(settings().cancel_grace)
        logger.warning("job %s cancelled; trials %s resume from their checkpoints", job_id, stopped)
        raise
    finally:
        progress.close()  # a last write of the artifacts, however the search ended
        if driver is not None:
            driver.close()
    logger.info("search done: %d trials; the job ended: %s", len(state.trials), state.end_reason)
    return state
