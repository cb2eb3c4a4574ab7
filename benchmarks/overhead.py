"""Orchestration overhead: N trials of a fixed sleep at parallelism P, ours and Optuna's.

The ideal search time is ``N x sleep / P``; a mode's overhead is ``wall / ideal - 1``. In one
run, with the same N, sleep and P, the script times:

- our batch loop and our async loop (warm trial processes), the ``search_loop`` task's time
  less the workers' start (they start at the first trial, inside it);
- Optuna's journal storage (``JournalStorage`` over a ``JournalFileBackend``) with one process
  per worker, P processes each running ``study.optimize`` on the same objective (the sleep),
  N trials in all; timed from the moment every process is ready to the last one's end;
- optionally (``--baseline``) our batch loop with a fresh interpreter per trial, the cost of
  isolation without warm processes.

A sleep uses no CPU, and the jobs say so (``resources: {cpu: 0.1}``): a job's own local
cluster then starts up to ten workers per core (:func:`ultron.cluster.factory.local_worker_count`;
four per core for trials of a whole core), so P=16 on 2 cores runs 16 trials at once, as
Optuna's 16 processes do. ``--own-cluster`` runs our jobs on a local Dask cluster of P
single-threaded workers that the benchmark starts instead (the spec's ``cluster: address``):
a cluster that is not the job's own, where no trial queues ahead and no slot is kept; its
table says so.

It prints each overhead and the ratio of ours to Optuna's for both loops. The whole job adds
the cluster's start and Prefect's own: the last column.

    python -m benchmarks.overhead                                    # small: 2-core machines
    python -m benchmarks.overhead --trials 200 --sleep 0.5 --parallelism 8
    python -m benchmarks.overhead --trials 640 --sleep 1 --parallelism 16
    python -m benchmarks.overhead --trials 640 --sleep 1 --parallelism 16 --own-cluster
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import multiprocessing
import os
import queue
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def run_ours(
    trials: int,
    sleep: float,
    parallelism: int,
    *,
    fresh: bool,
    loop: str,
    storage: str,
    own_cluster: bool = False,
) -> dict[str, Any]:
    """One job of ``trials`` sleeps through ``ultron.run``; its search time and overhead.

    With ``own_cluster`` the job runs on a local cluster of ``parallelism`` workers started
    here (see the module docstring), closed after it.
    """
    with contextlib.ExitStack() as stack:
        address = stack.enter_context(_workers(parallelism)) if own_cluster else None
        row = _run_job(trials, sleep, parallelism, fresh=fresh, loop=loop, storage=storage,
                       address=address)  # fmt: skip
    if own_cluster:
        row["mode"] += f", {parallelism} workers"
    return row


@contextlib.contextmanager
def _workers(parallelism: int) -> Iterator[str]:
    """A local Dask cluster of ``parallelism`` single-threaded worker processes, as a job's own
    is but without its cap of four per core; yields the scheduler's address."""
    import logging

    import dask
    from distributed import LocalCluster

    from ultron.cluster.factory import QUIET_DASK

    with (
        dask.config.set(QUIET_DASK),
        LocalCluster(
            n_workers=parallelism,
            threads_per_worker=1,
            processes=True,
            memory_limit=0,
            dashboard_address=None,
            silence_logs=logging.WARNING,
        ) as cluster,
    ):
        yield cluster.scheduler_address


def _run_job(
    trials: int,
    sleep: float,
    parallelism: int,
    *,
    fresh: bool,
    loop: str,
    storage: str,
    address: str | None,
) -> dict[str, Any]:
    import ultron

    os.environ["ULTRON_FRESH_TRIAL_PROCESS"] = "1" if fresh else "0"
    spec: dict[str, Any] = {
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
        "resources": {"cpu": 0.1},  # a sleep: ten fit a core (the local cluster's workers)
        "storage": storage,
    }
    if address is not None:
        spec["cluster"] = {"type": "address", "address": address}
    result = ultron.run(spec)
    assert result.cache_hits == 0, "the score cache must not answer a benchmark trial"
    ideal = trials * sleep / parallelism
    # The workers start at the job's first trial, inside the search (ultron.cluster.lazy):
    # Optuna's clock starts once its processes are ready, so ours leaves their start out too.
    search = result.timings["search_loop"] - result.timings.get("start_workers", 0.0)
    return {
        "mode": f"ultron {loop} loop" + (", fresh process per trial" if fresh else ""),
        "loop": loop if not fresh else "",
        "trials": len(result.trials),
        "search": search,
        "total": sum(result.timings.values()),
        "overhead": search / ideal - 1.0,
    }


def _sleep_objective(trial: Any, *, sleep: float) -> float:
    """The overhead benchmark's trial for Optuna: a uniform ``x``, then a fixed sleep."""
    x = float(trial.suggest_float("x", 0.0, 1.0))
    time.sleep(sleep)
    return x


