"""A whole warm-started job: a job of 4 trials, then one that starts from it with a changed
space and another strategy. The model counts its trainings in a file (a path baked into the
code base's source): no earlier trial is trained again, the strategy is told the earlier
trials fitted into the new space, and the job's record says how many were told, projected and
dropped. An unknown job id is refused before any compute, with exit status 2's SpecError."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import redis

import ultron
from ultron.algorithms.space import canonical
from ultron.errors import SpecError
from ultron.master.job_state import JobStore

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]

MODEL = """
import json

CALLS = {calls!r}


class Model:
    def score(self, hyperparameters, checkpoint_path, resume):
        with open(CALLS, "a") as handle:
            handle.write(json.dumps(hyperparameters) + "\\n")
        return (hyperparameters["x"] - 0.3) ** 2 + (0.5 if hyperparameters["opt"] == "b" else 0.0)
"""

PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "warm-count"
version = "0.1.0"

[tool.setuptools]
packages = ["warm_count"]
"""


def _code_base(root: Path, calls: Path) -> Path:
    (root / "warm_count").mkdir(parents=True)
    (root / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT).lstrip())
    (root / "warm_count" / "__init__.py").write_text(MODEL.format(calls=str(calls)).lstrip())
    return root


def _trained(calls: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in calls.read_text().splitlines()]


def test_a_warm_started_job_is_told_the_earlier_trials_and_trains_none_again(
    tmp_path: Path, redis_url: str
) -> None:
    calls = tmp_path / "calls.txt"
    base = {
        "code": str(_code_base(tmp_path / "code", calls)),
        "model": "warm_count:Model",
        "parallelism": 2,
        "storage": str(tmp_path / "runs"),
        "redis_url": redis_url,
    }
    first = ultron.run(
        {
            **base,
            "name": "warm-first",
            "search_space": {"x": [0.2, 1.5], "opt": ["a", "b"]},
            "strategy": "grid",
            "num_iterations": 4,
        }
    )
    earlier = _trained(calls)
    assert len(earlier) == 4 and first.status == "completed"
    with pytest.raises(SpecError, match="it is not known"):  # refused before any compute
        ultron.run({**base, "search_space": {"x": [0.1]}, "warm_start": {"jobs": ["no-such"]}})
    assert len(_trained(calls)) == 4

    # A narrower space (x clipped into [0, 1]; opt b no longer a choice) and another strategy.
    warm = ultron.run(
        {
            **base,
            "name": "warm-second",
            "search_space": {"x": {"type": "uniform", "low": 0.0, "high": 1.0}, "opt": ["a"]},
            "strategy": "evolution",
            "strategy_options": {"population_size": 4, "sample_size": 2},
            "seed": 3,
            "num_iterations": 2,
            "warm_start": {"jobs": [first.job_id]},
        }
    )
    new = _trained(calls)[4:]
    assert len(new) == 2 and len(warm.trials) == 2  # the budget: new trials only
    assert not {canonical(c) for c in new} & {canonical(c) for c in earlier}

    kept = [t for t in first.trials if t.hyperparameters["opt"] == "a"]
    expected = [
        ({"x": min(t.hyperparameters["x"], 1.0), "opt": "a"}, t.score)
        for t in sorted(kept, key=lambda t: t.trial_id)
    ]
    with redis.Redis.from_url(redis_url) as client:
        state = JobStore(client, warm.job_id).load()
    assert state is not None and state.warm_start is not None
    note = state.warm_start  # x 1.5 clipped to 1.0; opt b's two trials dropped
    assert (note["told"], note["projected"], note["dropped"]) == (2, 1, 2)
    assert len(note["why_dropped"]) == 2
    assert all("opt 'b' is not among its choices" in why for why in note["why_dropped"])
    # Evolution's population (as losses): the told trials first, then the job's own two.
    population = state.algorithm["population"] if state.algorithm else []
    assert population[:2] == [[config, score] for config, score in expected]
    assert len(population) == 4 and sorted(canonical(c) for c, _ in population[-2:]) == sorted(
        map(canonical, new)
    )
