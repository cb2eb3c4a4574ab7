"""Does the bootstrapped curve ensemble work? Calibration of its extrapolation on LCBench.

POP needs ``P(y(m) >= target)`` from a partial learning curve. The paper's model samples an
ensemble of 11 curve families by MCMC; ``ultron.algorithms.curves`` fits 5 families by least squares
and bootstraps residuals. Here: 150 random LCBench configurations, the first ``k`` epochs
observed, the accuracy at epoch 52 predicted. Reported: median absolute error of the median
prediction, coverage of the central 80% interval (well calibrated: close to 80%), and the
Brier score of ``P(y(52) >= q90)`` against the outcome.

Run: ``python -m benchmarks.curves_check``.
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks.data import DataMissing
from benchmarks.lcbench import EPOCHS, SPACE, LCBench
from ultron.algorithms.curves import extrapolate


def main(configs: int = 150, task: str = "189906") -> str:
    try:
        bench = LCBench(task)
    except DataMissing as error:
        print(str(error))
        return f"## Curve extrapolation\n\n{error}"
    rng = np.random.default_rng(0)
    values, _ = bench.curves([SPACE.sample(rng) for _ in range(configs)])
    final = values[:, -1]
    threshold = float(np.quantile(final, 0.9))
    lines = [
        f"## Curve extrapolation on LCBench task {task} ({configs} random configurations)",
        "",
        "| epochs seen | median abs. error at epoch 52 | 80% interval coverage | "
        "Brier P(y52 >= q90) | last-value Brier | ms per fit |",
        "|---|---|---|---|---|---|",
    ]
    for seen in (4, 10, 20):
        started = time.perf_counter()
        errors, covered, brier, naive = [], [], [], []
        for curve, outcome in zip(values, final, strict=True):
            steps = np.arange(1, seen + 1)
            prediction = extrapolate(
                steps, curve[:seen], [EPOCHS], rng=rng, bootstrap=8, bounds=(0.0, 100.0)
            )
            low, mid, high = prediction.quantiles([0.1, 0.5, 0.9])[:, 0]
            errors.append(abs(mid - outcome))
            covered.append(low <= outcome <= high)
            hit = float(outcome >= threshold)
            brier.append((float(prediction.prob_at_least(threshold)[0]) - hit) ** 2)
            naive.append((float(curve[seen - 1] >= threshold) - hit) ** 2)
        ms = 1000 * (time.perf_counter() - started) / configs
        lines.append(
            f"| {seen} | {np.median(errors):.2f} | {np.mean(covered):.0%} | "
            f"{np.mean(brier):.3f} | {np.mean(naive):.3f} | {ms:.0f} |"
        )
    report = "\n".join(lines)
    print(report, flush=True)
    return report


if __name__ == "__main__":
    main()
