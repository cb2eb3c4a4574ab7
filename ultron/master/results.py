"""The job's results: the leaderboard, the best configuration and the trial table.

Written by ``finalize`` to ``<storage>/<job_id>/`` through fsspec (a folder by default):
``leaderboard.csv``, ``best.json``, ``trials.json`` and ``curves.json``, strict JSON
(:mod:`ultron.strict_json`: a NaN or infinity is written as ``null``). ``best.json`` also
carries the job's ``status``, ``error`` and ``warnings`` (e.g. checkpoints that never reached the
store, listed in ``unsynced_checkpoints``). A job with several objectives has its Pareto front in
``best.json`` (``pareto``) and a ``pareto_rank`` column in the leaderboard; with constraints, each
trial's row says whether it is ``feasible`` (:mod:`ultron.master.pareto`).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import fsspec

from ultron import strict_json
from ultron.algorithms.base import Direction
from ultron.algorithms.objectives import Bound, Goal, losses, nondominated_ranks
from ultron.errors import ConfigIssue, SpecError, UltronError
from ultron.master.pareto import is_feasible, pareto_record, ranked_trials
from ultron.trial_records import TrialResult, TrialStatus

__all__ = [
    "HPOResult",
    "best_trial",
    "check_no_foreign_results",
    "leaderboard",
    "objectives_record",
    "recorded_trial_ids",
    "write_results",
]


def leaderboard(
    trials: Sequence[TrialResult],
    direction: Direction,
    *,
    goals: Sequence[Goal] = (),
    bounds: Sequence[Bound] = (),
) -> list[TrialResult]:
    """Trials with a score, best first (ties keep trial order); with several objectives
    (``goals``) or constraints (``bounds``), see :func:`ultron.master.pareto.ranked_trials`."""
    if len(goals) > 1 or bounds:
        return ranked_trials(trials, direction, goals, bounds)
    scored = [t for t in trials if t.status.ok and t.score is not None]
    sign = -1.0 if direction is Direction.MAXIMIZE else 1.0
    return sorted(scored, key=lambda t: sign * float(t.score or 0.0))


def best_trial(
    trials: Sequence[TrialResult],
    direction: Direction,
    *,
    goals: Sequence[Goal] = (),
    bounds: Sequence[Bound] = (),
) -> TrialResult | None:
    """The best scored trial (with constraints: the best feasible one), or ``None`` when no
    trial has a score (or none is feasible)."""
    board = leaderboard(trials, direction, goals=goals, bounds=bounds)
    return board[0] if board and is_feasible(board[0], bounds) else None


@dataclass(frozen=True)
class HPOResult:
    """What a finished job gives back.

    Attributes:
        job_id: the job's id (run again with it to resume).
        status: ``completed`` or ``failed``.
        best_config: the best configuration found (``None`` if nothing scored).
        best_score: its objective value.
        trials: every trial, in order.
        cache_hits: trials answered from the score cache.
        results_url: where the result files are.
        files: name -> path of each result file.
        direction: whether lower or higher scores are better.
        timings: seconds spent in each task of the flow.
        best_checkpoint: where the best trial's committed checkpoints are (if it saved any).
        warnings: what went wrong without failing the job (e.g. checkpoints not in the store).
        unsynced_checkpoints: the checkpoints that never reached the store, one dict each:
            ``trial_id``, ``checkpoint``, ``local_path``, ``store_url`` and ``error``.
        end_reason: why the job ended (``budget: 20 trials``, ``time budget``, ``target
            reached by trial 0007``, ``search space exhausted``, ``cancelled``, ``failed: ...``).
        pareto: with several objectives, the feasible trials no other one dominates (the
            Pareto front), in trial order; empty otherwise.
    """

    job_id: str
    status: str
    best_config: dict[str, Any] | None
    best_score: float | None
    trials: list[TrialResult]
    cache_hits: int
    results_url: str
    files: dict[str, str] = field(default_factory=dict)
    direction: Direction = Direction.MINIMIZE
    timings: dict[str, float] = field(default_factory=dict)
    best_checkpoint: str | None = None
    warnings: list[str] = field(default_factory=list)
    unsynced_checkpoints: list[dict[str, str]] = field(default_factory=list)
    end_reason: str | None = None
    pareto: list[TrialResult] = field(default_factory=list)

    @classmethod
    def from_summary(cls, summary: dict[str, Any]) -> HPOResult:
        trials = [TrialResult.from_dict(t) for t in summary["trials"]]
        return cls(
            job_id=summary["job_id"],
            status=summary["status"],
            best_config=summary["best_config"],
            best_score=summary["best_score"],
            trials=trials,
            cache_hits=sum(t.status is TrialStatus.CACHED for t in trials),
            results_url=summary["results_url"],
            files=summary["files"],
            direction=Direction(summary["mode"]),
            timings=summary.get("timings", {}),
            best_checkpoint=summary.get("best_checkpoint"),
            warnings=summary.get("warnings", []),
            unsynced_checkpoints=summary.get("unsynced_checkpoints", []),
            end_reason=summary.get("end_reason"),
            pareto=[t for t in trials if t.trial_id in set(summary.get("pareto") or ())],
        )


def recorded_trial_ids(url: str) -> set[str] | None:
    """The trial ids of the trial table already written under ``url``; ``None`` if none is."""
    fs, root = fsspec.core.url_to_fs(url)
    path = f"{root.rstrip('/')}/trials.json"
    if not fs.exists(path):
        return None
    with fs.open(path, "r") as handle:
        rows = json.load(handle)
    return {str(row.get("trial_id")) for row in rows if isinstance(row, dict)}


def check_no_foreign_results(url: str, job_id: str) -> None:
    """Refuse a first run of ``job_id`` (its Redis has no record of it) whose storage already
    holds results of a job of that id: it would write another trial table over them (a run
    with another ``redis_url``, or after its Redis lost its data).

    Raises:
        SpecError: naming ``job_id``, where the results are, and the fix.
    """
    if recorded_trial_ids(url) is None:
        return
    rule = (
        f"results of a job with this id are at {url}, but this job's Redis has no record of it, "
        "so this run would write another trial table over them"
    )
    fix = "run with the Redis that ran the job (its redis_url), or with a new job id"
    raise SpecError([ConfigIssue("job_id", job_id, rule, fix)], source="job")


def _cell(value: Any) -> Any:
    """A leaderboard cell: a list of layers (a variable-length space) as JSON, not repr."""
    return json.dumps(value, sort_keys=True) if isinstance(value, list | dict) else value


def _leaderboard_csv(
    board: Sequence[TrialResult], metric: str, goals: Sequence[Goal], bounds: Sequence[Bound]
) -> str:
    names = sorted({k for t in board for k in t.hyperparameters})
    several = [g.metric for g in goals] if len(goals) > 1 else []
    limited = list(dict.fromkeys(b.metric for b in bounds if b.metric not in several))
    feasible = [t for t in board if is_feasible(t, bounds)]
    ranks = nondominated_ranks([losses(t.metrics, goals) for t in feasible]) if several else []
    rank_of = {id(t): r for t, r in zip(feasible, ranks, strict=True)} if several else {}
    out = io.StringIO()
    writer = csv.writer(out)
    header = ["rank", "trial_id", *(several or [metric]), *limited, "status"]
    header += ["pareto_rank"] if several else []
    header += ["feasible"] if bounds else []
    writer.writerow([*header, *names])
    for rank, t in enumerate(board, 1):
        values = [t.metrics.get(m) for m in several] or [t.score]
        row = [rank, t.trial_id, *values, *(t.metrics.get(m) for m in limited), t.status]
        row += [rank_of.get(id(t), "")] if several else []
        row += [is_feasible(t, bounds)] if bounds else []
        writer.writerow([*row, *(_cell(t.hyperparameters.get(n)) for n in names)])
    return out.getvalue()


def objectives_record(goals: Sequence[Goal], bounds: Sequence[Bound]) -> dict[str, Any]:
    """Several objectives and constraints as ``best.json`` holds them (read back by
    ``ultron.reporting.files.JobFiles``); empty for one objective without constraints."""
    record: dict[str, Any] = {}
    if len(goals) > 1:
        record["objectives"] = [{"metric": g.metric, "mode": str(g.direction)} for g in goals]
    if bounds:
        record["constraints"] = [{"metric": b.metric, "min": b.low, "max": b.high} for b in bounds]
    return record


def _trial_rows(trials: Sequence[TrialResult], bounds: Sequence[Bound]) -> list[dict[str, Any]]:
    """The trial table's rows; with constraints, a scored trial's row says if it is feasible."""
    rows = [t.to_dict() for t in trials]
    if bounds:
        for row, t in zip(rows, trials, strict=True):
            if t.status.ok and t.score is not None:
                row["feasible"] = is_feasible(t, bounds)
    return rows


def write_results(
    url: str,
    *,
    trials: Sequence[TrialResult],
    curves: dict[str, Any],
    direction: Direction,
    metric: str,
    extra: dict[str, Any],
    goals: Sequence[Goal] = (),
    bounds: Sequence[Bound] = (),
) -> dict[str, str]:
    """Write the result files under ``url``; returns name -> full path.

    ``goals`` (several objectives) and ``bounds`` (constraints) add the Pareto front and
    feasibility; the best trial is then the best feasible one.

    Raises:
        UltronError: the files there hold trials that ``trials`` lacks: they are kept.
    """
    before = recorded_trial_ids(url) or set()
    lacking = sorted(before - {t.trial_id for t in trials})
    if lacking:  # never a poorer record over a richer one
        named = ", ".join(lacking[:5]) + (", ..." if len(lacking) > 5 else "")
        raise UltronError(
            f"the result files at {url} hold trials this job's table lacks ({named}), and were "
            "left as they are. Fix: run the "
            "job with the Redis that holds its whole table (its redis_url), or with a new job id"
        )
    fs, root = fsspec.core.url_to_fs(url)
    fs.makedirs(root, exist_ok=True)
    board = leaderboard(trials, direction, goals=goals, bounds=bounds)
    best = board[0] if board and is_feasible(board[0], bounds) else None
    several = objectives_record(goals, bounds)
    if len(goals) > 1:
        several["pareto"] = pareto_record(trials, goals, bounds)
    if bounds:
        several["infeasible_trials"] = [t.trial_id for t in board if not is_feasible(t, bounds)]
    contents = {
        "leaderboard.csv": _leaderboard_csv(board, metric, goals, bounds),
        "best.json": strict_json.dumps(
            {
                "best_config": best.hyperparameters if best else None,
                "best_score": best.score if best else None,
                "best_trial": best.trial_id if best else None,
                "metric": metric,
                "mode": str(direction),
                **several,
                **extra,
            },
            indent=2,
        ),
        "trials.json": strict_json.dumps(_trial_rows(trials, bounds), indent=2),
        "curves.json": strict_json.dumps(curves),
    }
    files = {}
    for name, text in contents.items():
        path = f"{root.rstrip('/')}/{name}"
        with fs.open(path, "w") as handle:
            handle.write(text)
        files[name] = path if "://" not in url else f"{url.rstrip('/')}/{name}"
    return files
