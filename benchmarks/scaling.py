"""Scaling with real training: the same configurations at P = 1, 2, 4, ... (the paper's Fig. 11).

A small CNN on scikit-learn's digits (``benchmarks/scaling_model``, one thread per trial)
trains the same N configurations (default all 64) at each parallelism P, in three modes:

- ultron (``ultron.run``, the async loop; ``--modes`` adds the batch one): the
  ``search_loop`` task's time, and the whole job's;
- Optuna's threads mode: one in-memory study, ``study.optimize(n_jobs=P)``;
- Optuna's journal mode: one process per worker over a ``JournalFileBackend``
  (:func:`benchmarks.overhead.optuna_journal`), timed from the moment every process is ready
  to the end of the last trial.

Every mode enqueues or grids the same configuration indices, so each mode trains exactly the
same networks; the summary says whether every run gave every configuration the same accuracy.
For each mode, against its own P=1 time T1: speed-up ``T1 / TP`` and efficiency
``T1 / (P x TP)``, on the search's time and on the trials' span (the first trial's start to
the last one's end, by the trials' own clocks: the search without its start-up, which for
ultron includes starting the cluster and the warm trial processes).
The table also gives the trials' mean time (each trial's own start to end: what a trial costs
without the dispatch between two) and, for ultron, how long its cluster and warm trial
processes took to start (inside the search, at its first trial).
P values above the machine's cores are left out (each trial takes one).
It writes ``scaling.md`` (the table, with command, cores, date and commit), ``scaling.json``
and ``scaling.png`` (wall time, speed-up and efficiency against P) into ``--out``.

    python -m benchmarks.scaling                                      # P = 1, 2, 4, 8, 16 (capped)
    python -m benchmarks.scaling --parallelism 1 2 --epochs 4         # a few minutes on 2 cores
    python -m benchmarks.scaling --parallelism 1 2 --configs 4 --epochs 1 --modes optuna-threads
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks.scaling_report import MODES, machine, plot, table

HERE = Path(__file__).parent
MODEL_CODE = HERE / "scaling_model"


@dataclass
class Run:
    """One mode at one P: its times and the accuracy it gave each configuration index."""

    mode: str
    parallelism: int
    search_s: float
    total_s: float
    scores: dict[int, float] = field(default_factory=dict)
    # From the first trial's start to the last trial's end, as the trials' own clocks say
    # (0: not known). Without the job's start-up: the warm trial processes, Optuna's workers.
    span_s: float = 0.0
    # The mean of the trials' own times (each from its start to its end, by its own clock; for
    # Optuna as the study recorded them): what a trial costs without the dispatch between two.
    trial_s: float = 0.0
    # ultron: the seconds its cluster and warm trial processes took to start (at the first
    # trial, inside the search); Optuna's clock starts once its processes are ready.
    start_s: float = 0.0


def scaling_model() -> ModuleType:
    """The model package, imported from the benchmark's folder (it is not installed)."""
    if str(MODEL_CODE) not in sys.path:
        sys.path.insert(0, str(MODEL_CODE))
    import scaling_model as model

    return model


class Objective:
    """Optuna's objective: the enqueued configuration index, trained for ``epochs``.

    Picklable for the journal mode's spawned workers; unpickling imports the model (torch,
    the data, a primed training step) before the worker reports ready.
    """

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs
        self._model = scaling_model()

    def __getstate__(self) -> dict[str, Any]:
        return {"epochs": self.epochs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["epochs"])  # type: ignore[misc]

    def __call__(self, trial: Any) -> float:
        index = int(trial.suggest_categorical("config", list(range(len(self._model.CONFIGS)))))
        return float(self._model.train(index, self.epochs, lambda e, a: trial.report(a, e)))


