"""A job id runs again only with a spec that computes the same numbers (every change named)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from ultron.errors import JobBusyError, SpecError
from ultron.master.heartbeat import MasterLease
from ultron.master.job_state import JobState, JobStatus, JobStore
from ultron.master.resume import MAY_CHANGE, check_or_store_spec, check_resume, spec_to_resume
from ultron.spec.job import JobSpec
from ultron.trial_records import TrialResult, TrialStatus

BASE: dict[str, Any] = {
    "name": "resume",
    "code": "/work/code",
    "model": "pkg.train:Model",
    "search_space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-1}, "layers": [1, 2]},
    "num_iterations": 4,
}


def _spec(**fields: Any) -> JobSpec:
    return JobSpec.model_validate({**BASE, **fields}, context={"check_paths": False})


def _stored(**fields: Any) -> dict[str, Any]:
    return _spec(**fields).model_dump(mode="json")


def _refused(stored: dict[str, Any], spec: JobSpec, **kwargs: Any) -> dict[str, Any]:
    with pytest.raises(SpecError) as caught:
        check_resume(stored, spec, **kwargs)
    return {issue.field: issue for issue in caught.value.issues}


# field -> (the first run's value, this run's value, the dotted path named)
REFUSED = {
    "model": ("pkg.train:Model", "pkg.train:Other", "model"),
    "seed": (0, 1, "seed"),
    "strategy": ("random", "tpe", "strategy"),
    "strategy_options": ({}, {"n_startup": 3}, "strategy_options.n_startup"),
    "objective": ({"metric": "score"}, {"metric": "loss"}, "objective.metric"),
    "objective mode": ({"mode": "minimize"}, {"mode": "maximize"}, "objective.mode"),
    "loop": ("batch", "async", "loop"),
    "early_stopping": (
        {"type": "asha", "max_resource": 9},
        {"type": "asha", "max_resource": 27},
        "early_stopping.max_resource",
    ),
    "storage": ("ultron-runs", "elsewhere", "storage"),
    "data": (None, {"url": "/data/train.parquet"}, "data"),
}


@pytest.mark.parametrize(("before", "after", "path"), REFUSED.values(), ids=list(REFUSED))
def test_a_field_that_changes_results_is_refused_and_named(
    before: Any, after: Any, path: str
) -> None:
    name = path.split(".")[0]
    issues = _refused(_stored(**{name: before}), _spec(**{name: after}))
    assert list(issues) == [path]
    issue = issues[path]
    assert "since this job id first ran" in issue.rule and "->" in issue.rule
    assert issue.fix.startswith("run with a new job id, or ")


def test_every_changed_field_is_listed_with_old_and_new() -> None:
    """The report's case: another model and another space under an old id."""
    stored = _stored()
    space = {"lr": {"type": "loguniform", "low": 1e-3, "high": 1e-1}, "layers": [1, 2, 3], "d": [0]}
    issues = _refused(stored, _spec(model="pkg.other:Net", search_space=space, seed=7))
    assert sorted(issues) == [
        "model",
        "search_space.d",
        "search_space.layers.values",
        "search_space.lr.low",
        "seed",
    ]
    assert "0.0001 -> 0.001" in issues["search_space.lr.low"].rule
    assert issues["search_space.lr.low"].value == 0.001
    assert "[1, 2] -> [1, 2, 3]" in issues["search_space.layers.values"].rule
    assert issues["search_space.d"].fix == "run with a new job id, or remove it"
    assert "'pkg.train:Model' -> 'pkg.other:Net'" in issues["model"].rule


def test_a_choice_of_1_is_not_a_choice_of_1_0_or_true() -> None:
    stored = _stored(search_space={"k": [1]})
    for other in ([1.0], [True]):
        assert list(_refused(stored, _spec(search_space={"k": other}))) == ["search_space.k.values"]


def test_a_field_left_out_counts_as_its_default() -> None:
    """An unset loop is batch (async with early stopping); an unset field counts as its default."""
    check_resume(_stored(), _spec(loop="batch"))
    stopping = {"type": "median", "max_resource": 5}
    check_resume(_stored(early_stopping=stopping), _spec(early_stopping=stopping, loop="async"))
    older = _stored(strategy="random", seed=0)
    del older["strategy"], older["seed"], older["cache"]  # a spec stored by an older ultron
    older["objective"].pop("mode")
    check_resume(older, _spec())
    assert list(_refused(older, _spec(seed=3))) == ["seed"]


