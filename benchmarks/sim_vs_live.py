"""The simulator against a live job: the same policy, task, seed, configurations and costs.

One LCBench surrogate task (YAHPO Gym) runs twice with random search and one stopper (POP by
default, ASHA with ``--stopper asha``):

- **live**, as a real ultron job (``ultron.run``: Prefect, Dask workers, warm trial processes,
  Redis, the stopper driver) whose model (``benchmarks/lcbench_sleep_model``) trains nothing:
  each epoch it sleeps the surrogate's epoch time times ``--scale`` and reports the surrogate's
  accuracy; as it returns (told to stop, or finished) it writes a checkpoint of
  ``--checkpoint-mb``, and resumed it reads it back and goes on from the next epoch;
- **simulated**, :func:`~ultron.simulation.jobs.simulate_job` on the same curves (the same
  scaled seconds), with the stopper and strategy the job's spec builds (``build_stopper``,
  ``build_strategy``: the same seed, so the same configurations), and the same costs.

The costs (:class:`~ultron.simulation.costs.SimulationCosts`) are measured before each run, by
the code the live job runs: the model's own checkpoint write and read, timed in this process;
the dispatch latency and a report's cost are the recorded defaults (``benchmarks/overhead.py``
and an earlier live run), or with ``--calibrate`` measured now by a short job of the same model
(:func:`calibrate`), so that the simulation pays what this machine's load costs at the time.
Both jobs run the whole budget (no target ends them). Printed: each run's wall time (the live
job's ``search_loop`` less its workers' start, as ``benchmarks/overhead.py`` times it; the
simulation's elapsed seconds), their ratio, and what each trained.

    python -m benchmarks.sim_vs_live --runs 2 --calibrate
    python -m benchmarks.sim_vs_live --stopper asha --scale 0.4 --runs 2 --calibrate

Needs ``onnxruntime`` (the ``bench`` extra) and the surrogate's data
(``ULTRON_BENCHMARK_DATA``).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.lcbench import EPOCHS, LCBench
from ultron.algorithms.base import Direction
from ultron.algorithms.space import Config, SearchSpace
from ultron.master.strategy import build_stopper, build_strategy
from ultron.simulation.benchmark import LearningCurve, SimulatedClock
from ultron.simulation.costs import SimulationCosts
from ultron.simulation.jobs import SimulatedJob, simulate_job
from ultron.spec.job import JobSpec

HERE = Path(__file__).parent
MODEL = HERE / "lcbench_sleep_model"
# The surrogate's space in the spec's words (benchmarks.lcbench.SPACE).
SPACE = {
    "batch_size": {"type": "int", "low": 16, "high": 512, "log": True},
    "learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-1},
    "momentum": {"type": "uniform", "low": 0.1, "high": 0.99},
    "weight_decay": {"type": "uniform", "low": 1e-5, "high": 0.1},
    "num_layers": {"type": "int", "low": 1, "high": 5},
    "max_units": {"type": "int", "low": 64, "high": 1024, "log": True},
    "max_dropout": {"type": "uniform", "low": 0.0, "high": 1.0},
}


def job_spec(args: argparse.Namespace, table: Path, storage: str) -> dict[str, Any]:
    """The live job; the simulation builds its strategy and stopper from the same spec."""
    stopping: dict[str, Any] = {"type": args.stopper, "max_resource": EPOCHS}
    if args.stopper == "pop":
        stopping.update(
            min_resource=4,
            options={"target": args.target, "interval": 5, "bounds": [0, 100], "bootstrap": 6},
        )
    else:
        stopping["reduction_factor"] = 3
    return {
        "name": f"sim-vs-live-{args.stopper}",
        "code": str(MODEL),
        "model": "lcbench_sleep_model:Model",
        # The table's path is new each run: the score cache never answers a trial here.
        "search_space": {**SPACE, "table": [str(table)]},
        "strategy": "random",
        "objective": {"metric": "accuracy", "mode": "maximize"},
        "num_iterations": args.trials,
        "parallelism": args.parallelism,
        "seed": args.seed,
        "early_stopping": stopping,
        "loop": "async",
        "storage": storage,
    }


class Table:
    """The curves of the configurations the job's strategy proposes, scaled to live seconds;
    a :class:`~ultron.simulation.benchmark.Benchmark` for the simulation, and the model's table."""

    direction = Direction.MAXIMIZE
    max_resource = EPOCHS

    def __init__(self, spec: JobSpec, task: str, scale: float, count: int) -> None:
        self.search_space: SearchSpace = spec.space
        strategy = build_strategy(spec)  # asked one at a time: the job's draws in its order
        configs = [strategy.sample_hyperparameter_candidates(1)[0] for _ in range(count)]
        values, durations = LCBench(task).curves(configs)
        self.rows: list[dict[str, Any]] = [
            {
                "config": {k: v for k, v in c.items() if k != "table"},
                "values": [float(x) for x in v],
                "durations": [float(x) * scale for x in d],
            }
            for c, v, d in zip(configs, values, durations, strict=True)
        ]
        self._by_key = {_key(r["config"]): r for r in self.rows}

    def learning_curve(self, config: Config) -> LearningCurve:
        row = self._by_key[_key({k: v for k, v in config.items() if k != "table"})]
        return LearningCurve(tuple(row["values"]), tuple(row["durations"]))

    def write(self, path: Path, checkpoint_bytes: int) -> None:
        path.write_text(json.dumps({"checkpoint_bytes": checkpoint_bytes, "rows": self.rows}))


