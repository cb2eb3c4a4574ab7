"""The score cache answers only the same computation, on a real Redis server.

What determines a score: the code base, the data, the model class, the job seed (each trial's
seed derives from it and the configuration) and the configuration; the objective metric picks
one of the trial's numbers. The in-memory cache of the simulator answers the same way.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis

from ultron.algorithms import Choice, Direction, GridSearch, IntRange, SearchSpace, Uniform
from ultron.algorithms.space import Conditional, Repeated
from ultron.master.interfaces import Cache
from ultron.master.job_state import JobState
from ultron.master.loops import Master, SearchSettings
from ultron.master.score_cache import ScoreCache, clear_cache
from ultron.redis import keys
from ultron.simulation.benchmark import LearningCurve, SimulatedClock
from ultron.simulation.jobs import MemoryCache, MemoryStore, SimulatedDispatcher
from ultron.trial_records import TrialResult, TrialStatus

CONFIG = {"lr": 0.1, "layers": 2}
SAME = {
    "code_hash": "c0de",
    "data_hash": None,
    "model": "pkg.train:Model",
    "seed": 0,
    "tenant": "team-a",
}


@pytest.fixture
def namespace() -> str:
    """A namespace of this test's own: the Redis server is shared by the session."""
    return f"test-{uuid.uuid4().hex}"


def _entry(
    score: float, metrics: dict[str, float], job_id: str = "job-a", trial_id: str = "0000"
) -> dict[str, Any]:
    return {"score": score, "metrics": metrics, "job_id": job_id, "trial_id": trial_id}


def _ask(
    cache: Cache, config: dict[str, Any] = CONFIG, *, job_id: str = "job-b", trial_id: str = "0003"
) -> dict[str, Any] | None:
    """The cache's answer for ``config`` launched as ``trial_id`` of ``job_id``."""
    return cache.get_many([config], job_id=job_id, trial_ids=[trial_id])[0]


CacheFactory = Callable[..., Cache]


@pytest.fixture(params=["redis", "memory"])
def make_cache(
    request: pytest.FixtureRequest, redis_client: redis.Redis, namespace: str
) -> CacheFactory:
    """``make(metric, enabled=True)``: a cache of one computation, seen by a job with that
    objective metric and ``cache`` setting; the Redis one and the simulator's."""
    shared: dict[str, dict[str, Any]] = {}  # the simulator's entries, one dict for all views

    def make(metric: str, enabled: bool = True) -> Cache:
        if request.param == "redis":
            return ScoreCache(
                redis_client, **SAME, metric=metric, enabled=enabled, namespace=namespace
            )
        view = MemoryCache(metric=metric, enabled=enabled)
        view.entries = shared
        return view

    return make


def test_same_computation_is_answered_with_the_metric_of_the_job(make_cache: CacheFactory) -> None:
    make_cache("a").put(CONFIG, _entry(1.0, {"a": 1.0, "b": 2.0}))
    hit = _ask(make_cache("a"), {"layers": 2, "lr": 0.1})  # key order does not matter
    assert hit is not None and hit["score"] == 1.0 and hit["metrics"] == {"a": 1.0, "b": 2.0}
    assert _ask(make_cache("a"), {"layers": 3, "lr": 0.1}) is None


def test_the_same_active_configuration_is_answered_whatever_its_inactive_parameters(
    redis_client: redis.Redis, namespace: str
) -> None:
    """Momentum under Adam is inactive: it never splits one computation into two keys."""
    space = SearchSpace(
        {
            "optimizer": Choice(("adam", "sgd")),
            "momentum": Conditional(Uniform(0.0, 0.99), when={"optimizer": "sgd"}),
            "layers": Repeated(1, 4, {"width": IntRange(16, 256)}),
        }
    )
    adam = {"optimizer": "adam", "layers": [{"width": 64}, {"width": 32}]}
    sgd = {"optimizer": "sgd", "momentum": 0.9, "layers": [{"width": 64}]}
    caches: list[Cache] = [
        ScoreCache(redis_client, **SAME, metric="a", space=space, namespace=namespace),
        MemoryCache(metric="a", space=space),
    ]
    for cache in caches:
        cache.put({**adam, "momentum": 0.5}, _entry(1.0, {"a": 1.0}))
        cache.put(sgd, _entry(2.0, {"a": 2.0}))
        for momentum in (None, 0.1, 0.9):  # absent, or any value: the same computation
            asked = adam if momentum is None else {**adam, "momentum": momentum}
            hit = _ask(cache, asked)
            assert hit is not None and hit["score"] == 1.0
        hit = _ask(cache, {**sgd, "momentum": 0.9})
        assert hit is not None and hit["score"] == 2.0
        assert _ask(cache, {**sgd, "momentum": 0.8}) is None  # active: another computation
        assert _ask(cache, {**adam, "layers": [{"width": 64}]}) is None  # one layer fewer