ALLOWED: dict[str, Any] = {
    "num_iterations": 9,
    "parallelism": 3,
    "min_parallelism": 1,
    "trial_timeout": 60.0,
    "acquire_timeout": 5.0,
    "retries": 0,
    "max_failed_share": 0.9,
    "redis_url": "redis://elsewhere:6379/0",
    "name": "renamed",
    "resources": {"cpu": 2, "memory": "1Gi"},
    "cache": False,
    "cluster": {"type": "address", "address": "tcp://127.0.0.1:8786"},
    "budget": {"time": "2h"},
}


def test_the_fields_that_may_change_are_the_ones_listed() -> None:
    assert set(ALLOWED) == MAY_CHANGE


@pytest.mark.parametrize(("name", "value"), ALLOWED.items(), ids=list(ALLOWED))
def test_a_field_that_changes_no_number_may_change(name: str, value: Any) -> None:
    check_resume(_stored(), _spec(**{name: value}), trials_done=4)


def test_all_allowed_changes_at_once_pass() -> None:
    check_resume(_stored(), _spec(**ALLOWED), code_hash="c0de", stored_code_hash="c0de")


def test_a_job_id_is_owned_by_its_tenant() -> None:
    issues = _refused(_stored(tenant="team-a"), _spec(tenant="team-b"), trials_done=4)
    assert list(issues) == ["tenant"]
    assert "belongs to another tenant" in issues["tenant"].rule
    assert "team-a" not in str(issues["tenant"])  # the owner is not told to another tenant
    assert "new job id" in issues["tenant"].fix
    older = _stored()
    del older["tenant"]  # stored by an ultron without tenants: it was the default tenant's
    assert list(_refused(older, _spec(tenant="team-b"))) == ["tenant"]
    check_resume(older, _spec(tenant="default"))


def test_the_target_may_change_and_the_rest_of_the_objective_may_not() -> None:
    check_resume(_stored(), _spec(objective={"target": 0.1}), trials_done=4)
    issues = _refused(_stored(), _spec(objective={"metric": "loss", "target": 0.1}))
    assert list(issues) == ["objective.metric"]


def test_num_iterations_may_not_drop_below_the_trials_done() -> None:
    check_resume(_stored(num_iterations=10), _spec(num_iterations=6), trials_done=6)
    issues = _refused(_stored(num_iterations=10), _spec(num_iterations=5), trials_done=6)
    assert list(issues) == ["num_iterations"]
    assert "already holds 6 trials" in issues["num_iterations"].rule
    assert "6 or more" in issues["num_iterations"].fix


def test_parallelism_is_part_of_the_computation_with_pop() -> None:
    pop = {"type": "pop", "max_resource": 5, "options": {"target": 0.9}}
    issues = _refused(_stored(early_stopping=pop), _spec(early_stopping=pop, parallelism=2))
    assert list(issues) == ["parallelism"]
    check_resume(_stored(), _spec(parallelism=2))  # without pop it changes no number


def test_parallelism_and_epochs_are_part_of_the_computation_with_hopper() -> None:
    hopper = {
        "execution": {"mode": "hopper", "epochs": 2},
        "data": {"url": "s3://bucket/corpus/", "format": "numpy"},
    }
    issues = _refused(_stored(**hopper), _spec(**hopper, parallelism=2))
    assert list(issues) == ["parallelism"] and "hopper" in issues["parallelism"].rule
    more = {**hopper, "execution": {"mode": "hopper", "epochs": 3}}
    assert list(_refused(_stored(**hopper), _spec(**more))) == ["execution.epochs"]


def test_code_may_move_when_its_content_hash_is_the_same() -> None:
    stored = _stored(code="/old/place")
    moved = _spec(code="/new/place")
    check_resume(stored, moved, code_hash="c0de", stored_code_hash="c0de")
    issues = _refused(stored, _spec(code="/old/place"), code_hash="beef", stored_code_hash="c0de")
    assert list(issues) == ["code"]
    assert "c0de -> beef" in issues["code"].rule and "restore the code base" in issues["code"].fix
    # Without the hashes the path is all there is to compare.
    check_resume(stored, _spec(code="/old/place"))
    assert list(_refused(stored, moved)) == ["code"]


