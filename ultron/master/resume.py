"""Whether a job id may run again with the spec it is given: resuming and continuing a job.

A job id names one computation. Its first run stores its spec and its code base's content hash
(:meth:`~ultron.master.job_state.JobStore.save_spec`); a later run with the same id adds to its
trial table, so it must compute what the first run computed. :func:`check_resume` compares the
two specs and refuses every change that could change a number in the job's results, listing
all of them at once.

These fields may change, because no score depends on them (:data:`MAY_CHANGE`):

- ``num_iterations``: the budget. Raising it continues a completed or cancelled job with its
  history (the strategy's state is restored, no trial is trained again). It may not drop below
  the trials the job's table already holds: the table would hold more trials than the budget.
- ``parallelism`` (unless the stopper is ``pop``, whose population has ``parallelism`` slots,
  or ``execution`` is ``hopper``, whose data has ``parallelism`` partitions),
  ``min_parallelism``, ``trial_timeout``, ``acquire_timeout``, ``retries``,
  ``max_failed_share``, ``resources``, ``cache``, ``cluster``, ``redis_url`` and ``name``.
- ``budget`` (its ``time``: a resumed job has what its earlier runs left of it) and
  ``objective.target``: when the job ends, not what it computes.
- ``code`` may point elsewhere when the code base's content hash is the same.

A job id is owned by the ``tenant`` of its first run: a run of it by another tenant is refused
whatever else it keeps, so one tenant can never add to, read back or continue another's trial
table, scores or checkpoints (the checkpoints live under the job's own prefix,
``<storage>/<job_id>/checkpoints``, which a job id owned by one tenant makes that tenant's).

Everything else is refused: the code base's content, ``model``, ``search_space``,
``strategy``, ``strategy_options``, ``objective``, ``seed``, ``loop`` (as it runs: an unset
loop is ``batch``, or ``async`` with early stopping), ``early_stopping``, ``data``,
``warm_start`` (the strategy was told those jobs' trials), and ``storage`` (one job's results
in two places could not be told apart). A field that a later version of ultron adds is refused
too until it is listed here. Fields that the stored spec
lacks (written by an older ultron) count as their defaults.

Example:
    >>> from ultron.spec.job import JobSpec
    >>> def spec(**fields):
    ...     base = {"code": ".", "model": "pkg.train:Model", "search_space": {"x": [1, 2]}}
    ...     return JobSpec.model_validate({**base, **fields}, context={"check_paths": False})
    >>> first = spec(num_iterations=4).model_dump(mode="json")
    >>> check_resume(first, spec(num_iterations=7, parallelism=2))  # continues the job
    >>> try:
    ...     check_resume(first, spec(seed=1, search_space={"x": [1, 2, 3]}))
    ... except SpecError as exc:
    ...     print([issue.field for issue in exc.issues])
    ['search_space.x.values', 'seed']
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ultron.errors import ConfigIssue, JobBusyError, SpecError
from ultron.master.job_state import ACTIVE, JobStore, StoredSpec
from ultron.paths import storage_location
from ultron.secrets import redacted_spec
from ultron.spec.job import JobSpec

__all__ = ["MAY_CHANGE", "check_or_store_spec", "check_resume"]

logger = logging.getLogger(__name__)

MAY_CHANGE = frozenset(
    {
        "acquire_timeout",
        "budget",
        "cache",
        "cluster",
        "max_failed_share",
        "min_parallelism",
        "name",
        "num_iterations",
        "parallelism",
        "redis_url",
        "resources",
        "retries",
        "trial_timeout",
    }
)
"""Fields of :class:`~ultron.spec.job.JobSpec` that a resumed job may change."""

_FIX = "run with a new job id, or change it back"

# Inside fields that may not change, what no score depends on: when the job ends.
_GOALS = frozenset({"objective.target"})


class _Absent:
    def __repr__(self) -> str:
        return "(not set)"


_ABSENT = _Absent()


def check_resume(
    stored: dict[str, Any],
    spec: JobSpec,
    *,
    code_hash: str | None = None,
    stored_code_hash: str | None = None,
    trials_done: int = 0,
    stored_storage_at: str | None = None,
) -> None:
    """Refuse to run ``spec`` under a job id whose first run used ``stored``, if a number could
    differ.

    Args:
        stored: the spec the job id first ran with (``JobSpec.model_dump(mode="json")``).
        spec: the spec of this run.
        code_hash: the content hash of this run's code base.
        stored_code_hash: the content hash the first run stored. With both hashes the code
            base is compared by content (its path may change); without them, by path.
        trials_done: how many trials the job's table holds (``num_iterations`` may not drop
            below it).
        stored_storage_at: where the first run's storage was (a relative folder resolved
            where it ran). With it, ``storage`` is compared by place: the same folder given
            another way passes, the same relative name in another folder is refused.

    Raises:
        SpecError: one issue per changed field (dotted path, old -> new), all at once.
    """
    new = redacted_spec(spec)  # stored specs keep URL passwords masked
    issues: list[ConfigIssue] = []
    for name in JobSpec.model_fields:
        if name in MAY_CHANGE or name in ("code", "loop"):
            continue
        if name == "storage" and stored_storage_at is not None:
            issues += _storage_issues(stored_storage_at, spec.storage)
            continue
        old_value = _normalized(name, stored[name]) if name in stored else _default(spec, name)
        if name == "tenant":
            issues += _tenant_issues(old_value, new[name])
            continue
        issues += [
            _changed(path, old, value)
            for path, old, value in _diff(name, old_value, new[name])
            if path not in _GOALS
        ]
    issues += _code_issues(stored, spec, code_hash, stored_code_hash)
    old_loop = stored.get("loop") or ("async" if stored.get("early_stopping") else "batch")
    if old_loop != spec.loop_kind:
        issues.append(_changed("loop", old_loop, spec.loop_kind))
    issues += _budget_issues(stored, spec, trials_done)
    if issues:
        raise SpecError(sorted(issues, key=lambda issue: issue.field), source="resumed job spec")


def check_or_store_spec(store: JobStore, spec: JobSpec, *, code_hash: str) -> bool:
    """Check a run of ``store``'s job id against its first run, or store it as the first.

    Call it before the job spends any compute: a run that is refused has changed nothing.

    Returns:
        Whether this run is the job id's first (its spec and code hash are stored now).

    Raises:
        SpecError: the job id ran before with a spec or code base that computes other numbers
            (:func:`check_resume`).
    """
    stored = store.stored_spec()
    if stored is None:
        if store.save_spec(spec, code_hash=code_hash):
            if store.trial_count():
                logger.warning(
                    "job %s has trials but no stored spec (an older ultron ran it); its spec "
                    "is stored now and later runs are checked against it",
                    store.job_id,
                )
            return True
        stored = store.stored_spec()  # another run of the same id stored it in between
        assert stored is not None  # save_spec stores it unless it is there
    check_stored_spec(store, stored, spec, code_hash=code_hash)
    return False


def check_stored_spec(
    store: JobStore, stored: StoredSpec, spec: JobSpec, *, code_hash: str
) -> None:
    """The read-only half of :func:`check_or_store_spec`: check a run against ``stored``, its
    job id's first run, and write nothing. A run refused here leaves the job's record as it
    was (the job's lifecycle calls it before it takes the job's lease, whose heartbeat writes
    to the record; :func:`check_or_store_spec` checks again under the lease).

    Raises:
        SpecError: as :func:`check_or_store_spec`.
    """
    check_resume(
        stored.spec,
        spec,
        code_hash=code_hash,
        stored_code_hash=stored.code_hash,
        trials_done=store.trial_count(),
        stored_storage_at=stored.storage_at,
    )


def _storage_issues(stored_at: str, storage: str) -> list[ConfigIssue]:
    at = storage_location(storage)
    if at == stored_at:
        return []
    rule = (
        f"it is {at!r} here, but this job id's results are at {stored_at!r} (a relative folder "
        "is resolved in the folder a run starts in), and one job's results may not be split"
    )
    return [
        ConfigIssue(
            "storage",
            storage,
            rule,
            f"set storage to {stored_at!r}, or run with `ultron resume JOB`, which finds it",
        )
    ]


def _normalized(name: str, value: Any) -> Any:
    """A stored field as the current model would dump it (nested defaults filled in); as
    stored when it no longer validates (then any difference shows)."""
    adapter = _adapter(name)
    try:
        return adapter.dump_python(adapter.validate_python(value), mode="json")
    except ValidationError:
        return value


@functools.cache
def _adapter(name: str) -> TypeAdapter[Any]:
    return TypeAdapter(JobSpec.model_fields[name].annotation or Any)


def _default(spec: JobSpec, name: str) -> Any:
    """The default of a field, dumped as JSON; ``_ABSENT`` for a field without one."""
    info = JobSpec.model_fields[name]
    if info.is_required():
        return _ABSENT
    default = info.get_default(call_default_factory=True)
    return spec.model_copy(update={name: default}).model_dump(mode="json")[name]


def _diff(path: str, old: Any, new: Any) -> list[tuple[str, Any, Any]]:
    """Every leaf where ``old`` and ``new`` differ: (dotted path, old, new)."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new), key=str):
            found += _diff(f"{path}.{key}", old.get(key, _ABSENT), new.get(key, _ABSENT))
        return found
    return [] if _same(old, new) else [(path, old, new)]


