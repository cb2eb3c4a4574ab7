"""The reports' figures, as PNG bytes, drawn with matplotlib (the ``report`` extra).

matplotlib is imported when a figure is drawn, never at import time; without it
:class:`ReportingUnavailable` names the extra to install.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ultron.algorithms.base import Direction
from ultron.errors import UltronError
from ultron.reporting.runs import SeedRun, best_so_far

__all__ = [
    "ReportingUnavailable",
    "best_vs_time",
    "best_vs_trials",
    "job_best_so_far",
    "learning_curves",
    "pareto_front",
    "require_matplotlib",
    "score_vs_hyperparameters",
]


class ReportingUnavailable(UltronError):
    """matplotlib is not installed: the message names the extra that brings it."""


def require_matplotlib() -> None:
    """Fail now, before any compute, when the plots could not be drawn.

    Raises:
        ReportingUnavailable: matplotlib is not installed.
    """
    _figure_class()


def _figure_class() -> Any:
    """matplotlib's ``Figure``, drawn by the Agg canvas: the object API without pyplot (no
    global figure registry, no backend selection or GUI toolkit import, about 0.5 s less to
    import than ``matplotlib.pyplot``)."""
    try:
        import matplotlib  # noqa: F401  (fails first when matplotlib is not installed)
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ReportingUnavailable(
            "reports draw their plots with matplotlib, which is not installed. Fix: pip install "
            "'ultron-automl[report]' (or pip install 'matplotlib>=3.8')"
        ) from exc
    return Figure


def _new_figure(**kwargs: Any) -> Any:
    """A figure on its own Agg canvas, laid out once at draw time (``layout="tight"``) instead
    of rendered twice by ``savefig(bbox_inches="tight")``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = _figure_class()(layout="tight", **kwargs)
    FigureCanvasAgg(fig)
    return fig


def _colors() -> Any:
    from matplotlib import colormaps

    return colormaps["tab10"]


def _png(fig: Any) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=110)
    return out.getvalue()


def _by_strategy(runs: Sequence[SeedRun]) -> dict[str, list[SeedRun]]:
    groups: dict[str, list[SeedRun]] = {}
    for run in runs:
        groups.setdefault(run.strategy, []).append(run)
    return groups


def _band(
    ax: Any, x: np.ndarray, curves: np.ndarray, label: str, color: Any, *, steps: bool
) -> None:
    """Each seed (thin), and where every seed has a score the mean over seeds (thick) with
    mean +- one sample standard deviation (band): a mean over the seeds that happen to have
    scored would jump when a late seed joins. The final mean +- std is marked at the end.
    ``steps``: hold each value until the next x (wall time), else join the points (trials)."""
    mean = curves.mean(axis=0)
    std = curves.std(axis=0, ddof=1) if len(curves) > 1 else np.zeros_like(mean)
    draw = {"drawstyle": "steps-post"} if steps else {"marker": ".", "markersize": 4}
    for row in curves:
        ax.plot(x, row, color=color, alpha=0.35, linewidth=0.8, **draw)
    ax.plot(x, mean, color=color, linewidth=2.0, **draw)
    band = {"step": "post"} if steps else {}
    ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.2, linewidth=0, **band)
    ax.errorbar(
        x[-1:],
        mean[-1:],
        yerr=std[-1:],
        fmt="o",
        color=color,
        capsize=4,
        label=f"{label}: {mean[-1]:.4g} ± {std[-1]:.2g} (n={len(curves)})",
    )


def _axes(title: str, xlabel: str, ylabel: str) -> tuple[Any, Any]:
    fig = _new_figure(figsize=(7.0, 4.2))
    ax = fig.subplots()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def best_vs_trials(runs: Sequence[SeedRun], direction: Direction, metric: str) -> bytes:
    """Best score so far against trials, per strategy, with the spread across seeds."""
    fig, ax = _axes("Best score so far, mean ± 1 std over seeds", "trials", f"best {metric} so far")
    colors = _colors()
    for i, (label, group) in enumerate(_by_strategy(runs).items()):
        length = max((len(r.scores) for r in group), default=0)
        if not length:
            continue
        curves = np.full((len(group), length), np.nan)
        for row, run in enumerate(group):
            best = best_so_far(run.scores, direction)
            curves[row, : len(best)] = best
            curves[row, len(best) :] = best[-1] if best else np.nan
        _band(ax, np.arange(1, length + 1), curves, label, colors(i % 10), steps=False)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(loc="best")
    return _png(fig)


def best_vs_time(runs: Sequence[SeedRun], direction: Direction, metric: str) -> bytes:
    """Best score so far against wall time, per strategy, with the spread across seeds."""
    fig, ax = _axes(
        "Best score so far against wall time, mean ± 1 std over seeds",
        "wall time since the first trial started (s)",
        f"best {metric} so far",
    )
    end = max((max(r.times) for r in runs if r.times), default=0.0)
    grid = np.linspace(0.0, end or 1.0, 200)
    colors = _colors()
    for i, (label, group) in enumerate(_by_strategy(runs).items()):
        curves = np.full((len(group), len(grid)), np.nan)
        for row, run in enumerate(group):
            if not run.times:
                continue
            pairs = sorted(zip(run.times, run.scores, strict=True), key=lambda p: p[0])
            times = np.array([p[0] for p in pairs])
            best = np.array(best_so_far([p[1] for p in pairs], direction))
            done = np.searchsorted(times, grid, side="right")  # trials ended by each instant
            curves[row] = np.where(done > 0, best[np.maximum(done - 1, 0)], np.nan)
        _band(ax, grid, curves, label, colors(i % 10), steps=True)
    ax.legend(loc="best")
    return _png(fig)


