"""Tabulated problems for the simulator: every configuration's objective and cost is in a table.

The Snoek et al. (2012) grids (structured SVM, online LDA, logistic regression on MNIST, in the
project's shared data, ``hpo_grids_snoek``) as :class:`~ultron.simulation.benchmark.Benchmark`
problems: a trial "trains" for one step whose value is the table's objective and whose duration
is the table's measured training time, so the simulated wall time is the grid's own. Grid axes
are searched as integer indices (an ordered domain).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from ultron.algorithms.base import Direction
from ultron.algorithms.space import Config, IntRange, SearchSpace
from ultron.errors import UltronError
from ultron.simulation.benchmark import LearningCurve

__all__ = ["GRIDS", "GridProblem", "load_grid"]


@dataclass(frozen=True)
class _Grid:
    file: str
    axes: tuple[str, ...]
    objective: str


GRIDS = {
    "svm-grid": _Grid("svm_on_grid.csv", ("C", "alpha", "epsilon"), "error"),
    "lda-grid": _Grid("lda_on_grid.csv", ("kappa", "tau0", "batch_size_S"), "perplexity"),
    "logreg-grid": _Grid(
        "logreg_on_grid.csv", ("lrate_idx", "l2_reg", "batchsize", "n_epochs"), "valid_error"
    ),
}
"""Problem name -> its table (all minimized)."""


class GridProblem:
    """One grid as a simulated problem (lower is better); a configuration missing from the
    table scores the table's worst value."""

    direction = Direction.MINIMIZE
    max_resource = 1

    def __init__(self, name: str, rows: list[dict[str, str]], grid: _Grid) -> None:
        self.name = name
        self.metric = grid.objective
        values = {a: sorted({float(r[a]) for r in rows}) for a in grid.axes}
        self._axes = grid.axes
        self._table: dict[tuple[int, ...], tuple[float, float]] = {}
        for row in rows:  # a duplicate key keeps the later row, as HPOlib does
            key = tuple(values[a].index(float(row[a])) for a in grid.axes)
            self._table[key] = (float(row[grid.objective]), float(row.get("time_s") or 1.0))
        self._worst = max(v for v, _ in self._table.values())
        self.search_space = SearchSpace({a: IntRange(0, len(values[a]) - 1) for a in grid.axes})

    def learning_curve(self, config: Config) -> LearningCurve:
        value, seconds = self._table.get(
            tuple(int(config[a]) for a in self._axes), (self._worst, 1.0)
        )
        return LearningCurve(values=(value,), durations=(max(seconds, 1e-3),))


def load_grid(name: str, data_dir: str | Path) -> GridProblem:
    """The grid ``name`` (a key of :data:`GRIDS`) from ``data_dir/hpo_grids_snoek``.

    Raises:
        UltronError: the name is unknown, or its table is not there.
    """
    if name not in GRIDS:
        raise UltronError(f"unknown grid problem {name!r}; the grids are {', '.join(GRIDS)}")
    path = Path(data_dir) / "hpo_grids_snoek" / GRIDS[name].file
    if not path.is_file():
        raise UltronError(
            f"the table of {name} is missing ({path}). Fix: point the benchmark's data_dir (or "
            "ULTRON_BENCHMARK_DATA) at the folder holding hpo_grids_snoek/"
        )
    with path.open(newline="") as handle:
        return GridProblem(name, list(csv.DictReader(handle)), GRIDS[name])