def _same(old: Any, new: Any) -> bool:
    """Equal as JSON: 1, 1.0 and true are three different values to a model."""
    if old is _ABSENT or new is _ABSENT:
        return old is new
    return json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True)


def _tenant_issues(old: Any, new: Any) -> list[ConfigIssue]:
    # The owner is not named: a job id tells another tenant nothing about who ran it.
    if old == new:
        return []
    rule = (
        "this job id belongs to another tenant (the tenant of its first run), and a job id's "
        "trial table, scores and checkpoints are its tenant's alone: another tenant may not "
        "run or continue it"
    )
    return [ConfigIssue("tenant", new, rule, "run with a new job id of your own")]


def _changed(path: str, old: Any, new: Any, *, what: str = "") -> ConfigIssue:
    return ConfigIssue(
        path,
        new,
        f"it changed {old!r} -> {new!r}{what} since this job id first ran, and a resumed job "
        "must keep every field that changes its results",
        f"{_FIX} to {old!r}" if old is not _ABSENT else "run with a new job id, or remove it",
    )


def _code_issues(
    stored: dict[str, Any], spec: JobSpec, code_hash: str | None, stored_code_hash: str | None
) -> list[ConfigIssue]:
    if code_hash is not None and stored_code_hash is not None:
        if code_hash == stored_code_hash:
            return []
        return [
            ConfigIssue(
                "code",
                str(spec.code),
                f"its content changed (hash {stored_code_hash[:12]} -> {code_hash[:12]}; the "
                f"job first ran with {stored.get('code')!r}), and a resumed job must run the "
                "same code",
                "run with a new job id, or restore the code base as it was",
            )
        ]
    old = stored.get("code")
    if old is not None and Path(old) == spec.code:
        return []
    return [_changed("code", old, str(spec.code), what=" (its content hash is not known)")]