def run_ultron(
    parallelism: int,
    configs: int,
    epochs: int,
    loop: str,
    storage: str,
    overrides: Mapping[str, Any] | None = None,
) -> Run:
    """One job through ``ultron.run``: grid search over the indices ``0 .. configs-1``;
    ``overrides``: more spec fields (a test's ``redis_url``)."""
    import ultron

    spec = {
        "name": f"scaling-{loop}-p{parallelism}",
        "loop": loop,
        "code": str(MODEL_CODE),
        "model": "scaling_model:Model",
        "strategy": "grid",
        "search_space": {
            "config": list(range(configs)),
            "epochs": [epochs],
            "run": [uuid.uuid4().hex],  # a fresh tag: the score cache must not answer
        },
        "objective": {"metric": "accuracy", "mode": "maximize"},
        "num_iterations": configs,
        "parallelism": parallelism,
        "storage": storage,
    }
    result = ultron.run(spec, **(overrides or {}))
    if result.cache_hits or len(result.trials) != configs:
        raise RuntimeError(f"ultron ran {len(result.trials)} trials, {result.cache_hits} cached")
    scores = {int(t.hyperparameters["config"]): float(t.score) for t in result.trials}
    starts = [t.metrics["started_at"] for t in result.trials]
    ends = [t.metrics["ended_at"] for t in result.trials]
    return Run(
        f"ultron {loop}",
        parallelism,
        result.timings["search_loop"],
        sum(result.timings.values()),
        scores,
        max(ends) - min(starts),
        sum(e - s for s, e in zip(starts, ends, strict=True)) / len(starts),
        result.timings.get("start_workers", 0.0),
    )


def _optuna_scores(study: Any) -> dict[int, float]:
    return {int(t.params["config"]): float(t.value) for t in study.get_trials(deepcopy=False)}


def _optuna_span(study: Any) -> float:
    """From the first trial's start to the last one's end, as the study recorded them."""
    trials = study.get_trials(deepcopy=False)
    ended = max(t.datetime_complete for t in trials)
    return float((ended - min(t.datetime_start for t in trials)).total_seconds())


def _optuna_trial_s(study: Any) -> float:
    """The trials' mean time, from each one's start to its end as the study recorded them."""
    trials = study.get_trials(deepcopy=False)
    return sum((t.datetime_complete - t.datetime_start).total_seconds() for t in trials) / len(
        trials
    )


def run_optuna_threads(parallelism: int, configs: int, epochs: int) -> Run:
    """Optuna's threads mode: ``study.optimize(n_jobs=P)`` over the enqueued indices."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    objective = Objective(epochs)
    started = time.monotonic()
    study = optuna.create_study(direction="maximize")
    for index in range(configs):
        study.enqueue_trial({"config": index})
    search_started = time.monotonic()
    study.optimize(objective, n_trials=configs, n_jobs=parallelism)
    ended = time.monotonic()
    return Run(
        "optuna threads",
        parallelism,
        ended - search_started,
        ended - started,
        _optuna_scores(study),
        _optuna_span(study),
        _optuna_trial_s(study),
    )


def run_optuna_journal(parallelism: int, configs: int, epochs: int, folder: str) -> Run:
    """Optuna's journal mode, one process per worker, over the enqueued indices."""
    from benchmarks.overhead import optuna_journal

    enqueue = [{"config": index} for index in range(configs)]
    study, search, total = optuna_journal(
        Objective(epochs), configs, parallelism, folder, enqueue=enqueue, direction="maximize"
    )
    scores, span = _optuna_scores(study), _optuna_span(study)
    return Run("optuna journal", parallelism, search, total, scores, span, _optuna_trial_s(study))


