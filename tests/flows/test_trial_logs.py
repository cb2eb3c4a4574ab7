"""A job's trial logs: in its storage while the trials run, masked, shown and followed by
``ultron logs``; a failed trial's last lines in ``trials.json`` and the flow run's log.

One job of two trials (``toy_model:Chatty``): each prints a marker to stdout and stderr, then
waits for a file that the test creates once it has seen the markers in the storage and the
follower has printed them; then each prints a second marker, and the second trial fails.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

import ultron
from tests.flows.prefect_logs import flow_run_logs
from ultron.secrets import MASK

REPO = Path(__file__).parents[2]
TOY = REPO / "tests" / "data" / "toy"
ULTRON = str(Path(sys.executable).with_name("ultron"))
TOKEN = "tok-job-log-5ecret-77"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = 180.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _text(path: Path) -> str:
    return path.read_bytes().decode() if path.exists() else ""


def _ultron(*args: str) -> Result:
    """The command in this process (the follower above runs as its own process)."""
    from ultron.cli.main import app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_trial_logs_are_kept_shown_and_followed(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A secret of the job's environment; the trial reads it from a file (it does not get the
    # job's secrets in its environment) and prints it.
    monkeypatch.setenv("TRIAL_LOGS_JOB_TOKEN", TOKEN)
    (tmp_path / "secret.txt").write_text(TOKEN)
    job_id = f"trial-logs-{uuid.uuid4().hex[:8]}"
    spec = {
        "name": "trial-logs",
        "code": str(TOY),
        "model": "toy_model:Chatty",
        "search_space": {"folder": [str(tmp_path)], "fail": [False, True]},
        "strategy": "grid",
        "num_iterations": 2,
        "parallelism": 2,
        "objective": {"metric": "loss"},
        "storage": str(tmp_path / "runs"),
        "redis_url": redis_url,
        "cache": False,
    }
    outcome: dict[str, Any] = {}
    job = threading.Thread(
        target=lambda: outcome.update(result=ultron.run(spec, job_id=job_id)), daemon=True
    )
    job.start()
    logs = tmp_path / "runs" / job_id / "logs"
    ok, bad = logs / "0000.log", logs / "0001.log"
    for log in (ok, bad):  # while the trials wait for the release file: they run
        _wait(lambda log=log: "first-err" in _text(log), f"the first markers in {log}")
    assert f"first-out x=0.0 token={MASK}\n" in _text(ok) and "second-out" not in _text(ok)

    follower = subprocess.Popen(
        [ULTRON, "logs", job_id, "0000", "-f", "--redis-url", redis_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(
        target=lambda: [lines.put(line) for line in follower.stdout or ()], daemon=True
    )
    reader.start()
    seen: list[str] = []
    while not any("first-err" in line for line in seen):
        seen.append(lines.get(timeout=120))  # the follower printed what was there
    assert follower.poll() is None  # and follows the running trial
    (tmp_path / "release").touch()
    assert follower.wait(timeout=120) == 0  # it ends with the trial
    reader.join(timeout=30)
    while not lines.empty():
        seen.append(lines.get())
    followed = "".join(seen)
    assert "second-out x=0.0\n" in followed and "second-err x=0.0\n" in followed
    assert followed == _text(ok) and TOKEN not in followed

    job.join(timeout=300)
    result = outcome["result"]
    assert result.status == "completed"

    shown = _ultron("logs", job_id, "0000", "--redis-url", redis_url)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout == _text(ok) and f"token={MASK}" in shown.stdout
    listed = _ultron("logs", job_id, "--redis-url", redis_url)
    assert listed.exit_code == 0, listed.output
    assert "0000" in listed.stdout and "completed" in listed.stdout
    assert "0001" in listed.stdout and "failed" in listed.stdout
    unknown = _ultron("logs", job_id, "../x", "--redis-url", redis_url)
    assert unknown.exit_code == 2 and "trial_id" in unknown.output

    tail = [f"failing line {n}" for n in range(10, 30)]
    rows = json.loads((tmp_path / "runs" / job_id / "trials.json").read_text())
    failed = next(r for r in rows if r["trial_id"] == "0001")
    assert failed["status"] == "failed" and failed["log_tail"] == tail
    assert failed["log_path"] == str(bad)
    flow_log = flow_run_logs(job_id)
    assert "chatty failed on purpose" in flow_log and "\n".join(tail[-3:]) in flow_log.replace(
        "  | ", ""
    )
    for path in (tmp_path / "runs" / job_id).rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
    assert TOKEN not in flow_log
