"""Whole jobs answered by the score cache only for the same computation ("Trust every number").

The bug this pins: a job run with ``objective.metric: b`` after the same job with ``a`` took
its two trials from the cache and reported a's values as b's best score; another model class
of the same code base got the first class's scores. The code base here counts every real
training in a file, so each job's count of trained trials is exact.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

import ultron
from ultron.cluster import forkserver
from ultron.master.results import HPOResult
from ultron.trial_records import TrialStatus

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]

# Floats returns a bare float (the score is the job's metric, whatever its name); Pairs returns
# two metrics. Each appends one line per call to CALLS, a path baked into the source.
MODELS = """
import json

CALLS = {calls!r}


def _count(model, hyperparameters):
    with open(CALLS, "a") as handle:
        handle.write(json.dumps({{"model": model, **hyperparameters}}) + "\\n")


class Floats:
    def score(self, hyperparameters, checkpoint_path, resume):
        _count("Floats", hyperparameters)
        return float(hyperparameters["x"])


class Pairs:
    def score(self, hyperparameters, checkpoint_path, resume):
        _count("Pairs", hyperparameters)
        x = float(hyperparameters["x"])
        return {{"a": 10.0 + x, "b": 100.0 - x}}
"""

PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "cache-count"
version = "0.1.0"

[tool.setuptools]
packages = ["cache_count"]
"""


def _code_base(root: Path, calls: Path) -> Path:
    """A code base of two model classes; its source names ``calls``, so its hash is new."""
    (root / "cache_count").mkdir(parents=True)
    (root / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT).lstrip())
    (root / "cache_count" / "__init__.py").write_text(MODELS.format(calls=str(calls)).lstrip())
    return root


def _trained(calls: Path) -> list[tuple[str, float]]:
    """(model class, x) of every real training so far."""
    if not calls.exists():
        return []
    rows = [json.loads(line) for line in calls.read_text().splitlines()]
    return [(row["model"], row["x"]) for row in rows]


def _scores(result: HPOResult) -> dict[float, float | None]:
    return {t.hyperparameters["x"]: t.score for t in result.trials}


def test_the_cache_answers_only_the_same_model_metric_and_setting(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.txt"
    code = _code_base(tmp_path / "code", calls)
    forkservers: list[str] = []
    start_forkserver = forkserver.start

    def counted_start() -> None:  # the real start, counted
        forkservers.append("start")
        start_forkserver()

    monkeypatch.setattr(forkserver, "start", counted_start)

    def run(model: str, metric: str, **more: Any) -> HPOResult:
        return ultron.run(
            {
                "name": "score-cache",
                "code": str(code),
                "model": f"cache_count:{model}",
                "search_space": {"x": [1, 2]},
                "strategy": "grid",
                "num_iterations": 2,
                "parallelism": 2,
                "objective": {"metric": metric},
                "storage": str(tmp_path / "runs"),
                "redis_url": redis_url,
                **more,
            }
        )

    first = run("Floats", "a")
    assert sorted(_trained(calls)) == [("Floats", 1), ("Floats", 2)]
    assert first.cache_hits == 0 and first.best_score == 1.0
    assert first.timings["start_workers"] > 0  # its trials needed the workers: it started them
    assert forkservers == ["start"]  # and the forkserver they fork from, with them

    again = run("Floats", "a")  # the same computation: nothing trains
    assert [t.status for t in again.trials] == [TrialStatus.CACHED] * 2
    # Every trial from the cache: the job started no Dask worker and no trial process.
    assert "start_workers" not in again.timings and "acquire_resources" in again.timings
    assert forkservers == ["start"]  # nor a forkserver
    assert len(_trained(calls)) == 2 and _scores(again) == {1: 1.0, 2: 2.0}

    other_metric = run("Floats", "b")  # a bare float is a's only: b trains
    assert other_metric.cache_hits == 0 and len(_trained(calls)) == 4
    assert other_metric.best_score == 1.0

    pairs = run("Pairs", "a")  # another model class of the same code base trains
    assert pairs.cache_hits == 0
    assert sorted(_trained(calls)[4:]) == [("Pairs", 1), ("Pairs", 2)]
    assert _scores(pairs) == {1: 11.0, 2: 12.0} and pairs.best_score == 11.0

    pairs_b = run("Pairs", "b")  # Pairs returned b too: answered with b's values, not a's
    assert pairs_b.cache_hits == 2 and len(_trained(calls)) == 6
    assert "start_workers" not in pairs_b.timings
    assert _scores(pairs_b) == {1: 99.0, 2: 98.0} and pairs_b.best_score == 98.0

    off = run("Floats", "a", cache=False)  # cache off: the same computation trains again
    assert off.cache_hits == 0
    assert sorted(_trained(calls)[6:]) == [("Floats", 1), ("Floats", 2)]
    assert _scores(off) == {1: 1.0, 2: 2.0}