def test_another_metric_held_by_the_entry_is_answered_with_its_own_value(
    make_cache: CacheFactory,
) -> None:
    make_cache("a").put(CONFIG, _entry(1.0, {"a": 1.0, "b": 2.0}))
    hit = _ask(make_cache("b"))
    assert hit is not None and hit["score"] == 2.0  # b's value, never the stored score of a


def test_a_bare_float_answers_only_the_metric_it_was_run_for(make_cache: CacheFactory) -> None:
    make_cache("a").put(CONFIG, _entry(3.0, {}))  # metrics empty: the score is a's
    hit = _ask(make_cache("a"))
    assert hit is not None and hit["score"] == 3.0 and hit["metrics"] == {"a": 3.0}
    assert _ask(make_cache("b")) is None  # another metric trains


def test_cache_off_answers_only_the_very_trial_of_the_same_job(make_cache: CacheFactory) -> None:
    make_cache("a").put(CONFIG, _entry(1.0, {"a": 1.0}, job_id="job-a", trial_id="0000"))
    off = make_cache("a", enabled=False)
    assert _ask(off, job_id="job-b", trial_id="0000") is None  # another job
    assert _ask(off, job_id="job-a", trial_id="0001") is None  # another trial of the job
    same = _ask(off, job_id="job-a", trial_id="0000")  # finished before a master restart
    assert same is not None and same["score"] == 1.0
    assert _ask(make_cache("a"), job_id="job-b", trial_id="0000") is not None  # on: any job


@pytest.mark.parametrize(
    "change",
    [
        {"code_hash": "c0de2"},
        {"data_hash": "da7a"},
        {"model": "pkg.train:Other"},
        {"model": "pkg.other:Model"},
        {"seed": 1},
        {"tenant": "team-b"},
        {"deterministic": True},
    ],
    ids=["code", "data", "model-class", "model-module", "seed", "tenant", "deterministic"],
)
def test_another_computation_misses(
    redis_client: redis.Redis, namespace: str, change: dict[str, Any]
) -> None:
    ScoreCache(redis_client, **SAME, metric="a", namespace=namespace).put(
        CONFIG, _entry(1.0, {"a": 1.0})
    )
    assert _ask(ScoreCache(redis_client, **SAME, metric="a", namespace=namespace)) is not None
    other = ScoreCache(redis_client, **{**SAME, **change}, metric="a", namespace=namespace)
    assert _ask(other) is None
    assert len(other) == 0


def test_a_tenant_never_reads_another_tenants_scores(
    redis_client: redis.Redis, namespace: str
) -> None:
    team_a = ScoreCache(redis_client, **SAME, metric="a", namespace=namespace)
    team_b = ScoreCache(
        redis_client, **{**SAME, "tenant": "team-b"}, metric="a", namespace=namespace
    )
    team_a.put(CONFIG, _entry(1.0, {"a": 1.0}, job_id="job-a"))
    # The same code, data, model, seed and configuration: tenant B still trains it.
    assert _ask(team_b, job_id="job-b") is None
    team_b.put(CONFIG, _entry(2.0, {"a": 2.0}, job_id="job-b"))
    hit_a, hit_b = _ask(team_a, job_id="job-a2"), _ask(team_b, job_id="job-b2")
    assert hit_a is not None and hit_a["score"] == 1.0 and hit_a["job_id"] == "job-a"
    assert hit_b is not None and hit_b["score"] == 2.0 and hit_b["job_id"] == "job-b"
    assert team_a.key != team_b.key
    assert team_a.key.startswith(f"{namespace}:cache:v{keys.SCORE_CACHE_VERSION}:team-a:")


def test_data_and_no_data_are_different_computations(
    redis_client: redis.Redis, namespace: str
) -> None:
    with_data = {**SAME, "data_hash": "aaaa"}
    ScoreCache(redis_client, **with_data, metric="a", namespace=namespace).put(
        CONFIG, _entry(1.0, {"a": 1.0})
    )
    assert _ask(ScoreCache(redis_client, **with_data, metric="a", namespace=namespace)) is not None
    assert _ask(ScoreCache(redis_client, **SAME, metric="a", namespace=namespace)) is None


def test_an_old_format_cache_is_never_read(redis_client: redis.Redis, namespace: str) -> None:
    # Version 1 keyed on the code base alone, and its entries held only the stored score.
    redis_client.hset(f"{namespace}:cache:c0de", '{"layers":2,"lr":0.1}', '{"score": 9.0}')
    assert _ask(ScoreCache(redis_client, **SAME, metric="score", namespace=namespace)) is None


def test_get_many_wants_one_trial_id_per_configuration(redis_client: redis.Redis) -> None:
    cache = ScoreCache(redis_client, **SAME, metric="a", namespace="unused")
    with pytest.raises(ValueError, match="one trial id per configuration"):
        cache.get_many([CONFIG, CONFIG], job_id="job-a", trial_ids=["0000"])