def _store(redis_url: str) -> JobStore:
    return JobStore(redis.Redis.from_url(redis_url), f"resume-{uuid.uuid4().hex[:12]}")


def test_the_first_run_stores_its_spec_and_later_runs_are_checked(redis_url: str) -> None:
    store = _store(redis_url)
    assert check_or_store_spec(store, _spec(), code_hash="c0de") is True
    state = JobState(store.job_id)
    state.trials = [
        TrialResult(f"{i:04d}", {"lr": 0.01, "layers": 1}, TrialStatus.COMPLETED, score=1.0)
        for i in range(4)
    ]
    store.save(state, state.trials)
    # Continuing with a larger budget, the code base elsewhere with the same content.
    assert (
        check_or_store_spec(store, _spec(num_iterations=7, code="/moved"), code_hash="c0de")
        is False
    )
    with pytest.raises(SpecError) as caught:
        check_or_store_spec(store, _spec(model="pkg.other:Net", num_iterations=3), code_hash="beef")
    assert sorted(i.field for i in caught.value.issues) == ["code", "model", "num_iterations"]
    stored = store.stored_spec()
    assert stored is not None and stored.spec == _stored() and stored.code_hash == "c0de"


def test_a_job_stored_without_a_spec_gets_one(redis_url: str) -> None:
    """A job an older ultron ran has a hash but no spec: this run's spec becomes its spec."""
    store = _store(redis_url)
    store.save(JobState(store.job_id), [TrialResult("0000", {"x": 1}, TrialStatus.COMPLETED)])
    assert check_or_store_spec(store, _spec(), code_hash="c0de") is True
    with pytest.raises(SpecError):
        check_or_store_spec(store, _spec(seed=1), code_hash="c0de")


TOY = Path(__file__).parents[2] / "data" / "toy"


def _started_in(folder: Path, store: JobStore, monkeypatch: pytest.MonkeyPatch) -> JobSpec:
    """The job's first run, started in ``folder`` with ``storage: runs`` (relative)."""
    monkeypatch.chdir(folder)
    spec = _spec(code=str(TOY), model="toy_model:Sleepy", storage="runs", redis_url=None)
    assert check_or_store_spec(store, spec, code_hash="c0de")
    store.set_status(JobStatus.RUNNING)
    return spec


def test_a_resume_runs_the_stored_spec_where_its_storage_was(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, first, elsewhere = _store(redis_url), tmp_path / "first", tmp_path / "elsewhere"
    first.mkdir(), elsewhere.mkdir()
    spec = _started_in(first, store, monkeypatch)
    monkeypatch.chdir(elsewhere)  # from any folder
    resumed = spec_to_resume(store, redis_url=redis_url)  # the job is lost: no lease
    assert resumed.storage == str(first / "runs") and resumed.redis_url == redis_url
    assert resumed.model == spec.model and resumed.search_space == spec.search_space
    check_or_store_spec(store, resumed, code_hash="c0de")  # the same place: accepted
    with pytest.raises(SpecError) as caught:  # `runs` here is another folder: refused
        check_or_store_spec(store, spec, code_hash="c0de")
    assert [i.field for i in caught.value.issues] == ["storage"]
    assert str(first / "runs") in str(caught.value)


def test_a_resume_of_a_completed_or_running_job_is_refused(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(redis_url)
    _started_in(tmp_path, store, monkeypatch)
    lease = MasterLease(store.client, store.job_id, ttl_s=30.0)
    assert lease.take()
    with pytest.raises(JobBusyError, match="a live process runs it"):
        spec_to_resume(store)
    lease.release()
    store.set_status(JobStatus.COMPLETED)
    with pytest.raises(SpecError, match="this job completed: there is nothing to resume"):
        spec_to_resume(store)
    store.client.hdel(store.key, "spec")
    with pytest.raises(SpecError, match="no stored spec"):
        spec_to_resume(store)
