"""Where the time between two trials goes: one job of sleep trials, each hop timed.

The gap from one trial's end to the start of the next one on the same worker is the whole
per-trial path: the result's way back (worker, scheduler, master), the master's decision, and
the submit's way out (scheduler, worker, ``run_trial``, the warm trial process). This runs a
real job (``ultron.run``, its own local cluster) at parallelism P and times each hop by the
clocks of the parts that pass it, trial by trial: the model's (it returns when it started and
ended), the master's (the dispatcher's submit and the moment it has a result), the
scheduler's (a scheduler plugin: it runs in this process) and the worker's (a Dask preload in
each worker times ``run_trial`` and its steps, into a file). It prints the median of each hop
over the pairs of trials one after the other on one worker, the first 2P trials left out.

    python -m benchmarks.dispatch_path                    # 60 trials of 0.1 s at P=1
    python -m benchmarks.dispatch_path --trials 160 --sleep 0.2 --parallelism 8
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import statistics
import tempfile
import textwrap
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent

# Run in each worker (Dask's preload): times run_trial and its steps into the file LOG names.
_PRELOAD = textwrap.dedent(
    """
    import json, os, time
    import ultron.worker.runner as runner

    LOG = os.environ["DISPATCH_PATH_LOG"]
    STEPS = ("run_trial", "checkout", "start_sync", "ship_trial_log", "finish_sync")

    def _timed(name, function):
        def timed(*args, **kwargs):
            started = time.time()
            try:
                return function(*args, **kwargs)
            finally:
                line = {"step": name, "t": started, "dt": time.time() - started}
                if name == "run_trial":  # its first argument: the request's dict
                    line["trial_id"] = args[0]["trial_id"]
                with open(LOG, "a") as log:
                    log.write(json.dumps(line) + "\\n")
        timed.timed = True
        return timed

    for _name in STEPS:
        if not getattr(getattr(runner, _name), "timed", False):  # a preload runs once a process
            setattr(runner, _name, _timed(_name, getattr(runner, _name)))
    """
)


def _median_ms(values: Sequence[float]) -> float:
    return 1000 * statistics.median(values)


def measure(
    trials: int,
    sleep: float,
    folder: Path,
    overrides: Mapping[str, Any] | None = None,
    *,
    parallelism: int = 1,
) -> dict[str, float]:
    """One job of ``trials`` sleeps of ``sleep`` s at ``parallelism``; each hop's median in
    ms. ``overrides``: more spec fields (a test's ``redis_url``)."""
    import dask
    import distributed.scheduler
    from distributed.diagnostics.plugin import SchedulerPlugin

    import ultron
    from ultron.master import dispatcher

    # Each hop's moment, by trial id (a trial's first attempt: these trials never fail); the
    # scheduler's by Dask key, and the key each trial ran under (a slot's, where it waited in
    # one: the batch loop's ``reserve``).
    marks: dict[str, dict[str, float]] = collections.defaultdict(dict)
    key_of: dict[str, str] = {}

    class Transitions(SchedulerPlugin):  # type: ignore[misc]
        def transition(self, key: Any, start: str, finish: str, *args: Any, **kw: Any) -> None:
            if str(key).startswith(("trial-", "slot-")):
                marks[f"scheduler {finish}"].setdefault(str(key), time.time())

    submit, next_done = dispatcher.TrialDispatcher.start, dispatcher.TrialDispatcher._next_done
    scheduler_init = distributed.scheduler.Scheduler.__init__

    def timed_submit(self: Any, *requests: Any) -> None:
        now = time.time()
        for request in requests:
            marks["submit"].setdefault(request.trial_id, now)
        submit(self, *requests)
        key_of.update((r.trial_id, str(k)) for k, r in self._pending.items())

    def timed_done(self: Any, *args: Any, **kwargs: Any) -> Any:
        done = next_done(self, *args, **kwargs)
        key_of.update((r.trial_id, str(k)) for k, r in self._pending.items())  # a slot's too
        if done is not None:
            trial_id = self._pending[done[0].key].trial_id
            marks["master has it"].setdefault(trial_id, time.time())
        return done

    def with_plugin(self: Any, *args: Any, **kwargs: Any) -> None:
        scheduler_init(self, *args, **kwargs)
        self.add_plugin(Transitions(), name="dispatch-path")

    preload, log = folder / "preload.py", folder / "worker.jsonl"
    preload.write_text(_PRELOAD)
    os.environ["DISPATCH_PATH_LOG"] = str(log)
    preloads = dask.config.get("distributed.worker.preload", default=[])
    dask.config.set({"distributed.worker.preload": [*preloads, str(preload)]})
    dispatcher.TrialDispatcher.start = timed_submit  # type: ignore[method-assign]
    dispatcher.TrialDispatcher._next_done = timed_done  # type: ignore[method-assign]
    distributed.scheduler.Scheduler.__init__ = with_plugin  # type: ignore[method-assign]
    try:
        result = ultron.run(
            {
                "name": "dispatch-path",
                "code": str(HERE / "sleep_model"),
                "model": "sleep_model:Timed",
                "search_space": {
                    "x": {"type": "uniform", "low": 0, "high": 1},
                    "sleep": [sleep],
                    "run": [uuid.uuid4().hex],  # a fresh tag: the score cache must not answer
                },
                "objective": {"metric": "score", "mode": "maximize"},
                "num_iterations": trials,
                "parallelism": parallelism,
                "storage": str(folder / "runs"),
                **(overrides or {}),
            }
        )
    finally:
        dispatcher.TrialDispatcher.start = submit  # type: ignore[method-assign]
        dispatcher.TrialDispatcher._next_done = next_done  # type: ignore[method-assign]
        distributed.scheduler.Scheduler.__init__ = scheduler_init  # type: ignore[method-assign]
        dask.config.set({"distributed.worker.preload": preloads})
        del os.environ["DISPATCH_PATH_LOG"]
    steps: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        steps[entry["step"]].append(entry)
    runs = {e["trial_id"]: e for e in steps["run_trial"]}
    by_worker: dict[str, list[Any]] = collections.defaultdict(list)
    for trial in result.trials:
        by_worker[str(trial.worker)].append(trial)
    hops: dict[str, list[float]] = collections.defaultdict(list)
    for mine in by_worker.values():
        mine.sort(key=lambda t: t.metrics["started_at"])
        for before, after in itertools.pairwise(mine):
            if int(after.trial_id) < 2 * parallelism:  # the first rounds: warm-up
                continue
            one, two = before.trial_id, after.trial_id
            if key_of[one][:5] != key_of[two][:5]:
                continue  # the switch from tasks to slots: the way of neither

            end, start = before.metrics["ended_at"], after.metrics["started_at"]
            returned = runs[one]["t"] + runs[one]["dt"]
            has_it, submitted = marks["master has it"][one], marks["submit"][two]
            processing = marks["scheduler processing"][key_of[two]]
            hops["model end -> run_trial returns"].append(returned - end)
            if key_of[one].startswith("trial-"):  # a slot's task ends when the slot does
                hops["model end -> scheduler has it"].append(
                    marks["scheduler memory"][key_of[one]] - end
                )
            hops["model end -> master has it"].append(has_it - end)
            hops["master has it -> next submit here"].append(submitted - has_it)
            if key_of[two].startswith("trial-"):  # sent by the submit
                hops["submit -> scheduler sends it"].append(processing - submitted)
                hops["scheduler -> run_trial starts"].append(runs[two]["t"] - processing)
            else:  # it waited in a slot on its worker: the submit was a Redis push
                hops["submit (a push to its slot) -> run_trial starts"].append(
                    runs[two]["t"] - submitted
                )
            hops["run_trial starts -> model starts"].append(start - runs[two]["t"])
            hops["model end -> next model start (the gap)"].append(start - end)
    figures = {name: _median_ms(values) for name, values in hops.items()}
    gaps = sorted(hops["model end -> next model start (the gap)"])
    figures["the gap's mean"] = 1000 * statistics.fmean(gaps)
    figures["the gap's 90th percentile"] = 1000 * gaps[int(0.9 * (len(gaps) - 1))]
    for step in ("checkout", "start_sync", "ship_trial_log", "finish_sync"):
        figures[f"worker step {step}"] = _median_ms([e["dt"] for e in steps[step]])
    return figures


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--sleep", type=float, default=0.1, help="seconds each trial sleeps")
    parser.add_argument("--parallelism", type=int, default=1, help="P, trials at once")
    parser.add_argument(
        "--loop", choices=["batch", "async"], default="batch", help="the spec's loop"
    )
    arguments = parser.parse_args(argv)
    trials, parallelism = arguments.trials, arguments.parallelism
    if parallelism < 1 or trials < 4 * parallelism:
        parser.error(
            f"--trials {trials} --parallelism {parallelism}: P must be at least 1 and the trials "
            "at least 4 P (the first 2 P are warm-up)"
        )
    with tempfile.TemporaryDirectory(prefix="ultron-dispatch-path-") as folder:
        figures = measure(
            trials,
            arguments.sleep,
            Path(folder),
            {"loop": arguments.loop},
            parallelism=parallelism,
        )
    print(f"{arguments.loop} loop, P={parallelism}, {trials} trials of {arguments.sleep} s, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}: median ms")  # fmt: skip
    for name, value in figures.items():
        print(f"  {name:45s} {value:8.2f}")


if __name__ == "__main__":
    main()
