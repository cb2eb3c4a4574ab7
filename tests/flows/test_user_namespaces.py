"""The user's code owns its module names: ``tasks``, ``algorithms``, ``flows``, ``datamanager``
(ours before the one namespace) and a ``mypkg`` that two jobs of one process both define.

Every job runs in a process of its own here, as a user would start it: ``python -c`` from the
repository's root (whose ``tasks/`` and ``algorithms/`` folders are importable from there by
path), the CLI from an unrelated folder, and one long-lived process that runs two jobs in a row
(as ``ultron serve`` does).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


# A code base whose packages take the names that ultron's folders have in its repository. The
# model imports the other three; the strategy proposes x = seed, seed + 0.25, ... in order, which
# no built-in strategy would.
def _pyproject(name: str, packages: str = "") -> str:
    """A pyproject.toml; ``packages`` lists them where setuptools' discovery would skip one."""
    listed = f"\n[tool.setuptools]\npackages = {packages}\n" if packages else ""
    return (
        '[build-system]\nrequires = ["setuptools>=68"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{name}"\nversion = "0.1.0"\n{listed}'
    )


CLASHING = {
    # setuptools' flat-layout discovery leaves out a package called "tasks": list them all
    "pyproject.toml": _pyproject(
        "clashing-names", '["tasks", "algorithms", "flows", "datamanager"]'
    ),
    "tasks/__init__.py": "",
    "tasks/model.py": """
        import os

        import algorithms
        import datamanager.offset
        import flows.scale
        import tasks
        import ultron.data  # ours, beside the user's datamanager (it once imported "datamanager")


        class Model:
            def score(self, hyperparameters, checkpoint_path, resume):
                root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
                own = all(
                    os.path.abspath(m.__file__).startswith(root + os.sep)
                    for m in (tasks, algorithms, flows.scale, datamanager.offset)
                )
                x = hyperparameters["x"]
                own = own and callable(ultron.data.batches)
                return {"loss": flows.scale.FACTOR * x + datamanager.offset.OFFSET,
                        "own": 1.0 if own else 0.0}
        """,
    "algorithms/__init__.py": "MARK = 'user'\n",
    "algorithms/stepping.py": """
        import os


        class Stepping:
            def __init__(self, search_space, seed=None):
                self.start, self.proposed = float(seed), 0
                with open(os.environ["STEPPING_LOG"], "a") as log:  # one line per construction
                    log.write(f"{os.getpid()}\\n")

            def sample_hyperparameter_candidates(self, n):
                batch = [{"x": self.start + 0.25 * (self.proposed + i)} for i in range(n)]
                self.proposed += n
                return batch

            def update_state(self, hyperparameter_candidates, validation_scores):
                pass
        """,
    "flows/__init__.py": "",
    "flows/scale.py": "FACTOR = 3.0\n",
    "datamanager/__init__.py": "",
    "datamanager/offset.py": "OFFSET = 0.5\n",
}


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root


def _spec(code: Path, tmp_path: Path, redis_url: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": "names",
        "code": str(code),
        "search_space": {"x": {"type": "uniform", "low": 0, "high": 1000}},
        "objective": {"metric": "loss", "mode": "minimize"},
        "num_iterations": 4,
        "parallelism": 2,
        "storage": str(tmp_path / "runs"),
        "redis_url": redis_url,
        **fields,
    }


def _run(command: list[str], cwd: Path, stepping_log: Path | None = None) -> None:
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "COLUMNS": "200"}
    env["STEPPING_LOG"] = str(stepping_log or cwd / "stepping.log")
    out = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=500)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def _trials(tmp_path: Path, job_id: str) -> list[dict[str, Any]]:
    rows = json.loads((tmp_path / "runs" / job_id / "trials.json").read_text())
    return sorted(rows, key=lambda row: row["trial_id"])


def _check_clashing_job(rows: list[dict[str, Any]], seed: int, stepping_log: Path) -> None:
    assert [row["status"] for row in rows] == ["completed"] * 4
    assert len(stepping_log.read_text().splitlines()) == 1  # the strategy is built once a job
    # the user's strategy proposed every configuration, in its order
    assert [row["hyperparameters"]["x"] for row in rows] == [seed + 0.25 * i for i in range(4)]
    for row in rows:  # and the user's modules scored each
        assert row["metrics"]["own"] == 1.0
        assert row["score"] == 3.0 * row["hyperparameters"]["x"] + 0.5