def test_clear_cache_deletes_every_cache_of_the_namespace_and_nothing_else(
    redis_client: redis.Redis, namespace: str
) -> None:
    for seed in range(1203):  # more than two batches of deletes
        ScoreCache(redis_client, **{**SAME, "seed": seed}, metric="a", namespace=namespace).put(
            CONFIG, _entry(1.0, {"a": 1.0})
        )
    redis_client.hset(f"{namespace}:cache:c0de", "{}", "{}")  # an old-format cache goes too
    redis_client.set(keys.job("keep", namespace=namespace), "1")
    neighbour = f"{namespace}-neighbour"
    ScoreCache(redis_client, **SAME, metric="a", namespace=neighbour).put(
        CONFIG, _entry(1.0, {"a": 1})
    )

    assert clear_cache(redis_client, namespace=namespace) == 1204
    assert list(redis_client.scan_iter(match=f"{namespace}:cache:*")) == []
    assert redis_client.exists(keys.job("keep", namespace=namespace)) == 1
    assert _ask(ScoreCache(redis_client, **SAME, metric="a", namespace=neighbour)) is not None
    assert clear_cache(redis_client, namespace=namespace) == 0
    assert clear_cache(redis_client, namespace=neighbour) == 1


class _OneStep:
    """Configuration ``x`` scores ``x`` after one step of one second."""

    search_space = SearchSpace({"x": Choice((1, 2))})
    direction = Direction.MINIMIZE
    max_resource = 1

    def learning_curve(self, config: dict[str, Any]) -> LearningCurve:
        return LearningCurve((float(config["x"]),), (1.0,))


@pytest.mark.parametrize("enabled", [True, False])
def test_the_master_takes_its_own_finished_trial_back_even_with_the_cache_off(
    redis_client: redis.Redis, namespace: str, enabled: bool
) -> None:
    cache = ScoreCache(redis_client, **SAME, metric="value", enabled=enabled, namespace=namespace)
    # Trial 0000 (x=1) of this job finished before its master died; x=2 was scored by another job.
    own = TrialResult("0000", {"x": 1}, TrialStatus.COMPLETED, score=10.0, metrics={"value": 10.0})
    cache.put({"x": 1}, {**_entry(10.0, {"value": 10.0}, "job-a", "0000"), "result": own.to_dict()})
    cache.put({"x": 2}, _entry(20.0, {"value": 20.0}, "job-other", "0007"))
    dispatcher = SimulatedDispatcher(_OneStep(), SimulatedClock())
    state = JobState("job-a")
    Master(
        settings=SearchSettings(num_iterations=2, parallelism=2),
        strategy=GridSearch(_OneStep.search_space),
        cache=cache,
        dispatcher=dispatcher,
        store=MemoryStore("job-a"),
        state=state,
    ).run_batch()

    first, second = state.trials
    assert (first.trial_id, first.status, first.score) == ("0000", TrialStatus.COMPLETED, 10.0)
    if enabled:
        assert (second.status, second.score) == (TrialStatus.CACHED, 20.0)
        assert dispatcher.trials_started == 0
    else:  # another job's score is not taken: x=2 trains and scores its own 2.0
        assert (second.status, second.score) == (TrialStatus.COMPLETED, 2.0)
        assert dispatcher.trials_started == 1


@pytest.mark.parametrize("shared", [True, False], ids=["one-client", "two-clients"])
def test_the_master_writes_each_result_s_entry_with_its_row(
    redis_url: str, namespace: str, shared: bool
) -> None:
    """The entry of every finished trial reaches the cache, and its row the job's table: in
    the save's transaction where the cache and the job share the Redis client, else before it.
    """
    from ultron.master.job_state import JobStore

    client, other = redis.Redis.from_url(redis_url), redis.Redis.from_url(redis_url)
    cache = ScoreCache(client if shared else other, **SAME, metric="value", namespace=namespace)
    store = JobStore(client, "job-w", namespace=namespace)
    space = SearchSpace({"x": Choice((1, 2, 3, 4))})

    class Steps(_OneStep):
        search_space = space

    state = JobState("job-w")
    Master(
        settings=SearchSettings(num_iterations=4, parallelism=2),
        strategy=GridSearch(space),
        cache=cache,
        dispatcher=SimulatedDispatcher(Steps(), SimulatedClock()),
        store=store,
        state=state,
    ).run_async()

    stored = store.load()
    assert stored is not None
    assert sorted(t.score for t in stored.trials) == [1.0, 2.0, 3.0, 4.0]
    for x in (1, 2, 3, 4):  # another job asks: the cache answers each from its entry
        answer = _ask(cache, {"x": x})
        assert answer is not None and answer["score"] == float(x), (x, answer)
