"""``ultron experiment`` on the quickstart: seeded jobs per strategy, the table of best scores
(recomputed here from the jobs' trial tables), the plots, the report, and a resume that runs
nothing again."""

from __future__ import annotations

import base64
import json
import re
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ultron.cli.main import app

REPO = Path(__file__).parents[2]
QUICKSTART = REPO / "examples" / "quickstart"
PNG = b"\x89PNG\r\n\x1a\n"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


@pytest.fixture(scope="module")
def dask_address() -> Iterator[str]:
    """One real Dask cluster of processes for the experiment's jobs (ULTRON_DASK_ADDRESS):
    each job would otherwise start and stop its own, which is most of a two-trial job's time."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address


def _spec(tmp_path: Path, redis_url: str) -> Path:
    spec = yaml.safe_load((QUICKSTART / "job.yaml").read_text())
    spec["search_space"]["epochs"] = [2]  # the model reads it: short trials
    spec |= {
        "code": str(QUICKSTART / "code"),
        "loop": "batch",
        "deterministic": True,
        "num_iterations": 2,
        "parallelism": 2,
        "storage": str(tmp_path / "runs"),
        "redis_url": redis_url,
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _best(job_dir: Path) -> float:
    trials = json.loads((job_dir / "trials.json").read_text())
    return max(t["score"] for t in trials if t["status"] == "completed")


def test_experiment_table_plots_and_resume(
    tmp_path: Path, redis_url: str, dask_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ULTRON_DASK_ADDRESS", dask_address)
    spec = _spec(tmp_path, redis_url)
    args = ["experiment", str(spec), "--seeds", "2", "--strategies", "random,tpe"]
    args += ["--experiment-id", "exp-q"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    runs = tmp_path / "runs"
    folder = runs / "exp-q"
    summary = json.loads((folder / "summary.json").read_text())
    assert [row["strategy"] for row in summary["summary"]] == ["random", "tpe"]
    for row in summary["summary"]:
        # The best score of each seed's job, from its own trial table.
        bests = [_best(runs / f"exp-q-{row['strategy']}-s{seed}") for seed in (7, 8)]
        assert row["best_by_seed"] == {str(s): b for s, b in zip((7, 8), bests, strict=True)}
        assert row["mean"] == pytest.approx(statistics.fmean(bests))
        assert row["std"] == pytest.approx(statistics.stdev(bests))
        assert f"{row['mean']:.6g}" in out.output  # the table the command prints
    for plot in ("best_vs_trials.png", "best_vs_time.png"):
        assert (folder / plot).read_bytes().startswith(PNG)
    html = (folder / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(images) == 2 and all(base64.b64decode(i).startswith(PNG) for i in images)
    # Each job's own report, written by finalize.
    assert (runs / "exp-q-tpe-s8" / "report.html").is_file()

    # Another seed, another table: the seeds' jobs tried other configurations.
    configs = [
        json.dumps(
            [
                t["hyperparameters"]
                for t in json.loads((runs / f"exp-q-random-s{s}" / "trials.json").read_text())
            ]
        )
        for s in (7, 8)
    ]
    assert len(set(configs)) == 2

    # Resumed with its id: every job completed before, so none runs again.
    stamps = {p: p.stat().st_mtime_ns for p in runs.glob("exp-q-*/best.json")}
    assert len(stamps) == 4
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert json.loads((folder / "summary.json").read_text())["summary"] == summary["summary"]


def test_bad_strategy_is_refused_before_any_job(tmp_path: Path, redis_url: str) -> None:
    spec = _spec(tmp_path, redis_url)
    out = CliRunner().invoke(app, ["experiment", str(spec), "--strategies", "random,nosuch"])
    assert out.exit_code == 2
    assert "strategy" in out.output and "nosuch" in out.output
    assert not list((tmp_path / "runs").glob("*/trials.json"))
