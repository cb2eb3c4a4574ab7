"""Is POP's curve model calibrated, and does it rank early curves? Checked on all 34 LCBench tasks.

POP needs ``P(y(52) >= target)`` from a partial learning curve. Its model
(:class:`ultron.algorithms.curve_model.CurveModel`) predicts from the job's finished curves
(kernel on the prefix, split-conformal residuals) once it has ``min_references`` of them, and
from the parametric ensemble widened (:func:`ultron.algorithms.curve_model.widen`) before.

Per task: ``configs`` random configurations (seeded by the task id), split in two halves; each
half's curves are the finished references that predict the other half's (two folds, so every
configuration is predicted once, by a model that never saw its curve), with all of the
half's references and with only the first ``few`` of them. The fallback is checked on the
first ``fallback`` configurations of each half (it fits curves: 100 times slower), beside
the ensemble alone (what POP used before).

Reported per number of epochs seen: coverage of the central 80% interval of the epoch-52
accuracy (pooled over tasks; in brackets the range over tasks), median absolute error of the
median, and the ranking of the eventual winners (the configurations whose epoch-52 accuracy is
in the task's top 10%): the AUC of ``p = P(y(52) >= q90)`` and, for comparison, of the value
reached, and the Brier score of ``p``.

Run: ``python -m benchmarks.curves_check`` (about 2 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from benchmarks.data import DataMissing
from benchmarks.lcbench import EPOCHS, SPACE, LCBench
from ultron.algorithms.curve_model import CurveModel, widen
from ultron.algorithms.curves import CurvePrediction, extrapolate

SEEN = (1, 4, 10, 25)
BOUNDS = (0.0, 100.0)


def _auc(score: np.ndarray, positive: np.ndarray) -> float:
    """Probability that a positive scores above a negative (ties count half)."""
    pos, neg = score[positive], score[~positive]
    if not len(pos) or not len(neg):
        return float("nan")
    above = (pos[:, None] > neg[None, :]).mean()
    ties = (pos[:, None] == neg[None, :]).mean()
    return float(above + 0.5 * ties)


def _fitted(refs: np.ndarray) -> CurveModel:
    model = CurveModel(EPOCHS, min_references=2, bounds=BOUNDS)
    for row in refs:
        model.add_reference(row)
    return model


def _predict(
    model: str, curve: np.ndarray, seen: int, fitted: CurveModel, rng: np.random.Generator
) -> CurvePrediction:
    steps = np.arange(1, seen + 1)
    if model == "references":
        return fitted.predict(steps, curve[:seen], [EPOCHS], rng=rng)
    raw = extrapolate(steps, curve[:seen], [EPOCHS], rng=rng, bootstrap=6, bounds=BOUNDS)
    return raw if model == "ensemble" else widen(raw, steps, curve[:seen], bounds=BOUNDS)


class Row(NamedTuple):
    """One prediction of one configuration's epoch-52 accuracy."""

    model: str  # references | fallback | ensemble
    references: int
    seen: int
    outcome: float
    low: float
    mid: float
    high: float
    p: float  # P(y(52) >= the task's q90)
    reached: float  # the value at ``seen``
    winner: bool  # outcome >= the task's q90


def task_rows(
    values: np.ndarray, *, few: int, fallback: int, rng: np.random.Generator
) -> list[Row]:
    """Every prediction of one task's configurations (curves ``values``, ``(configs, 52)``)."""
    threshold = float(np.quantile(values[:, -1], 0.9))
    half = len(values) // 2
    folds = [(values[:half], values[half:]), (values[half:], values[:half])]
    rows = []
    for refs, queries in folds:
        for model, n, count in (
            ("references", len(refs), len(queries)),
            ("references", few, len(queries)),
            ("fallback", 0, fallback),
            ("ensemble", 0, fallback),
        ):
            fitted = _fitted(refs[:n])
            for seen in SEEN:
                if model != "references" and seen < 4:
                    continue  # fewer than 3 points: the ensemble repeats the last value
                for curve in queries[:count]:
                    prediction = _predict(model, curve, seen, fitted, rng)
                    low, mid, high = prediction.quantiles([0.1, 0.5, 0.9])[:, 0]
                    p = float(prediction.prob_at_least(threshold)[0])
                    outcome = float(curve[-1])
                    rows.append(
                        Row(
                            model,
                            n,
                            seen,
                            outcome,
                            low,
                            mid,
                            high,
                            p,
                            float(curve[seen - 1]),
                            outcome >= threshold,
                        )
                    )
    return rows


