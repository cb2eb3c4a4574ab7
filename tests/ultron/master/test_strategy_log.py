"""Incremental strategy checkpoints: a snapshot now and then, the calls in between, on Redis."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis

from ultron.algorithms.base import Direction
from ultron.algorithms.registry import resolve_strategy
from ultron.algorithms.space import SearchSpace, Uniform
from ultron.master import strategy_log
from ultron.master.job_state import JobState, JobStore
from ultron.master.loops import Master, SearchSettings
from ultron.simulation.benchmark import LearningCurve, SimulatedClock
from ultron.simulation.jobs import MemoryCache, SimulatedDispatcher

SPACE = SearchSpace({"x": Uniform(0.0, 1.0), "y": Uniform(0.0, 1.0)})


class _Bowl:
    """One step per trial, no time: the score is the distance to (0.3, 0.7)."""

    search_space = SPACE
    direction = Direction.MINIMIZE
    max_resource = 1

    def learning_curve(self, config: dict[str, Any]) -> LearningCurve:
        value = (config["x"] - 0.3) ** 2 + (config["y"] - 0.7) ** 2
        return LearningCurve((value,), (0.0,))


def _tpe() -> Any:
    return resolve_strategy("tpe")(search_space=SPACE, seed=5, direction=Direction.MINIMIZE)


class _Stop(Exception):
    pass


def _master(store: JobStore, state: JobState, strategy: Any, stop_after: int | None) -> Master:
    def check() -> None:
        if stop_after is not None and len(state.trials) >= stop_after:
            raise _Stop  # the master dies here: only what it stored survives

    return Master(
        settings=SearchSettings(num_iterations=24, parallelism=3),
        strategy=strategy,
        cache=MemoryCache(),
        dispatcher=SimulatedDispatcher(_Bowl(), SimulatedClock()),
        store=store,
        state=state,
        check=check,
    )


def _configs(state: JobState) -> list[tuple[str, dict[str, Any]]]:
    return [(t.trial_id, t.hyperparameters) for t in state.trials]


def test_a_master_restarted_from_snapshot_and_log_continues_exactly(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A snapshot every 4 calls at least: the interrupted run stores snapshots and log entries.
    monkeypatch.setattr(strategy_log, "SNAPSHOT_MIN", 4)
    client = redis.Redis.from_url(redis_url)
    reference = JobState("reference")
    _master(JobStore(client, f"ref-{uuid.uuid4().hex}"), reference, _tpe(), None).run_batch()

    store = JobStore(client, f"job-{uuid.uuid4().hex}")
    with pytest.raises(_Stop):
        _master(store, JobState(store.job_id), _tpe(), stop_after=13).run_batch()
    stored = store.load()
    assert stored is not None and stored.algorithm is not None
    assert stored.strategy_log, "the calls since the last snapshot are in the log"
    assert len(stored.strategy_log) < 2 * 13 // 3  # not every call: there were snapshots

    strategy = _tpe()
    strategy.load_state_dict(stored.algorithm)
    _master(store, stored, strategy, None).run_batch()

    assert _configs(stored) == _configs(reference)
    assert client.llen(store.log_key) == 0  # the finished search left a snapshot only
    final = store.load()
    assert final is not None and final.algorithm == strategy.state_dict()


def test_the_log_replayed_on_the_snapshot_gives_the_same_state(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    store = JobStore(client, f"job-{uuid.uuid4().hex}")
    state = JobState(store.job_id)
    live = strategy_log.StrategyLog(_tpe(), state.strategy_log)
    for round_ in range(6):  # fewer calls than SNAPSHOT_MIN: everything is in the log
        batch = live.sample(2)
        live.update(batch, [float(round_), float("nan")])  # a failed trial scores NaN
        _, logged = live.checkpoint(len(batch) * (round_ + 1))
        store.save(state, logged=logged)
    pending = live.sample(1)  # sampled and checkpointed: a restart must not propose it again
    store.save(state, logged=live.checkpoint(13)[1])

    stored = store.load()
    assert stored is not None and stored.algorithm is None and len(stored.strategy_log) == 13
    restored = strategy_log.StrategyLog(_tpe(), stored.strategy_log)
    restored.replay()
    assert restored.strategy.state_dict() == live.strategy.state_dict()
    assert restored.sample(1) == live.sample(1) != pending


def test_a_strategy_without_state_dict_is_not_logged(redis_url: str) -> None:
    class Plain:
        def sample_hyperparameter_candidates(self, n: int) -> list[dict[str, Any]]:
            return [{"x": 0.5}] * n

        def update_state(self, candidates: Any, scores: Any) -> None:
            pass

    log: list[list[Any]] = []
    calls = strategy_log.StrategyLog(Plain(), log)  # type: ignore[arg-type]
    calls.update(calls.sample(2), [1.0, 2.0])
    assert calls.checkpoint(2) == (None, None) and log == []
