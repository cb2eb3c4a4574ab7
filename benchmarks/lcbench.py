"""LCBench surrogate (YAHPO Gym): simulated wall-clock to reach a target validation accuracy.

Every configuration's learning curve (validation accuracy and time per epoch, 52 epochs) comes
from YAHPO Gym's ONNX surrogate of LCBench; :func:`~ultron.simulation.jobs.simulate_job` runs
the real master loop with the real strategies and stoppers on it at 8, 64 and 256 simulated
workers, until a finished trial's accuracy reaches the target. The target is the accuracy that 1
random configuration in 200 reaches (measured on 4,000 random configurations, fixed seed), so
random search needs a few hundred trials.

Needs ``onnxruntime`` (the ``bench`` extra). Run: ``python -m benchmarks.lcbench``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.data import DataMissing, data_dir
from ultron.algorithms.base import Direction
from ultron.algorithms.registry import resolve_strategy
from ultron.algorithms.space import Config, IntRange, LogUniform, SearchSpace, Uniform
from ultron.algorithms.stoppers import ASHA, POP, Bandit, EarlyTerm, Hyperband, Stopper
from ultron.simulation.benchmark import LearningCurve, SimulatedClock
from ultron.simulation.jobs import simulate_job

EPOCHS = 52
MAX_TRIALS = 4000  # the job's budget: bounds the compute of a run that never reaches the target
# x_cont column order of the ONNX model (PROVENANCE.md), after the epoch
COLUMNS = (
    "batch_size",
    "learning_rate",
    "momentum",
    "weight_decay",
    "num_layers",
    "max_units",
    "max_dropout",
)
SPACE = SearchSpace(
    {
        "batch_size": IntRange(16, 512, log=True),
        "learning_rate": LogUniform(1e-4, 1e-1),
        "momentum": Uniform(0.1, 0.99),
        "weight_decay": Uniform(1e-5, 0.1),
        "num_layers": IntRange(1, 5),
        "max_units": IntRange(64, 1024, log=True),
        "max_dropout": Uniform(0.0, 1.0),
    }
)


class LCBench:
    """One LCBench task as a :class:`~ultron.simulation.benchmark.Benchmark`."""

    search_space = SPACE
    direction = Direction.MAXIMIZE
    max_resource = EPOCHS

    def __init__(self, task: str) -> None:
        folder = data_dir("yahpo_lcbench_surrogate")
        try:
            import onnxruntime
        except ImportError as error:
            raise DataMissing(
                "skipped: the LCBench surrogate needs onnxruntime: pip install "
                "'ultron-automl[bench]' (or pip install onnxruntime)"
            ) from error
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        # No arena: it keeps the peak of the largest batch (GBs for 1,000 curves) per session,
        # and a process holds one session per task.
        options.enable_cpu_mem_arena = False
        self._session = onnxruntime.InferenceSession(
            str(Path(folder) / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        codes = json.loads((Path(folder) / "encoding.json").read_text())["OpenML_task_id"]
        self.task = task
        self._code = codes[task]
        # Seeded random search hands every method that runs on it the same configurations: a
        # curve is computed once per task and process (``forget`` empties this).
        self._memo: dict[tuple[float, ...], LearningCurve] = {}

    def curves(self, configs: list[Config]) -> tuple[np.ndarray, np.ndarray]:
        """Validation accuracy (%) and seconds of each epoch, shape ``(configs, 52)`` each."""
        epochs = np.tile(np.arange(1, EPOCHS + 1, dtype=np.float32), len(configs))
        hps = np.repeat(
            np.array([[float(c[k]) for k in COLUMNS] for c in configs], dtype=np.float32),
            EPOCHS,
            axis=0,
        )
        x_cont = np.column_stack([epochs, hps]).astype(np.float32)
        x_cat = np.full((len(x_cont), 1), self._code, dtype=np.int32)
        out = self._session.run(None, {"x_cat": x_cat, "x_cont": x_cont})[0]
        out = out.reshape(len(configs), EPOCHS, -1)
        cumulative = np.maximum.accumulate(out[:, :, 0], axis=1)  # the time column is cumulative
        durations = np.diff(cumulative, axis=1, prepend=0.0)
        return out[:, :, 1], np.maximum(durations, 0.01 * cumulative[:, -1:] / EPOCHS)

    def learning_curve(self, config: Config) -> LearningCurve:
        key = tuple(float(config[k]) for k in COLUMNS)  # all the surrogate reads of a config
        if key not in self._memo:
            values, durations = self.curves([config])
            curve = LearningCurve(tuple(map(float, values[0])), tuple(map(float, durations[0])))
            self._memo[key] = curve
        return self._memo[key]

    def forget(self) -> None:
        """Drop the curves computed so far (a process that moves on to other runs)."""
        self._memo.clear()

    def target(self, *, quantile: float = 0.995, n: int = 4000) -> float:
        rng = np.random.default_rng(12345)
        configs = [SPACE.sample(rng) for _ in range(n)]
        values, _ = self.curves(configs)
        return float(np.quantile(values.max(axis=1), quantile))


StopperFactory = Callable[[int, SimulatedClock, float], Stopper | None]


# POP's evaluation boundaries, shared by Bandit and EarlyTerm: the first judgement after 4
# epochs, then every 5. Chosen on the 34 tasks at 8 workers, seed 0, on one simulator
# (benchmarks/RESULTS.md, "POP's grid"): POP reached the target on 34 of 34 tasks (29 with the
# first judgement after one epoch, every 3, as ASHA's first rung) at a geometric mean of 0.060 h
# (0.072 h); one grid keeps the three comparable.
MIN_RESOURCE, INTERVAL = 4, 5


def _asha(workers: int, clock: SimulatedClock, target: float) -> Stopper:
    return ASHA(direction="maximize", max_resource=EPOCHS, reduction_factor=3)


def _hyperband(workers: int, clock: SimulatedClock, target: float) -> Stopper:
    return Hyperband(direction="maximize", max_resource=EPOCHS, reduction_factor=3)


# POP, Bandit and EarlyTerm's factories take ``options``: keyword arguments of the stopper on top
# of the suite's (benchmarks.pop_variants tries other settings through them).


def _bandit(workers: int, clock: SimulatedClock, target: float, **options: Any) -> Stopper:
    # HyperDrive's Bandit (epsilon 0.5) on POP's evaluation boundaries (4, 9, 14, ...): the
    # paper's b = 10 and 30 were set for CIFAR-10, and one grid keeps the three comparable.
    grid = {"min_resource": MIN_RESOURCE, "interval": INTERVAL}
    return Bandit(**{"direction": "maximize", "max_resource": EPOCHS, **grid, **options})


def _earlyterm(workers: int, clock: SimulatedClock, target: float, **options: Any) -> Stopper:
    return EarlyTerm(
        **{
            "direction": "maximize",
            "max_resource": EPOCHS,
            "min_resource": MIN_RESOURCE,
            "interval": INTERVAL,
            "bounds": (0.0, 100.0),
            "bootstrap": 6,
            "seed": 0,
            **options,
        }
    )


def _pop(workers: int, clock: SimulatedClock, target: float, **options: Any) -> Stopper:
    return POP(
        **{
            "direction": "maximize",
            "max_resource": EPOCHS,
            "target": target,
            "slots": workers,
            "interval": INTERVAL,
            "min_resource": MIN_RESOURCE,
            "bounds": (0.0, 100.0),
            "bootstrap": 6,
            "seed": 0,
            "clock": clock,
            **options,
        }
    )


def _none(workers: int, clock: SimulatedClock, target: float) -> None:
    return None


# TPE+ASHA: TPE learns from full-length trials only (early-stopped ones are told as failed),
# else it models epoch-1 accuracies of stopped trials as if they were final ones.
METHODS: dict[str, tuple[str, dict[str, Any], StopperFactory]] = {
    "Random": ("random", {}, _none),
    "Random+ASHA": ("random", {}, _asha),
    "Random+Hyperband": ("random", {}, _hyperband),
    "Random+POP": ("random", {}, _pop),
    "TPE": ("tpe", {}, _none),
    "TPE+ASHA": ("tpe", {}, _asha),
    "REINFORCE": ("reinforce", {"learning_rate": 0.1}, _none),
    "Evolution": ("evolution", {"population_size": 32, "sample_size": 8}, _none),
}


def time_to_target(
    bench: LCBench, method: str, *, workers: int, seed: int, target: float
) -> tuple[float, int]:
    """Simulated seconds until a finished trial reaches ``target`` (``inf`` if none of
    ``MAX_TRIALS`` does), and how many trials started by then."""
    clock = SimulatedClock()
    if method == "Optuna TPE+Hyperband (peer)":
        from benchmarks.optuna_peer import OptunaPeer

        peer = OptunaPeer(SPACE, seed=seed, direction="maximize", max_resource=EPOCHS)
        strategy: Any = peer
        stopper: Stopper | None = peer
    else:
        name, options, make_stopper = METHODS[method]
        strategy = resolve_strategy(name)(SPACE, seed=seed, direction="maximize", **options)
        stopper = make_stopper(workers, clock, target)
    job = simulate_job(
        bench,
        strategy,
        budget=MAX_TRIALS,
        workers=workers,
        stopper=stopper,
        clock=clock,
        target=target,
        tell_stopped=method != "TPE+ASHA",
    )
    return job.time_to_target(target), job.trials_started


def main(seeds: int = 3, workers: tuple[int, ...] = (8, 64, 256), task: str = "189906") -> str:
    try:
        bench = LCBench(task)
    except DataMissing as error:
        print(str(error))
        return f"## LCBench\n\n{error}"
    target = bench.target()
    methods = [*METHODS, "Optuna TPE+Hyperband (peer)"]
    lines = [
        f"## LCBench task {task}: simulated hours to reach {target:.2f}% validation accuracy",
        "",
        f"Median over {seeds} seeds (speed-up against Random without early stopping; trials "
        "started, median). A job ends when a finished trial reaches the target, or after "
        f"{MAX_TRIALS} trials.",
        "",
        "| method | " + " | ".join(f"{w} workers" for w in workers) + " |",
        "|---" * (len(workers) + 1) + "|",
    ]
    baseline: dict[int, float] = {}
    for method in methods:
        started = time.perf_counter()
        cells = []
        for w in workers:
            # The peer's TPE slows down with thousands of open trials: one seed at 256 workers.
            n = 1 if method.endswith("(peer)") and w >= 256 else seeds
            runs = [
                time_to_target(bench, method, workers=w, seed=s, target=target) for s in range(n)
            ]
            hours = statistics.median(h for h, _ in runs) / 3600
            trials = statistics.median(n for _, n in runs)
            baseline.setdefault(w, hours)
            speedup = baseline[w] / hours if hours > 0 else math.inf
            note = "" if n == seeds else f", {n} seed"
            cells.append(f"{hours:.2f} h (x{speedup:.2f}, {trials:.0f} trials{note})")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
        print(lines[-1], f"[{time.perf_counter() - started:.0f} s]", flush=True)
    report = "\n".join(lines)
    print(report, flush=True)
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--task", default="189906")
    arguments = parser.parse_args()
    main(arguments.seeds, task=arguments.task)