def job_best_so_far(scores: Sequence[float | None], direction: Direction, metric: str) -> bytes:
    """One job: each trial's score (dots) and the best so far (line), against trials."""
    fig, ax = _axes("Trials and the best score so far", "trial (sampling order)", metric)
    x = np.arange(1, len(scores) + 1)
    values = np.array([math.nan if s is None else float(s) for s in scores], dtype=float)
    ax.scatter(x, values, s=18, color="tab:gray", label="trial score", zorder=3)
    ax.step(x, best_so_far(scores, direction), where="post", color="tab:blue", label="best so far")
    ax.legend(loc="best")
    return _png(fig)


def learning_curves(curves: Mapping[str, Sequence[Mapping[str, Any]]], metric: str) -> bytes:
    """What each trial reported with ``ultron.report``, against its step."""
    fig, ax = _axes("Learning curves (ultron.report)", "step", metric)
    for trial_id, reports in sorted(curves.items()):
        points = [(r["step"], r[metric]) for r in reports if metric in r and "step" in r]
        if points:
            ax.plot(*zip(*sorted(points), strict=True), linewidth=1.0, alpha=0.8, label=trial_id)
    ax.xaxis.get_major_locator().set_params(integer=True)
    if 0 < len(curves) <= 12:
        ax.legend(loc="best", fontsize="small", title="trial")
    return _png(fig)


def pareto_front(
    points: Sequence[tuple[float, float]],
    *,
    front: Sequence[bool],
    feasible: Sequence[bool],
    names: tuple[str, str],
    directions: tuple[Direction, Direction],
    true_front: Sequence[tuple[float, float]] = (),
) -> bytes:
    """Two objectives of every scored trial: the Pareto front (joined as the staircase it
    dominates), the other feasible trials, and the infeasible ones (crosses).

    Args:
        points: each trial's two objective values, as measured (not as losses).
        front: whether each trial is on the Pareto front.
        feasible: whether each trial satisfies the constraints.
        names: the two metrics.
        directions: whether each is minimized or maximized (an axis label says which).
        true_front: a known front to draw for comparison (benchmarks, toy problems).
    """
    words = {Direction.MINIMIZE: "lower is better", Direction.MAXIMIZE: "higher is better"}
    fig, ax = _axes(
        "Pareto front",
        f"{names[0]} ({words[directions[0]]})",
        f"{names[1]} ({words[directions[1]]})",
    )
    groups = {
        "other feasible trials": [
            p for p, f, ok in zip(points, front, feasible, strict=True) if ok and not f
        ],
        "infeasible trials": [p for p, ok in zip(points, feasible, strict=True) if not ok],
    }
    styles = {
        "other feasible trials": {"color": "tab:gray", "marker": "o", "s": 16},
        "infeasible trials": {"color": "tab:red", "marker": "x", "s": 22},
    }
    for label, group in groups.items():
        if group:
            ax.scatter(*zip(*group, strict=True), label=f"{label} ({len(group)})", **styles[label])
    if true_front:
        ax.plot(
            *zip(*true_front, strict=True), color="tab:green", linewidth=1.0, label="true front"
        )
    best = sorted(p for p, f in zip(points, front, strict=True) if f)
    if best:
        # The staircase bounds what the front dominates: it holds each value onwards when
        # the first objective is minimized, and up to it when maximized.
        step = "post" if directions[0] is Direction.MINIMIZE else "pre"
        ax.step(*zip(*best, strict=True), where=step, color="tab:blue", linewidth=1.2)
        ax.scatter(
            *zip(*best, strict=True),
            color="tab:blue",
            s=30,
            zorder=3,
            label=f"Pareto front ({len(best)})",
        )
    ax.legend(loc="best", fontsize="small")
    return _png(fig)


def score_vs_hyperparameters(
    configs: Sequence[Mapping[str, Any]], scores: Sequence[float], metric: str
) -> bytes:
    """The score against each hyper-parameter (one panel each; choices as categories). A
    parameter absent from a configuration (inactive in a conditional space) leaves that trial
    out of its panel; a list is plotted by its length."""
    names = sorted({name for config in configs for name in config})
    columns = min(3, max(1, len(names)))
    rows = max(1, math.ceil(len(names) / columns))
    fig = _new_figure(figsize=(4.0 * columns, 3.2 * rows))
    axes = fig.subplots(rows, columns, squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        held = [
            (config[name], score)
            for config, score in zip(configs, scores, strict=True)
            if name in config
        ]
        values = [len(v) if isinstance(v, list) else v for v, _ in held]
        lengths = any(isinstance(v, list) for v, _ in held)
        panel_scores = [score for _, score in held]
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        if numeric:
            ax.scatter(values, panel_scores, s=18)
            if all(isinstance(v, int) for v in values):
                ax.xaxis.get_major_locator().set_params(integer=True)
            positive = [float(v) for v in values if v is not None and float(v) > 0]
            if positive and len(positive) == len(values) and max(positive) > 100 * min(positive):
                ax.set_xscale("log")
        else:
            labels = sorted({str(v) for v in values})
            ax.scatter([labels.index(str(v)) for v in values], panel_scores, s=18)
            ax.set_xticks(range(len(labels)), labels)
        ax.set_xlabel(f"{name} (length)" if lengths else name)
        ax.set_ylabel(metric)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    fig.suptitle(f"{metric} against each hyper-parameter")
    return _png(fig)
