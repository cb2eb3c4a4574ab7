"""A job whose flow-run process is SIGKILLed runs again under Prefect, with no command typed.

The job runs from the ``hpo-job`` deployment on the session's real Prefect server and process
worker (``prefect deploy --all`` created the restart automation, ultron/deploy/restarts.py).
Its process is killed after its first trial is stored; the worker marks the run ``Crashed``,
the automation schedules it again once it stayed so (30 s as deployed; this test updates it to
QUIET_S, as ``prefect deploy`` with ``quiet_s: 12`` would), the worker runs the same flow run
(once: one more run, never two masters), and the job resumes with its id and completes: every
configuration scored once, only the trials running at the kill training their current epoch
again. Between the kill and the rerun, ``ultron jobs`` shows the job ``lost`` (its lease, renewed
by the heartbeat, ran out: ultron/master/heartbeat.py).
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from ultron.cli.main import app
from ultron.deploy.restarts import AUTOMATION_NAME, restart_automation
from ultron.deploy.restarts import QUIET_S as DEPLOYED_QUIET_S
from ultron.paths import new_job_id

TOY = Path(__file__).parents[1] / "data" / "toy"
EPOCHS = 4
XS = [1.0, 2.0, 3.0, 4.0]
BEAT_S = 2  # ULTRON_HEARTBEAT_S of the job: lost 5 s after the kill, inside the wait below
QUIET_S = 12  # the automation's wait: the deployed 30 s would only make the test slower

pytestmark = pytest.mark.slow


def _wait_for(condition: Callable[[], Any], what: str, timeout: float = 300.0) -> Any:
    """``condition()``'s first true value, polled until ``timeout`` (a safety bound)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


def _jobs_row(job_id: str, redis_url: str) -> str:
    """The job's row in ``ultron jobs``."""
    shown = CliRunner().invoke(app, ["jobs", "--redis-url", redis_url], env={"COLUMNS": "200"})
    return next((line for line in shown.output.splitlines() if job_id in line), "")


def _epochs(calls: Path) -> list[dict]:
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


@pytest.fixture
def quick_restarts(prefect_server: Any) -> Iterator[None]:
    """The deployed automation, updated to wait QUIET_S instead of 30 s, and back after."""
    from prefect.client.base import ServerType
    from prefect.client.orchestration import SyncPrefectClient

    with SyncPrefectClient(prefect_server.api_url, server_type=ServerType.SERVER) as client:
        made = client.read_automations_by_name(AUTOMATION_NAME)  # made by `prefect deploy`
        assert [a.trigger.within.total_seconds() for a in made] == [DEPLOYED_QUIET_S]
        client.update_automation(made[0].id, restart_automation(quiet_s=QUIET_S))
        try:
            yield
        finally:
            client.update_automation(made[0].id, restart_automation())


@pytest.mark.usefixtures("quick_restarts")
def test_a_killed_flow_run_is_run_again_by_prefect_and_the_job_completes(
    prefect_server, tmp_path: Path, redis_url: str
) -> None:
    from prefect.client.base import ServerType
    from prefect.client.orchestration import SyncPrefectClient

    calls = tmp_path / "calls.jsonl"
    spec = {
        "name": "crashed",
        "code": str(TOY),
        "model": "toy_model:Epochs",
        "search_space": {"x": XS, "epochs": [EPOCHS], "epoch_s": [0.5], "tag": [uuid.uuid4().hex]},
        "strategy": "grid",
        "num_iterations": len(XS),
        "parallelism": 2,
        "objective": {"metric": "loss"},
        "storage": str(tmp_path / "runs"),
        "redis_url": redis_url,
    }
    store = redis.Redis.from_url(redis_url, decode_responses=True)
    with SyncPrefectClient(prefect_server.api_url, server_type=ServerType.SERVER) as client:
        assert client.read_automations_by_name(AUTOMATION_NAME)  # made by `prefect deploy`
        deployment = client.read_deployment_by_name("hpo-job/hpo-job")
        run = client.create_flow_run_from_deployment(
            deployment.id,
            parameters={"spec": spec},
            job_variables={
                "env": {"TOY_CALLS_FILE": str(calls), "ULTRON_HEARTBEAT_S": str(BEAT_S)}
            },
        )
        job_id = new_job_id(spec["name"], suffix=str(run.id)[:8])  # as the flow derives it
        trials = f"ultron:job:{job_id}:trials"

        # The moment: the first trial is stored, the second is training.
        _wait_for(lambda: store.hlen(trials) >= 1, "the first stored trial")
        pid = _wait_for(lambda: client.read_flow_run(run.id).infrastructure_pid, "the pid")
        os.kill(int(str(pid).rsplit(":", 1)[-1]), signal.SIGKILL)
        killed_at = time.time()
        stored_before = set(store.hkeys(trials))
        # No process runs the job now: `ultron jobs` says so, before Prefect runs it again.
        lost = _wait_for(
            lambda: "lost (since" in (row := _jobs_row(job_id, redis_url)) and row, "lost"
        )
        assert client.read_flow_run(run.id).run_count == 1, lost  # seen lost before the rerun

        _wait_for(lambda: client.read_flow_run(run.id).state.is_completed(), "completion", 600)
        history = client.read_flow_run_states(run.id)
        done = client.read_flow_run(run.id)

    kinds = [state.type.value for state in history]
    assert "CRASHED" in kinds, kinds  # the worker saw its process die
    assert done.run_count == 2, kinds  # and the same flow run ran once more
    crashed = next(s for s in history if s.type.value == "CRASHED")
    after = [s for s in history if s.timestamp > crashed.timestamp]
    scheduled = next(s for s in after if s.type.value == "SCHEDULED")
    assert scheduled.message and "restart automation" in scheduled.message  # ours, not a person
    rerun = next(s for s in after if s.type.value == "RUNNING")
    print(
        f"kill -> Crashed {crashed.timestamp.timestamp() - killed_at:.1f} s, "
        f"-> Scheduled {(scheduled.timestamp - crashed.timestamp).total_seconds():.1f} s, "
        f"-> Running {(rerun.timestamp - scheduled.timestamp).total_seconds():.1f} s"
    )

    rows = [json.loads(v) for v in store.hvals(f"ultron:job:{job_id}:trials")]
    assert sorted(r["hyperparameters"]["x"] for r in rows) == XS  # each configuration once
    assert {r["status"] for r in rows} == {"completed"}
    assert stored_before <= set(store.hkeys(trials))
    log = _epochs(calls)
    trained = Counter(e["x"] for e in log)
    resumed = {e["x"] for e in log if e["resume"]}
    assert resumed, "no trial resumed from its checkpoint"
    for x in XS:
        assert {e["epoch"] for e in log if e["x"] == x} == set(range(EPOCHS))
        # A trial running at the kill trains its current epoch again, at most; no other twice.
        assert trained[x] <= EPOCHS + (1 if x in resumed else 0), (x, log)