def _budget_issues(stored: dict[str, Any], spec: JobSpec, trials_done: int) -> list[ConfigIssue]:
    issues = []
    if spec.num_iterations < trials_done:
        issues.append(
            ConfigIssue(
                "num_iterations",
                spec.num_iterations,
                f"the job already holds {trials_done} trials, and its budget must be at least that",
                f"set num_iterations to {trials_done} or more, or run with a new job id",
            )
        )
    stopper = spec.early_stopping.type if spec.early_stopping else None
    if stopper == "pop" and stored.get("parallelism", 1) != spec.parallelism:
        # pop's population has one slot per parallel trial: its decisions depend on it.
        old = stored.get("parallelism", 1)
        issues.append(_changed("parallelism", old, spec.parallelism, what=" (with pop)"))
    elif spec.execution.hopper and stored.get("parallelism", 1) != spec.parallelism:
        # a hopper job's partitions: each model's records and their order depend on them.
        old = stored.get("parallelism", 1)
        issues.append(_changed("parallelism", old, spec.parallelism, what=" (with hopper)"))
    return issues


def spec_to_resume(store: JobStore, *, redis_url: str | None = None) -> JobSpec:
    """The spec that resumes ``store``'s job as its first run stored it, with no spec file,
    from any folder: its storage where the first run's was, its Redis ``redis_url`` (the one
    the job was found in; ``None``: the job's own choice, as its first run made it).

    Raises:
        SpecError: the job cannot resume: it has no stored spec, it completed, or its stored
            spec no longer validates (naming what to do instead).
        JobBusyError: a live master runs the job.
    """
    from ultron.master.heartbeat import effective_status
    from ultron.redis import keys
    from ultron.spec.loader import load_spec

    job_id = store.job_id
    stored = store.stored_spec()
    if stored is None:
        raise SpecError(
            [
                ConfigIssue(
                    "JOB",
                    job_id,
                    "this job has no stored spec to resume from (it never "
                    "started, or an ultron before 0.1 ran it)",
                    "run its spec again: ultron run SPEC --job-id " + job_id,
                )
            ],
            source="ultron resume",
        )
    raw_status = store.client.hget(store.key, "status")
    holder = store.client.get(keys.job_master(job_id, namespace=store.namespace))
    status = effective_status(raw_status.decode() if raw_status else "", holder is not None)
    if status == "completed":
        raise SpecError(
            [
                ConfigIssue(
                    "JOB",
                    job_id,
                    "this job completed: there is nothing to resume",
                    "to run more trials, raise num_iterations: ultron run SPEC --job-id " + job_id,
                )
            ],
            source="ultron resume",
        )
    if status in ACTIVE:
        raise JobBusyError(
            f"job {job_id} is {status}: a live process runs it ({holder.decode()}); "
            f"one master runs a job at a time. Fix: wait for it (`ultron status {job_id}`), "
            f"or stop it with `ultron cancel {job_id}` first"
        )
    raw = dict(stored.spec)
    if stored.storage_at is not None:
        raw["storage"] = stored.storage_at
    raw["redis_url"] = redis_url
    return load_spec(raw, check_code=True)