def _line(group: dict[str, list[Row]]) -> str:
    """One table line from the rows of one (model, references, seen), by task."""
    rows = [r for task_rows in group.values() for r in task_rows]
    first = rows[0]
    outcome = np.array([r.outcome for r in rows])
    mid = np.array([r.mid for r in rows])
    covered = np.array([r.low <= r.outcome <= r.high for r in rows])
    rates = [np.mean([r.low <= r.outcome <= r.high for r in t]) for t in group.values()]
    auc_p, auc_reached = [], []
    for task_rows in group.values():
        winner = np.array([r.winner for r in task_rows])
        auc_p.append(_auc(np.array([r.p for r in task_rows]), winner))
        auc_reached.append(_auc(np.array([r.reached for r in task_rows]), winner))
    brier = np.mean([(r.p - r.winner) ** 2 for r in rows])
    return (
        f"| {first.model} | {first.references} | {first.seen} | {covered.mean():.0%} "
        f"({min(rates):.0%}-{max(rates):.0%}) | {np.median(np.abs(mid - outcome)):.2f} | "
        f"{_mean_of_known(auc_p)} | {_mean_of_known(auc_reached)} | {brier:.3f} |"
    )


def _mean_of_known(values: list[float]) -> str:
    """The mean of the values that are known (an AUC is NaN where a task has no winner, or
    only winners), or ``-`` where none is."""
    known = [v for v in values if not np.isnan(v)]
    return f"{np.mean(known):.2f}" if known else "-"


def table(per_task: dict[str, list[Row]], *, configs: int, few: int, fallback: int) -> str:
    """The Markdown section of the check."""
    lines = [
        f"## Curve extrapolation on {len(per_task)} LCBench tasks (issue 28)",
        "",
        f"{configs} random configurations per task in two halves, each half's curves the "
        f"finished references of the other's ({configs // 2} references, or the first {few}); "
        f"the fallback and the ensemble alone on {fallback} configurations per half. Winners: "
        "the task's top 10% at epoch 52. Coverage: pooled over tasks (range over tasks).",
        "",
        "| model | references | epochs seen | 80% interval coverage | median abs. error at 52 | "
        "AUC of p | AUC of value reached | Brier of p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, int, int], dict[str, list[Row]]] = {}
    for task, rows in per_task.items():
        for r in rows:
            groups.setdefault((r.model, r.references, r.seen), {}).setdefault(task, []).append(r)
    order = {"references": 0, "fallback": 1, "ensemble": 2}
    for key in sorted(groups, key=lambda k: (order[k[0]], -k[1], k[2])):
        lines.append(_line(groups[key]))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=150, help="per task")
    parser.add_argument("--few", type=int, default=20, help="the smaller reference set")
    parser.add_argument("--fallback", type=int, default=15, help="per half, per task")
    parser.add_argument("--tasks", default="all", help="comma-separated task ids, or all")
    arguments = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        from benchmarks.lcbench_suite import tasks

        task_ids = tasks() if arguments.tasks == "all" else arguments.tasks.split(",")
        per_task = {}
        for task in task_ids:
            bench = LCBench(task)
            rng = np.random.default_rng(int(task))
            values, _ = bench.curves([SPACE.sample(rng) for _ in range(arguments.configs)])
            per_task[task] = task_rows(
                values, few=arguments.few, fallback=arguments.fallback, rng=rng
            )
            print(f"{task}: {time.perf_counter() - started:.0f} s", flush=True)
    except DataMissing as error:
        print(str(error))
        return f"## Curve extrapolation\n\n{error}"
    report = table(
        per_task, configs=arguments.configs, few=arguments.few, fallback=arguments.fallback
    )
    report += f"\n\nTotal {time.perf_counter() - started:.0f} s."
    print(report, flush=True)
    return report


if __name__ == "__main__":
    main()