def test_a_job_started_from_the_repository_root(tmp_path: Path, redis_url: str) -> None:
    code = _write(tmp_path / "code", CLASHING)
    spec = _spec(code, tmp_path, redis_url, model="tasks.model:Model", seed=10)
    spec["strategy"] = "algorithms.stepping:Stepping"
    (tmp_path / "job.json").write_text(json.dumps(spec))
    run = "import sys, ultron; ultron.run(sys.argv[1], job_id='from-repo-root')"
    # python -c puts the current folder first on sys.path: ultron's own tasks/ and algorithms/
    log = tmp_path / "stepping.log"
    _run([sys.executable, "-c", run, str(tmp_path / "job.json")], cwd=REPO, stepping_log=log)
    _check_clashing_job(_trials(tmp_path, "from-repo-root"), 10, log)


def test_a_job_started_from_an_unrelated_folder(tmp_path: Path, redis_url: str) -> None:
    code = _write(tmp_path / "code", CLASHING)
    spec = _spec(code, tmp_path, redis_url, model="tasks.model:Model", seed=20)
    spec["strategy"] = "algorithms.stepping:Stepping"
    (tmp_path / "job.json").write_text(json.dumps(spec))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    command = [sys.executable, "-m", "ultron.cli", "run", str(tmp_path / "job.json")]
    _run([*command, "--job-id", "from-elsewhere"], cwd=elsewhere)
    _check_clashing_job(_trials(tmp_path, "from-elsewhere"), 20, elsewhere / "stepping.log")


def _mypkg(offset: float) -> dict[str, str]:
    """A code base with ``mypkg.train:Model`` (loss x + offset) and ``mypkg.search:Fixed``."""
    return {
        "pyproject.toml": _pyproject("mypkg"),
        "mypkg/__init__.py": "",
        "mypkg/train.py": f"""
            class Model:
                def score(self, hyperparameters, checkpoint_path, resume):
                    return hyperparameters["x"] + {offset}
            """,
        "mypkg/search.py": f"""
            class Fixed:
                def __init__(self, search_space):
                    self.next = {offset}

                def sample_hyperparameter_candidates(self, n):
                    batch = [{{"x": self.next + i}} for i in range(n)]
                    self.next += n
                    return batch

                def update_state(self, hyperparameter_candidates, validation_scores):
                    pass
            """,
    }


SERVE = """
import json, sys
import ultron

report = []
for spec in sys.argv[2:]:
    path_before = list(sys.path)
    result = ultron.run(spec)
    report.append({
        "scores": {t.trial_id: [t.hyperparameters["x"], t.score] for t in result.trials},
        "left_behind": sorted(m for m in sys.modules if m.split(".")[0] == "mypkg"),
        "path_restored": sys.path == path_before,
    })
open(sys.argv[1], "w").write(json.dumps(report))
"""


def test_one_process_runs_jobs_whose_code_bases_reuse_a_module_name(
    tmp_path: Path, redis_url: str
) -> None:
    specs = []
    for offset in (100.0, 200.0):
        code = _write(tmp_path / f"code-{offset:.0f}", _mypkg(offset))
        spec = _spec(
            code, tmp_path, redis_url, model="mypkg.train:Model", strategy="mypkg.search:Fixed"
        )
        specs.append(tmp_path / f"job-{offset:.0f}.json")
        specs[-1].write_text(json.dumps({**spec, "name": f"serve-{offset:.0f}"}))
    report_file = tmp_path / "report.json"
    _run([sys.executable, "-c", SERVE, str(report_file), *map(str, specs)], cwd=tmp_path)
    first, second = json.loads(report_file.read_text())
    for job, offset in ((first, 100.0), (second, 200.0)):
        # each job's own strategy proposed x = offset, offset + 1, ... and its own model scored
        assert sorted(x for x, _ in job["scores"].values()) == [offset + i for i in range(4)]
        assert all(score == x + offset for x, score in job["scores"].values())
        assert job["left_behind"] == [] and job["path_restored"]