def _key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


def checkpoint_costs(checkpoint_bytes: int, repeats: int = 5) -> tuple[float, float]:
    """Median seconds of the model's own checkpoint write and read, timed here."""
    sys.path.insert(0, str(MODEL))
    try:
        from lcbench_sleep_model import load, save
    finally:
        sys.path.remove(str(MODEL))
    writes, reads = [], []
    with tempfile.TemporaryDirectory(prefix="sim-vs-live-ckpt-") as folder:
        for epoch in range(1, repeats + 1):
            started = time.perf_counter()
            save(folder, epoch, checkpoint_bytes)
            writes.append(time.perf_counter() - started)
            started = time.perf_counter()
            load(folder)
            reads.append(time.perf_counter() - started)
    return statistics.median(writes), statistics.median(reads)


CALIBRATION_EPOCHS, CALIBRATION_SLEEP = 20, 0.02


def calibrate(args: argparse.Namespace, storage: str, write_s: float) -> tuple[float, float]:
    """The dispatch latency per trial and a report's cost per epoch, measured now: a job of the
    same model at the same parallelism without a stopper, 4 trials per worker of 20 epochs of
    20 ms each. A report costs the mean time an epoch takes beyond its sleep; the dispatch, the
    mean gap between a trial's last report and the next trial's first one on the same worker,
    less that next epoch and the checkpoint written in between (a worker's first trial, which
    also starts its trial process, is left out)."""
    path = Path(storage) / f"calibration-{uuid.uuid4().hex[:8]}.json"
    spec_data = {**job_spec(args, path, storage), "num_iterations": 4 * args.parallelism}
    spec_data.pop("early_stopping")
    spec_data["name"] = "sim-vs-live-calibration"
    spec = JobSpec.model_validate(spec_data, context={"base_dir": HERE})
    table = Table(spec, args.task, 1.0, spec.num_iterations)
    for row in table.rows:  # the same dicts the table looks curves up in
        row["values"] = row["values"][:CALIBRATION_EPOCHS]
        row["durations"] = [CALIBRATION_SLEEP] * CALIBRATION_EPOCHS
    table.write(path, int(args.checkpoint_mb * 1e6))
    measured = live(spec_data, table)
    report_s = measured["epoch_extra_ms"][1] / 1000
    gap = statistics.mean(measured["handoffs"]) if measured["handoffs"] else 0.0
    return max(gap - CALIBRATION_SLEEP - report_s - write_s, 0.0), report_s


def live(spec: dict[str, Any], table: Table) -> dict[str, Any]:
    """Run the live job; its search wall time, trials, attempts, epochs, and the seconds each
    epoch took beyond its sleep (median and mean: the report's round trip and the load)."""
    import ultron

    result = ultron.run(spec)
    if result.cache_hits:
        raise RuntimeError("the score cache answered a trial: the live run is not a live run")
    search = result.timings["search_loop"] - result.timings.get("start_workers", 0.0)
    curves = json.loads(Path(result.files["curves.json"]).read_text())
    extra = []
    for trial in result.trials:
        durations = table.learning_curve(trial.hyperparameters).durations
        points = curves.get(trial.trial_id, [])
        for before, after in itertools.pairwise(points):
            if after["step"] == before["step"] + 1:  # within one attempt, most likely
                extra.append(after["time"] - before["time"] - durations[after["step"] - 1])
    extra = [e for e in extra if e < 0.5] or [0.0]  # a gap of seconds is a suspension
    spans: dict[str, list[tuple[float, float]]] = {}  # worker -> (first, last report) per trial
    for trial in result.trials:
        points = curves.get(trial.trial_id, [])
        if points and trial.worker:
            spans.setdefault(trial.worker, []).append((points[0]["time"], points[-1]["time"]))
    handoffs = [
        after[0] - before[1]
        for runs in spans.values()
        for before, after in itertools.pairwise(sorted(runs))
    ]
    return {
        "wall": search,
        "whole": sum(result.timings.values()),
        "trials": len(result.trials),
        "attempts": sum(t.attempts for t in result.trials),
        "epochs": sum(len(points) for points in curves.values()),
        "best": result.best_score,
        "epoch_extra_ms": (1000 * statistics.median(extra), 1000 * statistics.mean(extra)),
        "handoffs": handoffs,
    }


