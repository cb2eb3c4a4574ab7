"""What Prefect keeps of a job's flow run, read back through its API.

Prefect ships log records to its server in batches from a background worker; a job run in the
test's process may have ended with records still queued. `flow_run_logs` first waits for that
worker to send everything (`APILogWorker.drain_all`, a state, not a time window), then reads.
"""

from __future__ import annotations

from typing import Any


def flow_run_of(job_id: str) -> Any:
    """The one flow run whose `job_id` parameter is `job_id`."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        runs = [r for r in client.read_flow_runs() if r.parameters.get("job_id") == job_id]
    assert len(runs) == 1, [r.parameters.get("job_id") for r in runs]
    return runs[0]


def flow_run_logs(job_id: str) -> str:
    """Every log line the job's flow run sent to Prefect, once all queued ones are sent."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all()
    run = flow_run_of(job_id)
    with get_client(sync_client=True) as client:
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])))
    return "\n".join(log.message for log in logs)
