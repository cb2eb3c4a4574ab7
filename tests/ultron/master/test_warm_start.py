"""A warm start's prior: read from earlier jobs of the tenant only, told to the strategy once
(a restarted master does not tell it again), never rows of the new job's table or budget."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import redis

from ultron.algorithms.base import Direction, SearchAlgorithm
from ultron.algorithms.optuna_sampler import MOTPESearch
from ultron.algorithms.space import Config, SearchSpace, Uniform, canonical
from ultron.errors import SpecError
from ultron.master.job_state import JobState, JobStore
from ultron.master.loops import Master, SearchSettings
from ultron.master.warm_start import check_sources, prior_of, read_prior
from ultron.redis import keys
from ultron.redis.tenants import add_tenant, remove_tenant, tenant_url
from ultron.simulation.benchmark import LearningCurve, SimulatedClock
from ultron.simulation.jobs import MemoryCache, SimulatedDispatcher
from ultron.spec.job import JobSpec
from ultron.spec.objectives import job_goals
from ultron.trial_records import TrialResult, TrialStatus

SPACE = SearchSpace({"x": Uniform(0.0, 1.0)})


def _spec(jobs: list[str], **fields: Any) -> JobSpec:
    raw = {"code": ".", "model": "pkg.train:Model", "search_space": {"x": {"type": "uniform",
           "low": 0.0, "high": 1.0}}, "warm_start": {"jobs": jobs}, **fields}  # fmt: skip
    return JobSpec.model_validate(raw, context={"check_paths": False})


def _row(trial_id: str, x: float, status: str = "completed", **more: Any) -> TrialResult:
    return TrialResult.from_dict(
        {"trial_id": trial_id, "status": status, "hyperparameters": {"x": x}, **more}
    )


def _earlier_job(client: redis.Redis, rows: list[TrialResult], *, metric: str = "loss",
                 namespace: str = keys.NAMESPACE) -> str:  # fmt: skip
    """A finished job as its master leaves it: its spec and its trial table."""
    job_id = f"earlier-{uuid.uuid4().hex[:8]}"
    store = JobStore(client, job_id, namespace=namespace)
    spec = {"objective": {"metric": metric, "mode": "minimize"}}
    client.hset(store.key, mapping={"spec": json.dumps(spec), "status": "completed"})
    store.save(JobState(job_id, trials=rows, next_trial=len(rows)), new=rows)
    return job_id


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def test_the_prior_is_the_finished_trials_fitted_into_the_new_space(client: redis.Redis) -> None:
    rows = [
        _row("0000", 0.2, score=0.5, metrics={"loss": 0.5, "acc": 0.8}),
        _row("0001", 1.7, score=0.4, metrics={"loss": 0.4, "acc": 0.9}),  # clipped to 1.0
        _row("0002", 0.3, "failed", error="boom"),
        _row("0003", 0.4, "stopped", score=0.9, metrics={"loss": 0.9}),  # cut short: not told
        _row("0004", 0.6, "cached", score=0.7, metrics={"loss": 0.7, "acc": 0.6}),
        _row("0005", 0.8, score=0.3, metrics={"loss": 0.3}),  # no acc: dropped for acc
    ]
    job = _earlier_job(client, rows)
    prior = read_prior(client, _spec([job], objective={"metric": "loss"}), "new-job")
    assert prior.configs == [{"x": 0.2}, {"x": 1.0}, {"x": 0.6}, {"x": 0.8}]
    assert prior.scores == [0.5, 0.4, 0.7, 0.3]  # the earlier job's metric: its scores
    note = read_prior(client, _spec([job], objective={"metric": "acc"}), "new").note()
    assert note == {
        "jobs": [job],
        "told": 3,
        "projected": 1,
        "dropped": 1,
        "unfinished": 2,
        "why_dropped": [f"{job}/0005: it has no finite value of the metric 'acc'"],
    }


def test_a_job_of_several_objectives_is_told_metric_dicts_and_never_a_missing_one(
    client: redis.Redis,
) -> None:
    two = [{"metric": "loss", "mode": "min"}, {"metric": "latency_ms", "mode": "min"}]
    several = _earlier_job(
        client,
        [
            _row("0000", 0.2, score=0.5, metrics={"loss": 0.5, "latency_ms": 30.0}),
            _row("0001", 0.4, score=0.4, metrics={"loss": 0.4, "latency_ms": float("nan")}),
        ],
    )
    # Its spec as a job of several objectives stores it: objectives, no single objective.
    client.hset(JobStore(client, several).key, "spec", json.dumps({"objectives": two}))
    single = _earlier_job(client, [_row("0000", 0.6, score=0.3, metrics={"loss": 0.3})])
    spec = _spec([several, single], objectives=two, strategy="motpe")
    prior = read_prior(client, spec, "new-job")
    assert prior.configs == [{"x": 0.2}]
    assert prior.scores == [{"loss": 0.5, "latency_ms": 30.0}]
    assert prior.why_dropped == [
        f"{several}/0001: it has no finite value of the metric 'latency_ms'",
        f"{single}/0000: it has no finite value of the metric 'latency_ms'",
    ]
    # The multi-objective strategy takes them as it takes the job's own trials.
    strategy = MOTPESearch(spec.space, seed=0, objectives=job_goals(spec))
    strategy.update_state(prior.configs, prior.scores)
    assert [t.values for t in strategy._study.trials] == [[0.5, 30.0]]


def test_a_new_parameter_or_a_lost_choice_drops_the_trial_and_says_why() -> None:
    space = SearchSpace({"x": Uniform(0.0, 1.0), "y": Uniform(0.0, 1.0)})
    rows = [_row("0000", 0.5, score=1.0)]
    prior = prior_of({"old": rows}, space, metric="score")
    assert (prior.configs, prior.dropped) == ([], 1)
    assert prior.why_dropped == ["old/0000: it has no value for y"]
    assert "told the strategy 0 earlier trials" in prior.summary()


def test_an_unknown_job_and_the_job_itself_are_refused_before_compute(
    client: redis.Redis,
) -> None:
    job = _earlier_job(client, [_row("0000", 0.2, score=0.5)])
    assert check_sources(client, _spec([job]), "new-job") == {job: keys.NAMESPACE}
    with pytest.raises(SpecError) as refused:
        check_sources(client, _spec([job, "no-such-job", "new-job"]), "new-job")
    issues = refused.value.issues
    assert [(i.field, i.value) for i in issues] == [
        ("warm_start.jobs", "no-such-job"),
        ("warm_start.jobs", "new-job"),
    ]
    assert "it is not known" in issues[0].rule and "ultron jobs" in issues[0].fix
    assert "cannot warm-start from itself" in issues[1].rule


def test_a_tenant_warm_starts_from_its_own_jobs_only(redis_url: str) -> None:
    admin = redis.Redis.from_url(redis_url)
    names = [f"ws-{letter}-{os.getpid()}" for letter in "ab"]
    clients = [
        redis.Redis.from_url(tenant_url(redis_url, name, add_tenant(admin, name))) for name in names
    ]
    try:
        a_job = _earlier_job(
            clients[0],
            [_row("0000", 0.2, score=0.5)],
            metric="score",
            namespace=keys.tenant_namespace(names[0]),
        )
        assert read_prior(clients[0], _spec([a_job], tenant=names[0]), "new").configs == [
            {"x": 0.2}
        ]
        with pytest.raises(SpecError, match="it is not known"):  # B's credentials: no such job
            check_sources(clients[1], _spec([a_job], tenant=names[1]), "new")
        with pytest.raises(SpecError, match="it is not known"):  # admin, for tenant B: not B's
            check_sources(admin, _spec([a_job], tenant=names[1]), "new")
    finally:
        for name, tenant in zip(names, clients, strict=True):
            tenant.close()
            remove_tenant(admin, name)
            for key in admin.scan_iter(match=f"{keys.tenant_namespace(name)}:*"):
                admin.delete(key)
        admin.close()


class _Counting(SearchAlgorithm):
    """Random proposals; keeps every observation it is told, in its state."""

    def __init__(self, search_space: SearchSpace, **kwargs: Any) -> None:
        super().__init__(search_space, **kwargs)
        self.told: list[list[Any]] = []

    def sample_hyperparameter_candidates(self, n: int) -> list[Config]:
        return [self.search_space.sample(self.rng) for _ in range(n)]

    def update_state(self, candidates: Sequence[Config], scores: Sequence[float]) -> None:
        self.told += [[dict(c), s] for c, s in zip(candidates, scores, strict=True)]

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "told": self.told}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.told = state["told"]


class _Line:
    search_space = SPACE
    direction = Direction.MINIMIZE
    max_resource = 1

    def learning_curve(self, config: dict[str, Any]) -> LearningCurve:
        return LearningCurve((config["x"],), (0.0,))


def _run(client: redis.Redis, job_id: str, budget: int, prior: Any) -> tuple[JobState, _Counting]:
    """One run of the master as search_loop sets it up: state and strategy restored."""
    store = JobStore(client, job_id, namespace=f"test-{job_id}")
    state = store.load() or JobState(job_id)
    strategy, cache = _Counting(SPACE, seed=1), MemoryCache()
    if state.algorithm:
        strategy.load_state_dict(state.algorithm)
    master = Master(
        settings=SearchSettings(num_iterations=budget, parallelism=2),
        strategy=strategy,
        cache=cache,
        dispatcher=SimulatedDispatcher(_Line(), SimulatedClock()),
        store=store,
        state=state,
        prior=None if state.warm_start is not None else prior,
    )
    master.run_batch()
    told = {canonical(c) for c in prior.configs}
    assert not told & set(cache.entries)  # a prior never answers a trial from the cache
    return store.load() or state, strategy


def test_the_master_tells_the_prior_once_and_spends_no_budget_on_it(client: redis.Redis) -> None:
    prior = prior_of({"old": [_row(f"000{i}", i / 10, score=i / 10) for i in range(3)]}, SPACE,
                     metric="score")  # fmt: skip
    job_id = f"warm-{uuid.uuid4().hex[:8]}"
    state, strategy = _run(client, job_id, 4, prior)
    assert strategy.told[:3] == [[{"x": 0.0}, 0.0], [{"x": 0.1}, 0.1], [{"x": 0.2}, 0.2]]
    assert len(strategy.told) == 3 + 4 and len(state.trials) == 4  # the prior is no trial
    assert state.warm_start == prior.note()
    # Continued with a higher budget: restored from the stored state, nothing told twice.
    state, strategy = _run(client, job_id, 6, prior)
    assert len(strategy.told) == 3 + 6 and len(state.trials) == 6
    assert all(t.status != TrialStatus.CACHED for t in state.trials)
