"""Task 3 of a job: the master (paper V-E). Sample, score on Dask, update, checkpoint, repeat.

Each round samples up to ``parallelism`` candidates, answers those already scored from the
score cache, runs the rest as trials, hands every score back to the strategy, and writes the
trial table and the strategy's state to Redis, so a restarted master picks up from there.
"""

from __future__ import annotations

import math
import time
from typing import Any

import redis
from prefect import get_run_logger, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NONE

from algorithms.space import Config, canonical
from tasks.acquire_resources import JobResources
from ultron.dispatcher import TrialDispatcher
from ultron.environment import TrialEnvironment
from ultron.job_state import JobState, JobStore
from ultron.paths import scratch_dir
from ultron.progress import ProgressEvent, emit
from ultron.results import best_trial
from ultron.score_cache import ScoreCache
from ultron.spec import JobSpec
from ultron.strategy import build_strategy
from ultron.trial import TrialResult, TrialStatus

__all__ = ["search_loop"]

_ARTIFACT_EVERY_S = 2.0


class _Progress:
    """Progress events for listeners and a throttled Prefect progress artifact."""

    def __init__(self, spec: JobSpec, job_id: str) -> None:
        self.spec = spec
        self.job_id = job_id
        self.artifact: Any = None
        self.last = 0.0
        try:
            self.artifact = create_progress_artifact(
                progress=0.0, key=_artifact_key(job_id, "progress"), description=spec.name
            )
        except Exception:  # the artifact is for the UI; the job goes on without it
            get_run_logger().warning("could not create the progress artifact")

    def update(self, state: JobState, running: int, last: TrialResult | None = None) -> None:
        best = best_trial(state.trials, self.spec.objective.mode)
        done = len(state.trials)
        emit(
            ProgressEvent(
                self.job_id,
                done,
                self.spec.num_iterations,
                running,
                best.score if best else None,
                best.hyperparameters if best else None,
                last.to_dict() if last else {},
            )
        )
        now = time.monotonic()
        if self.artifact is not None and (now - self.last > _ARTIFACT_EVERY_S or running == 0):
            self.last = now
            try:
                update_progress_artifact(self.artifact, 100.0 * done / self.spec.num_iterations)
            except Exception:
                self.artifact = None


def _artifact_key(job_id: str, what: str) -> str:
    safe = "".join(c if c.isalnum() else "-" for c in job_id.lower())
    return f"{safe}-{what}"[:100]


def _score_round(
    ids: list[str],
    candidates: list[Config],
    *,
    cache: ScoreCache,
    dispatcher: TrialDispatcher,
    state: JobState,
    progress: _Progress,
) -> list[TrialResult]:
    """Score one round: cache hits at once, one trial per distinct new configuration."""
    results: dict[str, TrialResult] = {}
    first_of: dict[str, str] = {}  # canonical config -> the trial that trains it this round
    for trial_id, config, hit in zip(ids, candidates, cache.get_many(candidates), strict=True):
        key = canonical(config)
        if hit is not None:
            results[trial_id] = _cached(trial_id, config, hit)
        elif key not in first_of:
            first_of[key] = trial_id
            dispatcher.start(dispatcher.request(trial_id, config))
    while dispatcher.in_flight:
        result, curve = dispatcher.wait_one()
        results[result.trial_id] = result
        state.curves[result.trial_id] = curve
        if result.status is TrialStatus.COMPLETED:
            cache.put(
                result.hyperparameters,
                {
                    "score": result.score,
                    "metrics": result.metrics,
                    "job_id": state.job_id,
                    "trial_id": result.trial_id,
                },
            )
        progress.update(state, dispatcher.in_flight, result)
    for trial_id, config in zip(ids, candidates, strict=True):
        if trial_id not in results:  # a repeat within the round: answered by its first trial
            first = results[first_of[canonical(config)]]
            results[trial_id] = (
                _cached(trial_id, config, {"score": first.score, "metrics": first.metrics})
                if first.status is TrialStatus.COMPLETED
                else first
            )
    return [results[trial_id] for trial_id in ids]


def _cached(trial_id: str, config: Config, hit: dict[str, Any]) -> TrialResult:
    return TrialResult(
        trial_id,
        config,
        TrialStatus.CACHED,
        score=hit["score"],
        metrics=hit.get("metrics", {}),
        attempts=0,
    )


@task(name="search-loop", task_run_name="search-loop-{job_id}", cache_policy=NONE)
def search_loop(
    spec: JobSpec, job_id: str, env: TrialEnvironment, resources: JobResources, redis_url: str
) -> JobState:
    """Run the search until ``num_iterations`` trials are scored or the strategy runs dry."""
    logger = get_run_logger()
    client = redis.Redis.from_url(redis_url)
    store = JobStore(client, job_id)
    state = store.load() or JobState(job_id)
    strategy = build_strategy(spec, env)
    if state.algorithm and hasattr(strategy, "load_state_dict"):
        strategy.load_state_dict(state.algorithm)
    scratch = scratch_dir(job_id)
    dispatcher = TrialDispatcher(
        resources.cluster.client,
        store,
        spec=spec,
        env=env,
        redis_url=redis_url,
        scratch=str(scratch),
        resources=resources.cluster.resources,
    )
    cache = ScoreCache(client, code_hash=env.code_hash)
    progress = _Progress(spec, job_id)
    while len(state.trials) < spec.num_iterations:
        if resources.keeper.lost:
            raise RuntimeError(f"job {job_id} lost its resource lease; rerun it to resume")
        wanted = min(spec.parallelism, spec.num_iterations - len(state.trials))
        candidates = list(strategy.sample_hyperparameter_candidates(wanted))[:wanted]
        if not candidates:
            logger.info("the strategy has no more candidates after %d trials", len(state.trials))
            break
        ids = [f"{state.next_trial + i:04d}" for i in range(len(candidates))]
        state.next_trial += len(candidates)
        results = _score_round(
            ids, candidates, cache=cache, dispatcher=dispatcher, state=state, progress=progress
        )
        state.trials.extend(results)
        strategy.update_state(candidates, [_score(r) for r in results])
        if hasattr(strategy, "state_dict"):
            state.algorithm = strategy.state_dict()
        store.save(state)
        for r in results:
            if r.status is TrialStatus.FAILED:
                logger.warning("trial %s failed: %s", r.trial_id, r.error)
        progress.update(state, 0)
    logger.info("search done: %d trials", len(state.trials))
    return state


def _score(result: TrialResult) -> float:
    return float(result.score) if result.status.ok and result.score is not None else math.nan
