"""The LCBench suite's settings and its on-disk cache of runs.

A run is stored under a key made of its task, method, worker count, seed, the suite's settings
and a fingerprint of the code that method runs (the simulator and master, the benchmark, and
the method's own modules and package version): a rerun after one method's code changed
recomputes that method only, and a stored run never stands for different code or settings.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
# Bump when the way a run is simulated or measured changes.
VERSION = 4
_COMMON = (
    "ultron/simulation/jobs.py",
    "ultron/simulation/dispatcher.py",
    "ultron/simulation/costs.py",
    "ultron/master/loops.py",
    "ultron/master/core.py",
    "ultron/master/suspensions.py",
    "ultron/master/failure_budget.py",
    "ultron/master/batch_loop.py",
    "ultron/master/async_loop.py",
    "ultron/master/early_stopping.py",
    "benchmarks/lcbench.py",
    "benchmarks/lcbench_suite.py",
    "benchmarks/suite_job.py",
    "algorithms/random_search.py",
    "algorithms/space.py",
    "algorithms/stoppers/base.py",
)
_OWN = {
    "Random": (),
    "ASHA": ("algorithms/stoppers/asha.py", "algorithms/stoppers/budgets.py"),
    "Hyperband": (
        "algorithms/stoppers/hyperband.py",
        "algorithms/stoppers/budgets.py",
        "algorithms/stoppers/successive_halving.py",
    ),
    "POP (ours)": (
        "algorithms/stoppers/pop.py",
        "algorithms/stoppers/pop_threshold.py",
        "algorithms/stoppers/pop_trials.py",
        "algorithms/curve_model.py",
        "algorithms/partial_references.py",
        "algorithms/curves.py",
    ),
    "POP (dynamic target)": (
        "algorithms/stoppers/pop.py",
        "algorithms/stoppers/pop_threshold.py",
        "algorithms/stoppers/pop_trials.py",
        "algorithms/curve_model.py",
        "algorithms/partial_references.py",
        "algorithms/curves.py",
    ),
    "Bandit": ("algorithms/stoppers/bandit.py",),
    "EarlyTerm": ("algorithms/stoppers/earlyterm.py", "algorithms/curves.py"),
    "Optuna TPE+Hyperband": ("benchmarks/optuna_peer.py", "algorithms/optuna_sampler.py"),
    "DEHB": ("benchmarks/lcbench_peers.py",),
    "1-epoch top-K": ("benchmarks/lcbench_peers.py",),
}
_PACKAGES = {"Optuna TPE+Hyperband": "optuna", "DEHB": "dehb"}

Cell = tuple[str, str, int, int]  # task, method, workers, seed


@dataclass(frozen=True)
class SuiteSettings:
    """What every run of the suite shares.

    Attributes:
        seeds: seeds per (task, method, workers).
        budget: ``B``, the time budget in full trainings' worth of the cluster.
        quantile: the target is this quantile of random configurations' final (epoch-52) accuracy.
        reference: how many random configurations define target, best and median.
    """

    seeds: int = 3
    budget: float = 64.0
    quantile: float = 0.95
    reference: int = 1000

    def key(self) -> dict[str, Any]:
        """The settings a run depends on (not ``seeds``: seed ``s`` is the same run for any)."""
        return {k: v for k, v in asdict(self).items() if k != "seeds"}


def _digest(paths: tuple[str, ...], package: str | None) -> str:
    sha = hashlib.sha256()
    for path in paths:
        sha.update(path.encode())
        sha.update((_ROOT / path).read_bytes())
    if package:
        try:
            sha.update(metadata.version(package).encode())
        except metadata.PackageNotFoundError:
            sha.update(b"absent")
    return sha.hexdigest()


@functools.cache
def _data() -> str:
    """The surrogate's fingerprint: a run on other data is another run."""
    from benchmarks.data import data_dir

    folder = data_dir("yahpo_lcbench_surrogate")
    sha = hashlib.sha256((folder / "model.onnx").read_bytes())
    sha.update((folder / "encoding.json").read_bytes())
    return sha.hexdigest()


class RunCache:
    """Runs and task statistics as JSON files in ``folder`` (in memory when ``None``)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._memory: dict[str, Any] = {}
        self._code: dict[str, str] = {}

    @staticmethod
    def default_folder() -> Path:
        """``$XDG_CACHE_HOME/ultron/lcbench_suite`` (``~/.cache/...`` by default)."""
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        return Path(base) / "ultron" / "lcbench_suite"

    def _code_of(self, method: str) -> str:
        if method not in self._code:
            own = _OWN.get(method, ())
            self._code[method] = _digest(_COMMON + own, _PACKAGES.get(method))
        return self._code[method]

    def _name(self, what: dict[str, Any]) -> str:
        text = json.dumps({"version": VERSION, "data": _data(), **what}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def _read(self, name: str) -> Any:
        if name in self._memory:
            return self._memory[name]
        if self.folder is not None and (self.folder / f"{name}.json").is_file():
            value = json.loads((self.folder / f"{name}.json").read_text())
            self._memory[name] = value
            return value
        return None

    def _write(self, name: str, value: Any) -> None:
        self._memory[name] = value
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            (self.folder / f"{name}.json").write_text(json.dumps(value))

    def _run_name(self, cell: Cell, settings: SuiteSettings) -> str:
        task, method, workers, seed = cell
        what = {"task": task, "method": method, "workers": workers, "seed": seed}
        return self._name({**what, **settings.key(), "code": self._code_of(method)})

    def get(self, cell: Cell, settings: SuiteSettings) -> dict[str, Any] | None:
        """The stored run of ``cell``, or ``None``."""
        value = self._read(self._run_name(cell, settings))
        if value is not None and value.get("hours") == "inf":
            value = {**value, "hours": math.inf}
        return value

    def put(self, cell: Cell, settings: SuiteSettings, run: dict[str, Any]) -> None:
        """Store ``run`` (``inf`` hours as the string ``"inf"``: JSON has no infinity)."""
        stored = {**run, "hours": "inf"} if run.get("hours") == math.inf else run
        self._write(self._run_name(cell, settings), stored)

    def _stats_name(self, task: str, settings: SuiteSettings) -> str:
        code = _digest(("benchmarks/lcbench.py",), None)
        return self._name({"stats": task, **settings.key(), "code": code})

    def stats(self, task: str, settings: SuiteSettings) -> dict[str, float] | None:
        """The task's stored target statistics for these settings and benchmark code."""
        value = self._read(self._stats_name(task, settings))
        return None if value is None else dict(value)

    def put_stats(self, task: str, settings: SuiteSettings, value: dict[str, float]) -> None:
        """Store the task's target statistics."""
        self._write(self._stats_name(task, settings), value)
