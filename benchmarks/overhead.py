"""Orchestration overhead: N trials of a fixed sleep at parallelism P, against the ideal.

The ideal search time is ``N x sleep / P``. The script runs the same job side by side with
warm trial processes (the default) in the batch loop and in the async loop, and with a fresh
interpreter per trial (the baseline that isolation would cost without warm processes), and
prints the overhead of each as a ratio to the ideal. The search time is the ``search_loop``
task's; the whole job adds the cluster start-up and Prefect's own.

    python -m benchmarks.overhead --trials 200 --sleep 0.5 --parallelism 8
"""

from __future__ import annotations

import argparse
import os
import tempfile
import uuid
from pathlib import Path

import ultron

HERE = Path(__file__).parent


def run_once(
    trials: int, sleep: float, parallelism: int, *, fresh: bool, loop: str, storage: str
) -> dict:
    os.environ["ULTRON_FRESH_TRIAL_PROCESS"] = "1" if fresh else "0"
    spec = {
        "name": f"overhead-{loop}-{'fresh' if fresh else 'warm'}",
        "loop": loop,
        "code": str(HERE / "sleep_model"),
        "model": "sleep_model:Model",
        # A fresh tag per run: otherwise the score cache answers configurations seen before.
        "search_space": {
            "x": {"type": "uniform", "low": 0, "high": 1},
            "sleep": [sleep],
            "run": [uuid.uuid4().hex],
        },
        "num_iterations": trials,
        "parallelism": parallelism,
        "storage": storage,
    }
    result = ultron.run(spec)
    ideal = trials * sleep / parallelism
    assert result.cache_hits == 0, "the score cache must not answer a benchmark trial"
    search = result.timings["search_loop"]
    total = sum(result.timings.values())
    return {
        "mode": f"{loop} loop, " + ("fresh process per trial" if fresh else "warm processes"),
        "trials": len(result.trials),
        "ideal": ideal,
        "search": search,
        "total": total,
        "overhead": search / ideal - 1.0,
        "timings": result.timings,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--sleep", type=float, default=0.5)
    parser.add_argument("--parallelism", type=int, default=8)
    parser.add_argument("--loops", nargs="+", default=["batch", "async"])
    parser.add_argument("--skip-baseline", action="store_true")
    args = parser.parse_args()
    storage = tempfile.mkdtemp(prefix="ultron-overhead-")
    shape = (args.trials, args.sleep, args.parallelism)
    rows = [run_once(*shape, fresh=False, loop=loop, storage=storage) for loop in args.loops]
    if not args.skip_baseline:
        rows.append(run_once(*shape, fresh=True, loop="batch", storage=storage))
    print(
        f"\nN={args.trials} trials of {args.sleep} s at P={args.parallelism}; "
        f"ideal search time {rows[0]['ideal']:.2f} s ({os.cpu_count()} CPU cores)"
    )
    print(f"{'mode':<34}{'search s':>10}{'ratio':>8}{'overhead':>10}{'whole job s':>13}")
    for row in rows:
        print(
            f"{row['mode']:<34}{row['search']:>10.2f}{row['search'] / row['ideal']:>8.3f}"
            f"{row['overhead']:>10.1%}{row['total']:>13.2f}"
        )
    for row in rows:
        print(f"  {row['mode']}: task timings {row['timings']}")


if __name__ == "__main__":
    main()
