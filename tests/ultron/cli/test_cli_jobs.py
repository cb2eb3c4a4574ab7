"""``ultron status``, ``ultron cancel``, ``ultron jobs`` and ``ultron --version`` against a real
job: ``ultron run`` in a process of its own, a real Redis, a real Dask cluster.

The commands read only the Redis the jobs share, as they would from another machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import redis
import yaml
from typer.testing import CliRunner, Result

import ultron
from ultron.cli.main import app
from ultron.limiter.resource_limiter import ResourceLimiter
from ultron.master.job_state import JobStatus, JobStore
from ultron.redis import keys
from ultron.spec.job import JobSpec

REPO = Path(__file__).parents[3]
ULTRON = str(Path(sys.executable).with_name("ultron"))
runner = CliRunner()


def _ultron(*args: str) -> Result:
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def test_version_prints_the_installed_version() -> None:
    result = _ultron("--version")
    assert result.exit_code == 0
    assert result.output.strip() == f"ultron-automl {ultron.__version__}"


def test_jobs_lists_every_known_job_newest_first_with_state_and_best(
    redis_url: str, redis_client: redis.Redis
) -> None:
    spec = {"name": "x", "objective": {"metric": "loss", "mode": "minimize"}, "tenant": "t-1"}
    trial = {"trial_id": "0000", "status": "completed", "hyperparameters": {"x": 1}}
    made = []
    for n, (status, score) in enumerate([("completed", 0.5), ("failed", 0.25), ("cancelled", 2)]):
        job_id = f"listed-{os.getpid()}-{n}"
        made.append(job_id)
        redis_client.hset(
            keys.job(job_id),
            mapping={"status": status, "updated": str(1000.0 + n), "spec": json.dumps(spec)},
        )
        redis_client.hset(keys.job_trials(job_id), "0000", json.dumps({**trial, "score": score}))
    # The newest job failed before it finished a trial: it stored its spec as it started
    # (as every run does first), then its status; no trial, no `updated`.
    newest = f"listed-{os.getpid()}-new"
    made.append(newest)
    store = JobStore(redis_client, newest)
    job = JobSpec.model_validate(
        {"code": ".", "model": "m:M", "search_space": {"x": [1]}, "tenant": "t-1"},
        context={"check_paths": False},
    )
    assert store.save_spec(job, code_hash="c0de")
    store.set_status(JobStatus.FAILED)
    try:
        result = _ultron("jobs", "--redis-url", redis_url, "--tenant", "t-1")
        assert result.exit_code == 0, result.output
        rows = [line for line in result.output.splitlines() if "listed-" in line]
        assert [r.split("│")[1].strip() for r in rows] == made[::-1]  # newest first
        assert "failed" in rows[0] and "-" in rows[0]
        assert "cancelled" in rows[1] and "loss 2" in rows[1]
        assert "failed" in rows[2] and "loss 0.25" in rows[2]
    finally:
        for job_id in made:
            redis_client.delete(keys.job(job_id), keys.job_trials(job_id))


def _listed(output: str) -> list[dict[str, str]]:
    """The jobs ``ultron jobs`` printed, as {column: text} (a cell's wrapped lines joined by a
    space), read from either layout: a column per field, or a field and its value per line."""
    lines = [line for line in output.splitlines() if line.startswith(("┃", "│"))]
    headers = [h.strip() for h in lines[0].split("┃")[1:-1]] if lines[0][0] == "┃" else None
    listed: list[dict[str, str]] = []
    last = ""
    for line in lines:
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if not cells:
            continue  # the header
        if headers is None:  # field | value
            field, value = cells
            last = field or last
            if field == "job":
                listed.append({})
            fields = {last: value}
        else:
            if cells[0]:
                listed.append({})
            fields = dict(zip(headers, cells, strict=True))
        row = listed[-1]
        for name, text in fields.items():
            row[name] = f"{row[name]} {text}".strip() if name in row else text
    return listed


@pytest.mark.parametrize("columns", ["200", "80"])
def test_jobs_shows_the_parallelism_asked_and_why_each_job_ended(
    redis_client: redis.Redis, redis_url: str, columns: str
) -> None:
    tenant = f"t-ended-{os.getpid()}"
    failure = (
        "failed: 11 of 20 trials failed (failed, out_of_memory; first: trial 0003: ValueError: "
        "lr 3.2 diverged), more than max_failed_share=0.5. Fix: see the tracebacks"
    )
    records = {  # status, its reason, the spec's parallelism, the last one asked (ultron scale)
        "scaled": ("completed", "budget: 20 trials", 2, "6"),
        "target": ("completed", "target reached by trial 0007", 3, "3"),
        "failed": ("failed", failure, 3, None),  # a record from before runs wrote it
        # Running again after it was cancelled: the old reason stays until it ends anew.
        "again": ("running", "cancelled", 4, "4"),
    }
    made = []
    for n, (name, (status, reason, parallelism, asked)) in enumerate(records.items()):
        job_id = f"{name}-{os.getpid()}-{'x' * 12}"
        made.append(job_id)
        spec = {"objective": {"metric": "loss"}, "tenant": tenant, "parallelism": parallelism}
        fields = {"status": status, "end_reason": reason, "spec": json.dumps(spec)}
        fields |= {"started": str(1000.0 + n)} | ({"parallelism": asked} if asked else {})
        redis_client.hset(keys.job(job_id), mapping=fields)
    redis_client.set(keys.job_master(made[-1]), "host/1/abc", px=60_000)  # its master beats
    try:
        result = runner.invoke(
            app, ["jobs", "--redis-url", redis_url, "--tenant", tenant], env={"COLUMNS": columns}
        )
        assert result.exit_code == 0, result.output
        assert max(map(len, result.output.splitlines())) <= int(columns)
        # 80 columns hold no row of nine fields with every word whole: a field per line.
        assert ("┃ job" in result.output) == (columns == "200")
        listed = {row["job"]: row for row in _listed(result.output)}
        assert list(listed) == made[::-1]  # every id whole, newest first
        shown = [(row["state"], row["parallelism"], row["ended"]) for row in listed.values()]
        assert shown == [
            ("running", "4", "-"),
            ("failed", "3", failure[: failure.rindex(" ", 0, 59)] + " …"),
            ("completed", "3", "target reached by trial 0007"),
            ("completed", "6", "budget: 20 trials"),
        ]
        assert "`ultron status JOB` shows why the job ended in full" in result.output
    finally:
        for job_id in made:
            redis_client.delete(keys.job(job_id), keys.job_master(job_id))


def test_status_and_cancel_of_an_unknown_job_say_so(redis_url: str) -> None:
    for command in ("status", "cancel"):
        result = _ultron(command, "no-such-job-7", "--redis-url", redis_url)
        assert result.exit_code == 2
        assert "job 'no-such-job-7' is not known to this Redis" in result.output
        assert "Traceback" not in result.output


def _spec(tmp_path: Path, redis_url: str) -> Path:
    spec = {
        "name": "watch-me",
        "code": str(REPO / "tests" / "data" / "toy"),
        "model": "toy_model:Epochs",
        # Long trials that report every 0.3 s: running when status and cancel look.
        "search_space": {"x": {"type": "uniform", "low": 0.0, "high": 1.0}, "epochs": [400]},
        "num_iterations": 4,
        "parallelism": 2,
        "redis_url": redis_url,
        "storage": str(tmp_path / "runs"),
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _wait_for_reports(proc: subprocess.Popen[str], job_id: str, redis_url: str) -> str:
    """``ultron status JOB`` output once it shows two running trials with a report each."""
    deadline = time.monotonic() + 300  # a job's start: environment, cluster, Prefect
    while True:
        assert proc.poll() is None, proc.communicate()
        shown = _ultron("status", job_id, "--redis-url", redis_url).output
        if shown.count("step ") >= 2:
            return shown
        assert time.monotonic() < deadline, f"no trial reported; last status:\n{shown}"
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.usefixtures("ultron_home")
def test_status_shows_running_trials_and_cancel_stops_the_job_cleanly(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    job_id = f"watch-me-{os.getpid()}"
    env = {**os.environ, "ULTRON_CANCEL_GRACE": "3", "COLUMNS": "200"}
    proc = subprocess.Popen(
        [ULTRON, "run", str(_spec(tmp_path, redis_url)), "--job-id", job_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        shown = _wait_for_reports(proc, job_id, redis_url)
        assert f"job {job_id} (default): running, " in shown
        # 0 done: the job shows as running from its start, not from its first round's end.
        assert "0 of 4 trials done" in shown and "2 running trial(s)" in shown
        assert "loss=" in shown and "x=" in shown  # each trial's latest report, configuration
        tree = [proc.pid, *(c.pid for c in psutil.Process(proc.pid).children(recursive=True))]

        # The bound: stopped within 15 s. `cancel --wait 15` polls the job's state
        # until then; the trials get ULTRON_CANCEL_GRACE (3 s), finalize the rest.
        cancelled = _ultron("cancel", job_id, "--wait", "15", "--redis-url", redis_url)
        assert cancelled.exit_code == 0, cancelled.output
        assert f"job {job_id} cancelled" in cancelled.output
        out, err = proc.communicate(timeout=120)
        # A remote cancel is not a Ctrl-C: the job says who cancelled it, and ends as SIGTERM
        # (a request from elsewhere) does, per the table of ultron.cli.exits.
        assert proc.returncode == 143, (out, err)
        assert "(by `ultron cancel`)" in err and "Ctrl-C" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
    # Transient keys gone (reports, stop flags, the cancel request); the record of the trials
    # that were running stays by design: they resume from their checkpoints (README).
    left = set(redis_client.scan_iter(match=keys.job_run(job_id, "*")))
    assert left <= {keys.job_run(job_id, "running")}, left
    limiter = ResourceLimiter(redis.Redis.from_url(redis_url), max_units=64)
    assert job_id not in limiter.holders()
    # Every process of the job ends (the Dask workers and Prefect's temporary server take a
    # moment after the job's process has exited).
    procs = [p for p in map(_process, tree) if p is not None]
    _, alive = psutil.wait_procs(procs, timeout=30)
    assert not [(p.pid, _cmdline(p)) for p in alive if _alive(p.pid)]
    listed = _ultron("jobs", "--redis-url", redis_url).output
    row = next(line for line in listed.splitlines() if job_id in line)
    assert "cancelled" in row
    # The running trials resume from their checkpoints when the job runs again with its id.
    assert redis_client.hget(keys.job(job_id), "status") == "cancelled"


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return "?"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
