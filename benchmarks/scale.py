"""Flat at scale: the master's CPU time and memory per 1,000 trials, over 10,000 zero-sleep trials.

Two runs of the real master (:class:`~ultron.master.loops.Master`, its loop, strategy, score
cache and job store):

- ``simulated``: the simulated dispatcher of :mod:`ultron.simulation` (trials take no time),
  with the real :class:`~ultron.master.job_state.JobStore` and
  :class:`~ultron.master.score_cache.ScoreCache` on an embedded Redis of its own: what every
  commit costs the master, and nothing else;
- ``real``: a whole job through ``ultron.run`` with the real Dask dispatcher and a model that
  returns at once (``--real-trials``, ``--parallelism``; on a small machine run fewer trials).

For each block of ``--block`` trials it prints the master process's CPU seconds in that block
and how much its resident memory grew. Flat means the last block costs what the first did.

    python -m benchmarks.scale          # 10,000 simulated; 2,000 real at P=4
    python -m benchmarks.scale --real-trials 10000 --parallelism 16
    python -m benchmarks.scale --skip-real --strategy tpe --trials 3000
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from ultron.algorithms.base import Direction
from ultron.algorithms.registry import resolve_strategy
from ultron.algorithms.space import Config, SearchSpace, Uniform
from ultron.simulation.benchmark import LearningCurve, SimulatedClock

HERE = Path(__file__).parent


class Blocks:
    """The master process's CPU seconds and RSS growth in each block of ``block`` trials."""

    def __init__(self, block: int) -> None:
        self.block = block
        self.done = 0
        self.rows: list[tuple[int, float, float, float]] = []  # trials, cpu s, MiB, wall s
        self._process = psutil.Process()
        self._wall = time.monotonic()
        self._cpu = time.process_time()
        self._rss = self._process.memory_info().rss

    def tick(self, *_: Any) -> None:
        """One more trial done; closes a block every ``block`` trials."""
        self.done += 1
        if self.done % self.block == 0:
            cpu, rss, wall = time.process_time(), self._process.memory_info().rss, time.monotonic()
            self.rows.append(
                (self.done, cpu - self._cpu, (rss - self._rss) / 2**20, wall - self._wall)
            )
            self._cpu, self._rss, self._wall = cpu, rss, wall

    def table(self, title: str) -> str:
        lines = [title, f"{'trials':>8}{'cpu s / block':>15}{'rss growth MiB':>16}{'wall s':>9}"]
        lines += [f"{n:>8}{cpu:>15.3f}{rss:>16.1f}{wall:>9.2f}" for n, cpu, rss, wall in self.rows]
        if len(self.rows) >= 2:
            first, last = self.rows[0][1], self.rows[-1][1]
            lines.append(f"last block / first block CPU: {last / first:.2f}")
        return "\n".join(lines)


class _Instant:
    """A benchmark whose every trial is one step that takes no time."""

    search_space = SearchSpace({"x": Uniform(0.0, 1.0)})
    direction = Direction.MINIMIZE
    max_resource = 1

    def learning_curve(self, config: Config) -> LearningCurve:
        return LearningCurve(values=(float(config["x"]),), durations=(0.0,))


def run_simulated(trials: int, workers: int, block: int, strategy: str, loop: str) -> Blocks:
    """The real master over the simulated dispatcher, with the job store and cache on Redis."""
    from ultron.master.job_state import JobState, JobStore
    from ultron.master.loops import Master, SearchSettings
    from ultron.master.score_cache import ScoreCache
    from ultron.redis.client import connect
    from ultron.servers.redis_process import EmbeddedRedis
    from ultron.simulation.jobs import SimulatedDispatcher

    bench = _Instant()
    blocks = Blocks(block)
    with EmbeddedRedis(Path(tempfile.mkdtemp(prefix="ultron-scale-"))) as redis:
        client = connect(redis.url)
        job_id = f"scale-{uuid.uuid4().hex[:8]}"
        cls = resolve_strategy(strategy)
        master = Master(
            settings=SearchSettings(num_iterations=trials, parallelism=workers),
            strategy=cls(search_space=bench.search_space, seed=0, direction=bench.direction),
            cache=ScoreCache(
                client, code_hash=job_id, model="m:M", seed=0, metric="value", tenant="default"
            ),
            dispatcher=SimulatedDispatcher(bench, SimulatedClock()),
            store=JobStore(client, job_id),
            state=JobState(job_id),
            on_result=blocks.tick,
        )
        blocks = Blocks(block)  # measured from here: the server's start is not the master's
        master.on_result = blocks.tick
        master.run_async() if loop == "async" else master.run_batch()
    return blocks


def run_real(trials: int, parallelism: int, block: int, loop: str) -> Blocks:
    """A whole job of ``trials`` instant trials through ``ultron.run`` (Dask, trial processes)."""
    import ultron
    from ultron.master.progress import listening

    blocks = Blocks(block)
    spec = {
        "name": "scale",
        "loop": loop,
        "code": str(HERE / "sleep_model"),
        "model": "sleep_model:Model",
        "search_space": {
            "x": {"type": "uniform", "low": 0, "high": 1},
            "sleep": [0.0],
            "run": [uuid.uuid4().hex],  # the score cache must not answer these trials
        },
        "num_iterations": trials,
        "parallelism": parallelism,
        "storage": tempfile.mkdtemp(prefix="ultron-scale-"),
    }
    with listening(lambda event: blocks.tick() if event.last else None):
        ultron.run(spec)
    return blocks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000, help="simulated trials")
    parser.add_argument("--workers", type=int, default=16, help="simulated workers")
    parser.add_argument("--block", type=int, default=1000)
    parser.add_argument("--strategy", default="random")
    parser.add_argument("--loop", choices=["async", "batch"], default="async")
    parser.add_argument("--real-trials", type=int, default=2000)
    parser.add_argument("--parallelism", type=int, default=4, help="P of the real job")
    parser.add_argument("--skip-real", action="store_true")
    parser.add_argument("--skip-simulated", action="store_true")
    args = parser.parse_args()
    if not args.skip_simulated:
        sim = run_simulated(args.trials, args.workers, args.block, args.strategy, args.loop)
        title = (
            f"simulated dispatcher: {args.trials} trials, {args.workers} workers, "
            f"{args.strategy}, {args.loop} loop, job store and score cache on Redis"
        )
        print(sim.table(title))
    if not args.skip_real:
        real = run_real(args.real_trials, args.parallelism, args.block, args.loop)
        title = (
            f"real job (Dask, trial processes): {args.real_trials} zero-sleep trials at "
            f"P={args.parallelism}, {args.loop} loop"
        )
        print(real.table(title))


if __name__ == "__main__":
    main()
