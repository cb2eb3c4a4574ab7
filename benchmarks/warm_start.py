"""Does a warm start pay? The quickstart's model, warm- and cold-started, over 5 seeds.

For each seed: a finished job as the quickstart runs it (``examples/quickstart/job.yaml``:
random search, 12 trials) gives the target, its best accuracy. Then two new searches with
another strategy (TPE) and the same seed: a cold one, and a warm one told the finished job's
12 trials first, exactly as a job with ``warm_start: {jobs: [...]}`` is
(:func:`ultron.master.warm_start.prior_of` builds what the master tells). Each search runs in
rounds of the quickstart's ``parallelism`` (2) until a new trial reaches the target or
``--max-new`` new trials are spent. Reported: the new trials each needed (``>N``: not reached
in N), and how many times the model trained: every training is counted where the model is
called, and the warm search must never train an earlier trial again.

The objective is the quickstart's own ``digits_mlp.train:Model.score`` (15 epochs of a small
MLP on scikit-learn's digits, about a second), called in this process with the seed each
trial of a job gets (:func:`ultron.trial_records.trial_seed`), so a configuration scores the
same in every search of a seed; no Prefect, Redis or Dask: what is measured is the strategy.

Run: ``python -m benchmarks.warm_start`` (about 5 minutes on one core).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ultron.algorithms.base import HPOAlgorithm
from ultron.algorithms.random_search import RandomSearch
from ultron.algorithms.registry import resolve_strategy
from ultron.algorithms.space import Config, SearchSpace, canonical
from ultron.master.warm_start import prior_of
from ultron.spec.job import JobSpec
from ultron.trial_records import TrialResult, TrialStatus, trial_seed

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart"
PARALLELISM = 2
FINISHED_TRIALS = 12


class CountedModel:
    """The quickstart's model, seeded per configuration as a job's trial is, counting calls."""

    def __init__(self, seed: int) -> None:
        sys.path.insert(0, str(QUICKSTART / "code"))
        import torch
        from digits_mlp.train import Model

        self._torch, self._model, self.seed = torch, Model(), seed
        self.trained: list[str] = []  # canonical configurations, one per training

    def __call__(self, config: Config) -> float:
        self.trained.append(canonical(config))
        self._torch.manual_seed(trial_seed(self.seed, config))
        with tempfile.TemporaryDirectory() as checkpoints:
            return float(self._model.score(dict(config), checkpoints, False)["accuracy"])


def quickstart_spec() -> JobSpec:
    raw = yaml.safe_load((QUICKSTART / "job.yaml").read_text())
    return JobSpec.model_validate(raw, context={"check_paths": False})


def finished_job(space: SearchSpace, seed: int, score: Callable[[Config], float]) -> list[Any]:
    """The quickstart as it runs: random search, 12 trials, as rows of a trial table."""
    strategy = RandomSearch(space, seed=seed, direction="maximize")
    rows = []
    while len(rows) < FINISHED_TRIALS:
        for config in strategy.sample_hyperparameter_candidates(PARALLELISM):
            trial_id = f"{len(rows):04d}"
            rows.append(TrialResult(trial_id, config, TrialStatus.COMPLETED, score=score(config)))
    return rows


def trials_to_reach(
    strategy: HPOAlgorithm, target: float, score: Callable[[Config], float], max_new: int
) -> int | None:
    """New trials until one reaches ``target`` (its 1-based number), or None within max_new."""
    spent = 0
    while spent < max_new:
        batch = strategy.sample_hyperparameter_candidates(min(PARALLELISM, max_new - spent))
        scores = [score(config) for config in batch]
        strategy.update_state(batch, scores)
        for i, value in enumerate(scores):
            if value >= target:
                return spent + i + 1
        spent += len(batch)
    return None


def run_seed(seed: int, strategy_name: str, max_new: int) -> dict[str, Any]:
    spec = quickstart_spec()
    space, model = spec.space, CountedModel(spec.seed + seed)
    rows = finished_job(space, seed, model)
    target = max(float(r.score) for r in rows)
    prior = prior_of({"finished": rows}, space, metric="accuracy")
    assert len(prior.configs) == FINISHED_TRIALS and prior.dropped == 0
    cls = resolve_strategy(strategy_name)
    cold = cls(search_space=space, seed=seed, direction="maximize")
    before = len(model.trained)
    cold_n = trials_to_reach(cold, target, model, max_new)
    cold_trained = len(model.trained) - before
    warm = cls(search_space=space, seed=seed, direction="maximize")
    warm.update_state(prior.configs, prior.scores)  # what the master tells it first
    before = len(model.trained)
    warm_n = trials_to_reach(warm, target, model, max_new)
    warm_configs = model.trained[before:]
    earlier = {canonical(r.hyperparameters) for r in rows}
    return {
        "seed": seed,
        "target": target,
        "cold": cold_n,
        "warm": warm_n,
        "cold_trained": cold_trained,
        "warm_trained": len(warm_configs),
        "retrained": sum(c in earlier for c in warm_configs),
    }


def _n(value: int | None, max_new: int) -> str:
    return f">{max_new}" if value is None else str(value)


def table(rows: list[dict[str, Any]], strategy: str, max_new: int, seconds: float) -> str:
    lines = [
        "| seed | finished job's best (12 random trials) | cold: new trials to reach it | "
        "warm: new trials to reach it | trainings cold / warm | earlier trials trained again |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['target']:.4f} | {_n(r['cold'], max_new)} | "
            f"{_n(r['warm'], max_new)} | {r['cold_trained']} / {r['warm_trained']} | "
            f"{r['retrained']} |"
        )
    censored = max_new + 1  # not reached: counted as one more than the cap
    cold = [r["cold"] or censored for r in rows]
    warm = [r["warm"] or censored for r in rows]
    fewer = sum(w < c for w, c in zip(warm, cold, strict=True))
    lines += [
        "",
        f"Strategy of the new searches: {strategy}; rounds of {PARALLELISM}; at most {max_new} "
        f"new trials (not reached counts as {censored}). Mean new trials to reach the finished "
        f"job's best: cold {statistics.mean(cold):.1f}, warm {statistics.mean(warm):.1f} "
        f"(median {statistics.median(cold):g} / {statistics.median(warm):g}); the warm search "
        f"needed fewer on {fewer} of {len(rows)} seeds. {seconds:.0f} s.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--strategy", default="tpe")
    parser.add_argument("--max-new", type=int, default=30)
    args = parser.parse_args(argv)
    started = time.monotonic()
    rows = [run_seed(seed, args.strategy, args.max_new) for seed in range(args.seeds)]
    text = table(rows, args.strategy, args.max_new, time.monotonic() - started)
    print(text)
    return text


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