def _optuna_worker(
    path: str,
    study_name: str,
    n_trials: int,
    objective: Callable[[Any], float],
    ready: Any,
    ended: Any,
) -> None:
    """One of Optuna's worker processes: load the shared study, wait for the start, optimize,
    and put the time its last trial ended on ``ended`` (the interpreter's exit comes after:
    with torch loaded, seconds on a busy machine, which are not Optuna's)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(path))
    study = optuna.load_study(study_name=study_name, storage=storage)
    ready.wait()
    study.optimize(objective, n_trials=n_trials)
    ended.put(time.monotonic())  # CLOCK_MONOTONIC: one clock for every process of the machine


def optuna_journal(
    objective: Callable[[Any], float],
    trials: int,
    parallelism: int,
    folder: str,
    *,
    enqueue: Sequence[dict[str, Any]] = (),
    direction: str = "minimize",
) -> tuple[Any, float, float]:
    """Optuna's journal storage with one process per worker, ``trials`` in all.

    Args:
        objective: what each trial runs; picklable (the workers are spawned), so a module's
            function or an instance whose unpickling does its imports before the start.
        trials: N, split as evenly as the P processes allow.
        parallelism: P, the worker processes.
        folder: where the journal file goes.
        enqueue: configurations the study runs first (``study.enqueue_trial``), in order.
        direction: the study's.

    Returns:
        The study, the seconds from the moment every process is ready to the end of the last
        one's last trial, and the seconds from the first process's start to that end.

    Raises:
        RuntimeError: a worker process failed.
    """
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = os.path.join(folder, f"optuna-{uuid.uuid4().hex}.log")
    name = "overhead"
    study = optuna.create_study(
        study_name=name, storage=JournalStorage(JournalFileBackend(path)), direction=direction
    )
    for params in enqueue:
        study.enqueue_trial(params)
    context = multiprocessing.get_context("spawn")  # as Optuna's docs run it: fresh processes
    ready = context.Barrier(parallelism + 1)
    ends = context.Queue()
    shares = [trials // parallelism + (i < trials % parallelism) for i in range(parallelism)]
    started_all = time.monotonic()
    workers = [
        context.Process(target=_optuna_worker, args=(path, name, share, objective, ready, ends))
        for share in shares
    ]
    for worker in workers:
        worker.start()
    ready.wait()
    started = time.monotonic()
    ended = _last_end(ends, workers)
    for worker in workers:
        worker.join()
    study = optuna.load_study(study_name=name, storage=JournalStorage(JournalFileBackend(path)))
    return study, ended - started, ended - started_all


def _last_end(ends: Any, workers: Sequence[Any]) -> float:
    """The latest end time the workers put on ``ends`` (read before they are joined, as
    multiprocessing asks of a queue a process wrote to).

    Raises:
        RuntimeError: a worker process failed before putting its time.
    """
    times: list[float] = []
    while len(times) < len(workers):
        try:
            times.append(ends.get(timeout=1.0))
        except queue.Empty:
            if any(worker.exitcode not in (None, 0) for worker in workers):
                raise RuntimeError("an Optuna worker process failed") from None
    return max(times)


def run_optuna_journal(trials: int, sleep: float, parallelism: int, folder: str) -> dict[str, Any]:
    """Optuna's journal storage, one process per worker, ``trials`` in all; its overhead."""
    objective = functools.partial(_sleep_objective, sleep=sleep)
    study, search, total = optuna_journal(objective, trials, parallelism, folder)
    ideal = trials * sleep / parallelism
    return {
        "mode": "optuna journal, process per worker",
        "loop": "",
        "trials": len(study.get_trials(deepcopy=False)),
        "search": search,
        "total": total,
        "overhead": search / ideal - 1.0,
    }


def table(rows: list[dict[str, Any]], trials: int, sleep: float, parallelism: int) -> str:
    """The side-by-side table, with the ratio of each of our loops' overhead to Optuna's."""
    ideal = trials * sleep / parallelism
    lines = [
        f"N={trials} trials of {sleep} s at P={parallelism}; ideal search time {ideal:.2f} s "
        f"({os.cpu_count()} CPU cores)",
        f"{'mode':<38}{'trials':>7}{'search s':>10}{'overhead':>10}{'whole s':>9}",
    ]
    for row in rows:
        lines.append(
            f"{row['mode']:<38}{row['trials']:>7}{row['search']:>10.2f}"
            f"{row['overhead']:>10.1%}{row['total']:>9.2f}"
        )
    peer = next((r for r in rows if r["mode"].startswith("optuna")), None)
    for row in rows:
        if peer is not None and row["loop"]:
            ratio = row["overhead"] / peer["overhead"] if peer["overhead"] > 0 else float("inf")
            lines.append(
                f"overhead ratio ultron {row['loop']} / optuna journal: {ratio:.2f} "
                f"({row['overhead']:.1%} / {peer['overhead']:.1%})"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40, help="N, trials per mode")
    parser.add_argument("--sleep", type=float, default=0.5, help="seconds each trial sleeps")
    parser.add_argument("--parallelism", type=int, default=2, help="P, trials at once")
    loops = ["batch", "async"]
    parser.add_argument("--loops", nargs="+", default=loops, choices=loops)
    parser.add_argument("--skip-optuna", action="store_true", help="time only our loops")
    parser.add_argument(
        "--baseline", action="store_true", help="also a fresh trial process per trial"
    )
    parser.add_argument(
        "--own-cluster",
        action="store_true",
        help="our jobs on a cluster of P workers started here (a job's own has at most 4 per "
        "core: on fewer than P / 4 cores it runs fewer trials at once than Optuna)",
    )
    args = parser.parse_args()
    storage = tempfile.mkdtemp(prefix="ultron-overhead-")
    shape = (args.trials, args.sleep, args.parallelism)
    rows = [
        run_ours(*shape, fresh=False, loop=loop, storage=storage, own_cluster=args.own_cluster)
        for loop in args.loops
    ]
    if args.baseline:
        rows.append(run_ours(*shape, fresh=True, loop="batch", storage=storage))
    if not args.skip_optuna:
        rows.append(run_optuna_journal(*shape, storage))
    print()
    print(table(rows, *shape))


if __name__ == "__main__":
    main()
