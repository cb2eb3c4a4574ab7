"""Warm starts: earlier jobs' finished trials, told to a new job's strategy before it proposes.

A spec with ``warm_start: {jobs: [ID, ...]}`` (:mod:`ultron.spec.warm_start`) names earlier
jobs of the same tenant. Before the job spends any compute, :func:`check_sources` finds each
of them in the tenant's namespace (:func:`ultron.master.overview.find_job`: a tenant's
credentials see its own jobs only, so another tenant's job id is "not known"). When the search
starts, :func:`read_prior` reads their trial tables: every completed (or cache-answered) trial
with a value of the new job's objective metric, its configuration fitted into the new space
(:func:`ultron.algorithms.warm_start.project`: kept, projected or dropped). The master tells
the strategy these as one ``update_state`` call before its first ``sample`` (the call is in
the strategy's checkpoint, so a restarted master does not tell them twice), and stores what it
told in the job's record (:meth:`WarmStartPrior.note`).

A job with several objectives or constraints (:func:`ultron.spec.objectives.asked_metrics`)
is told each earlier trial's metric dict, as it is told its own trials' metrics: every asked
metric a finite number of that trial (its score for the earlier job's own objective metric).
A trial without one of them (a single-objective earlier job that never reported latency, say)
is dropped with the metric named: a missing metric is never filled in.

The earlier scores are a prior only, whatever changed (the space, the data, the strategy):
they are never rows of the new job's trial table, never answers of its score cache and never
its results, and they take nothing of its budget. The score cache still answers a
configuration that this very computation (the same code, data, model and seed) scored before,
as it always does.

Example:
    >>> from ultron.algorithms.space import SearchSpace, Uniform
    >>> from ultron.trial_records import TrialResult, TrialStatus
    >>> rows = [
    ...     TrialResult("0000", {"lr": 0.9}, TrialStatus.COMPLETED, score=0.8),
    ...     TrialResult("0001", {"lr": 0.1}, TrialStatus.FAILED),
    ... ]
    >>> prior = prior_of({"old": rows}, SearchSpace({"lr": Uniform(0.0, 0.5)}), metric="score")
    >>> prior.configs, prior.scores, prior.note()["projected"], prior.note()["unfinished"]
    ([{'lr': 0.5}], [0.8], 1, 1)
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ultron.algorithms.space import Config, SearchSpace
from ultron.algorithms.warm_start import Fit, project
from ultron.errors import ConfigIssue, SpecError
from ultron.master.job_state import JobStore
from ultron.master.overview import find_job
from ultron.redis import keys
from ultron.redis.tenants import is_no_permission
from ultron.spec.job import JobSpec
from ultron.spec.objectives import asked_metrics, mirror_first_objective
from ultron.trial_records import TrialResult, TrialStatus

__all__ = ["WarmStartPrior", "check_sources", "prior_of", "read_prior"]

logger = logging.getLogger(__name__)

_TOLD = (TrialStatus.COMPLETED, TrialStatus.CACHED)  # a full training's score
_EXAMPLES = 5  # reasons for dropping kept in the note, the first of each job


@dataclass
class WarmStartPrior:
    """What a warm start tells the strategy, and how every earlier trial fared.

    Attributes:
        jobs: the earlier jobs, as the spec names them.
        configs: the configurations to tell, each inside the new space.
        scores: their scores (the new job's objective metric), in the same order; with
            several objectives or constraints, each a dict of the asked metrics.
        projected: how many of ``configs`` were changed to fit the new space.
        dropped: earlier finished trials not told: they cannot fit, or lack the metric.
        unfinished: earlier trials with no full score (failed, stopped early): never told.
        why_dropped: a few of the reasons, ``"job/trial: reason"``.
    """

    jobs: list[str]
    configs: list[Config] = field(default_factory=list)
    scores: list[float | dict[str, float]] = field(default_factory=list)
    projected: int = 0
    dropped: int = 0
    unfinished: int = 0
    why_dropped: list[str] = field(default_factory=list)

    def note(self) -> dict[str, Any]:
        """The job's record of its warm start (``JobState.warm_start``), as JSON data."""
        return {
            "jobs": list(self.jobs),
            "told": len(self.configs),
            "projected": self.projected,
            "dropped": self.dropped,
            "unfinished": self.unfinished,
            "why_dropped": list(self.why_dropped),
        }

    def summary(self) -> str:
        """One line for the job's log."""
        text = (
            f"warm start from {', '.join(self.jobs)}: told the strategy {len(self.configs)} "
            f"earlier trials ({self.projected} projected into this space), dropped "
            f"{self.dropped}, {self.unfinished} unfinished not told; none is trained again or "
            "counted in this job's budget"
        )
        if self.why_dropped:
            text += f" (dropped: {'; '.join(self.why_dropped)})"
        return text


def check_sources(client: Any, spec: JobSpec, job_id: str) -> dict[str, str]:
    """The namespace of each job ``spec.warm_start`` names: they must be earlier jobs of the
    job's own tenant. Call it before any compute.

    Raises:
        SpecError: a job that is not known to the tenant (or another tenant's), or the job
            itself; every such job at once, on ``warm_start.jobs``.
    """
    if spec.warm_start is None:
        return {}
    namespace = keys.tenant_namespace(spec.tenant)
    found: dict[str, str] = {}
    issues = []
    for source in spec.warm_start.jobs:
        if source == job_id:
            issues.append(
                ConfigIssue(
                    "warm_start.jobs",
                    source,
                    "it is this job's own id, and a job cannot warm-start from itself",
                    "name earlier jobs only; to continue this job, raise num_iterations",
                )
            )
        elif _known(client, source, namespace):
            found[source] = namespace
        else:
            issues.append(
                ConfigIssue(
                    "warm_start.jobs",
                    source,
                    f"it is not known: tenant {spec.tenant!r} has no job of this id in this "
                    "Redis, and a job warm-starts only from its own tenant's jobs",
                    "check the id with `ultron jobs`, against the Redis the earlier job used",
                )
            )
    if issues:
        raise SpecError(issues, source="job spec")
    return found


def _known(client: Any, job_id: str, namespace: str) -> bool:
    """Whether ``job_id`` is a job in ``namespace`` for these credentials."""
    if find_job(client, job_id) == namespace:
        return True
    try:  # an admin's find_job may find another tenant's job of the same id first
        return bool(client.exists(keys.job(job_id, namespace=namespace)))
    except Exception as exc:
        if is_no_permission(exc):  # a tenant's credentials: another tenant's namespace
            return False
        raise


def read_prior(client: Any, spec: JobSpec, job_id: str) -> WarmStartPrior:
    """The earlier jobs' finished trials as the new job's strategy is told them.

    Raises:
        SpecError: as :func:`check_sources`.
    """
    tables, metrics = {}, {}
    for source, namespace in check_sources(client, spec, job_id).items():
        store = JobStore(client, source, namespace=namespace)
        rows = client.hgetall(store.trials_key)
        tables[source] = sorted(
            (TrialResult.from_dict(json.loads(v)) for v in rows.values()),
            key=lambda t: t.trial_id,
        )
        stored = store.stored_spec()
        # A spec stored with objectives only: its score is the first one's (as it validated).
        raw = mirror_first_objective(stored.spec) if stored else {}
        objective = raw.get("objective") or {}
        metrics[source] = str(objective.get("metric") or "score")
    return prior_of(
        tables,
        spec.space,
        metric=spec.objective.metric,
        source_metrics=metrics,
        metrics=asked_metrics(spec),
    )


def prior_of(
    tables: Mapping[str, Sequence[TrialResult]],
    space: SearchSpace,
    *,
    metric: str,
    source_metrics: Mapping[str, str] | None = None,
    metrics: Sequence[str] = (),
) -> WarmStartPrior:
    """The prior from earlier jobs' trial tables (job id -> rows), for a job over ``space``
    that optimizes ``metric``.

    A row's ``score`` is its job's objective metric (``source_metrics``, by job id; default:
    ``metric``); another metric is read from its ``metrics``. With ``metrics`` (several
    objectives or constraints: the metrics each trial must return), each score told is the
    dict of those metrics, and a row lacking a finite value of any of them is dropped.

    Example:
        >>> from ultron.algorithms.space import SearchSpace, Uniform
        >>> from ultron.trial_records import TrialResult, TrialStatus
        >>> old = [TrialResult("0000", {"lr": 0.1}, TrialStatus.COMPLETED, score=0.9)]
        >>> prior = prior_of({"old": old}, SearchSpace({"lr": Uniform(0.0, 0.5)}),
        ...                  metric="score", metrics=("score", "latency_ms"))
        >>> prior.configs, prior.why_dropped
        ([], ["old/0000: it has no finite value of the metric 'latency_ms'"])
    """
    prior = WarmStartPrior(jobs=list(tables))
    for source, trials in tables.items():
        examples = 0
        own = (source_metrics or {}).get(source, metric)
        for trial in trials:
            if trial.status not in _TOLD:
                prior.unfinished += 1
                continue
            names = tuple(metrics) or (metric,)
            values = {name: _value(trial, name, own) for name in names}
            missing = [name for name, value in values.items() if value is None]
            fitted = project(trial.hyperparameters, space)
            why = fitted.why
            if missing:
                why = f"it has no finite value of the metric {missing[0]!r}"
            if fitted.config is None or missing:
                prior.dropped += 1
                if examples < _EXAMPLES:
                    prior.why_dropped.append(f"{source}/{trial.trial_id}: {why}")
                    examples += 1
                continue
            prior.configs.append(fitted.config)
            told = {name: float(value) for name, value in values.items() if value is not None}
            prior.scores.append(told if metrics else told[metric])
            prior.projected += fitted.fit is Fit.PROJECTED
    return prior


def _value(trial: TrialResult, name: str, own: str) -> float | None:
    """The trial's finite value of metric ``name``; ``own`` is its job's objective metric,
    whose value is the trial's score."""
    if name == own and _number(trial.score) is not None:
        return _number(trial.score)
    return _number(trial.metrics.get(name))


def _number(value: Any) -> float | None:
    """``value`` as a finite float, or ``None`` when it is not one."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