def simulate(spec: JobSpec, table: Table, costs: SimulationCosts) -> SimulatedJob:
    """The simulation of the same job: its strategy and stopper built from its spec."""
    clock = SimulatedClock()
    stopper = build_stopper(spec)
    if stopper is not None and hasattr(stopper, "clock"):
        stopper.clock = clock  # POP's time base: the simulated seconds
    return simulate_job(
        table,
        build_strategy(spec),
        budget=spec.num_iterations,
        workers=spec.parallelism,
        stopper=stopper,
        clock=clock,
        costs=costs,
    )


def one_run(args: argparse.Namespace, storage: str, costs: SimulationCosts | None) -> dict:
    """One live job and its simulation; both rows, and the costs the simulation charged."""
    table_path = Path(storage) / f"curves-{uuid.uuid4().hex[:8]}.json"
    spec_data = job_spec(args, table_path, storage)
    spec = JobSpec.model_validate(spec_data, context={"base_dir": HERE})
    table = Table(spec, args.task, args.scale, 2 * args.trials)
    checkpoint_bytes = int(args.checkpoint_mb * 1e6)
    table.write(table_path, checkpoint_bytes)
    if costs is None:
        write_s, read_s = checkpoint_costs(checkpoint_bytes)
        costs = dataclasses.replace(
            SimulationCosts(), checkpoint_write_s=write_s, checkpoint_read_s=read_s
        )
        if args.calibrate:
            dispatch, report_s = calibrate(args, storage, write_s)
            share = costs.start_s / costs.dispatch_s  # the traced split of the hand-off
            costs = dataclasses.replace(
                costs,
                start_s=dispatch * share,
                return_s=dispatch * (1 - share),
                report_s=report_s,
            )
    load = os.getloadavg()[0]
    live_row = live(spec_data, table)
    sim = simulate(spec, table, costs)
    sim_row = {
        "wall": sim.elapsed,
        "trials": len(sim.trials),
        "attempts": sum(t.attempts for t in sim.trials),
        "epochs": sim.steps_trained,
        "best": sim.best_score,
    }
    return {
        "live": live_row,
        "sim": sim_row,
        "costs": costs,
        "load": (load, os.getloadavg()[0]),
    }


def _counts(row: dict[str, Any]) -> str:
    return (
        f"{row['trials']} trials, {row['attempts']} attempts, {row['epochs']} epochs, best "
        f"{row['best']:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="189906", help="the LCBench task (OpenML id)")
    parser.add_argument("--stopper", default="pop", choices=("pop", "asha"))
    parser.add_argument("--trials", type=int, default=48, help="the job's budget")
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--scale", type=float, default=0.04, help="live seconds per surrogate second"
    )
    parser.add_argument("--target", type=float, default=88.45, help="POP's target accuracy")
    parser.add_argument("--checkpoint-mb", type=float, default=7.8)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="measure the dispatch latency and a report's cost now (a short job first)",
    )

    parser.add_argument("--json", default="", help="also write every run's numbers here")
    args = parser.parse_args()
    storage = tempfile.mkdtemp(prefix="ultron-sim-vs-live-")
    rows = []
    for run in range(args.runs):
        row = one_run(args, storage, None)
        rows.append(row)
        live_row, sim_row, costs = row["live"], row["sim"], row["costs"]
        print(
            f"run {run}: live {live_row['wall']:.2f} s (whole job {live_row['whole']:.2f} s, "
            f"{_counts(live_row)}; an epoch's time beyond its sleep: median "
            f"{live_row['epoch_extra_ms'][0]:.1f} ms, mean {live_row['epoch_extra_ms'][1]:.1f} "
            f"ms); simulated {sim_row['wall']:.2f} s ({_counts(sim_row)}); sim / live "
            f"{sim_row['wall'] / live_row['wall']:.3f}; load {row['load'][0]:.1f} -> "
            f"{row['load'][1]:.1f}",
            flush=True,
        )
        print(f"  costs charged: {costs}", flush=True)
    ratios = [r["sim"]["wall"] / r["live"]["wall"] for r in rows]
    print(
        f"\n{args.stopper} on LCBench {args.task}, {args.trials} trials at P="
        f"{args.parallelism}, scale {args.scale} live s per surrogate s, seed {args.seed}, "
        f"{os.cpu_count()} CPU cores: sim / live wall time per run "
        f"{[round(r, 3) for r in ratios]} (median {statistics.median(ratios):.3f})"
    )
    if args.json:
        for row in rows:
            row["costs"] = dataclasses.asdict(row["costs"])
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}))


if __name__ == "__main__":
    main()