def efficiency_rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Each run with its speed-up ``T1 / TP`` and efficiency ``T1 / (P x TP)``, T1 being the
    same mode's P=1 search time.

    Raises:
        ValueError: a mode has no P=1 run.
    """
    rows = []
    for run in runs:
        base = next((r for r in runs if r.mode == run.mode and r.parallelism == 1), None)
        if base is None:
            raise ValueError(f"mode {run.mode!r} has no P=1 run: efficiency is against P=1")
        speedup = base.search_s / run.search_s
        known = base.span_s > 0 and run.span_s > 0
        span_speedup = base.span_s / run.span_s if known else None
        rows.append(
            {
                "mode": run.mode,
                "parallelism": run.parallelism,
                "trials": len(run.scores),
                "search_s": run.search_s,
                "total_s": run.total_s,
                "speedup": speedup,
                "efficiency": speedup / run.parallelism,
                "span_s": run.span_s or None,
                "span_efficiency": span_speedup / run.parallelism if span_speedup else None,
                "trial_s": run.trial_s or None,
                "start_s": run.start_s or None,
            }
        )
    return rows


def same_scores(runs: Sequence[Run]) -> tuple[bool, float]:
    """Whether every run trained the same configurations, and the largest difference in
    accuracy any configuration got between two runs."""
    configs = {frozenset(run.scores) for run in runs}
    if len(configs) != 1:
        return False, float("inf")
    spread = max(
        (max(r.scores[i] for r in runs) - min(r.scores[i] for r in runs) for i in runs[0].scores),
        default=0.0,
    )
    return True, spread


def measure(
    parallelisms: Sequence[int],
    modes: Sequence[str],
    configs: int,
    epochs: int,
    out: Path,
    overrides: Mapping[str, Any] | None = None,
) -> list[Run]:
    """Every mode at every P, P outermost (load drifts hit all modes alike); ``overrides``
    go to ultron's jobs."""
    runs = []
    for parallelism in parallelisms:
        for mode in modes:
            if mode.startswith("ultron"):
                loop = mode.split()[1]
                jobs = str(out / "jobs")
                run = run_ultron(parallelism, configs, epochs, loop, jobs, overrides)
            elif mode == "optuna threads":
                run = run_optuna_threads(parallelism, configs, epochs)
            else:
                run = run_optuna_journal(parallelism, configs, epochs, str(out))
            print(
                f"{mode} P={parallelism}: {run.search_s:.2f} s, span {run.span_s:.2f} s", flush=True
            )
            runs.append(run)
    return runs


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parallelism", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--configs", type=int, default=64, help="N configurations, at most 64")
    parser.add_argument("--epochs", type=int, default=10, help="epochs per trial (~0.1 s each)")
    choices = [mode.replace(" ", "-") for mode in MODES]
    parser.add_argument(
        "--modes",
        nargs="+",
        default=["ultron-async", "optuna-threads", "optuna-journal"],
        choices=choices,
        help="what to time (default: all but ultron-batch)",
    )
    parser.add_argument("--out", type=Path, default=Path("ultron-runs/benchmarks/scaling"))
    args = parser.parse_args(argv)
    if not 1 <= args.configs <= 64:
        parser.error(f"--configs is {args.configs}; it must be 1 to 64 (the model has 64)")
    if args.epochs < 1:
        parser.error(f"--epochs is {args.epochs}; it must be at least 1")
    cores = os.cpu_count() or 1
    parallelisms = sorted({p for p in args.parallelism if 1 <= p <= cores})
    if 1 not in parallelisms:
        parser.error(f"--parallelism {args.parallelism}: it must include 1 (efficiency's T1)")
    left_out = sorted(set(args.parallelism) - set(parallelisms))
    if left_out:
        print(f"left out P={left_out}: more than the machine's {cores} cores", file=sys.stderr)
    modes = [mode for mode in MODES if mode.replace(" ", "-") in args.modes]
    from ultron.reporting.plots import require_matplotlib

    require_matplotlib()  # before any compute: the plot is part of the result
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(HERE.parent))  # the journal mode's workers unpickle benchmarks.*
    runs = measure(parallelisms, modes, args.configs, args.epochs, out)
    rows = efficiency_rows(runs)
    about = machine()
    same, spread = same_scores(runs)
    text = table(rows, about, args.configs, args.epochs)
    text += (
        f"\n\nEvery run trained the same {args.configs} configurations: {'yes' if same else 'NO'}"
        f"; largest accuracy difference of one configuration between runs: {spread:.4f}\n"
    )
    (out / "scaling.md").write_text(text)
    document = {"machine": about, "rows": rows, "runs": [asdict(run) for run in runs]}
    (out / "scaling.json").write_text(json.dumps(document, indent=1))
    plot(rows, out / "scaling.png", f"{about['command']} ({about['cores']} cores, {about['date']})")
    print()
    print(text)
    print(f"written: {out / 'scaling.md'}, {out / 'scaling.json'}, {out / 'scaling.png'}")


if __name__ == "__main__":
    main()
