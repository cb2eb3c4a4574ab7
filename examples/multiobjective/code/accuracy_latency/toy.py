"""Accuracy against latency, with a memory bill: a toy whose Pareto front is known exactly.

A wider model is more accurate, slower and bigger; dropout only matters for accuracy, best at
0.3. So for every width the best trade-off has dropout 0.3, and the true Pareto front is

    accuracy = sqrt(width),  latency_ms = 10 + 90 * width,  width in [0, 1].

Against the reference point (accuracy 0, latency 100 ms) that front dominates an area of 60
(``TRUE_HYPERVOLUME``). ``memory_mb = 200 + 3000 * width``: the constraint ``memory_mb <= 2000``
keeps width <= 0.6, which excludes the most accurate (widest) region.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["REFERENCE", "TRUE_HYPERVOLUME", "Model", "evaluate", "true_front"]

# (accuracy, latency_ms) beyond which nothing counts, and the true front's area against it.
REFERENCE = (0.0, 100.0)
TRUE_HYPERVOLUME = 60.0
# How sharply accuracy falls off away from the best dropout.
_SHARPNESS = 20.0


def evaluate(width: float, dropout: float) -> dict[str, float]:
    """The three metrics of one configuration."""
    accuracy = math.sqrt(width) * math.exp(-_SHARPNESS * (dropout - 0.3) ** 2)
    return {
        "accuracy": accuracy,
        "latency_ms": 10.0 + 90.0 * width,
        "memory_mb": 200.0 + 3000.0 * width,
    }


def true_front(points: int = 101, max_width: float = 1.0) -> list[tuple[float, float]]:
    """``points`` (accuracy, latency_ms) pairs on the true front, widths up to ``max_width``."""
    widths = [max_width * i / (points - 1) for i in range(points)]
    return [(math.sqrt(w), 10.0 + 90.0 * w) for w in widths]


class Model:
    """The paper's model interface: ``score`` returns every metric the job names."""

    def score(self, hyperparameters: dict[str, Any], checkpoint_path: str, resume: bool) -> dict:
        return evaluate(float(hyperparameters["width"]), float(hyperparameters["dropout"]))
