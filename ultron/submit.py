"""``ultron submit``: a job for a shared Prefect server, from a user's machine.

The code base travels through the job's storage, content-addressed
(``<storage>/code/<code hash>.tar.gz``: an unchanged code base is not uploaded again), and the
job is one flow run of the ``hpo-job`` deployment, created through the Prefect API (the paper's
HTTP POST of a spec). The worker that runs it reads nothing of the user's folders: the spec it
gets names the uploaded archive, which ``containerize`` fetches and checks.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ultron.errors import ConfigIssue, ServiceUnreachableError, UsageError
from ultron.spec.job import JobSpec

__all__ = ["SubmittedRun", "start_run", "upload_spec_code", "watch_run"]

_FINAL = ("COMPLETED", "FAILED", "CANCELLED", "CRASHED")


@dataclass(frozen=True)
class SubmittedRun:
    """A flow run created for a job: its ids and where to see it."""

    job_id: str
    flow_run_id: str
    url: str


def _storage_url(storage: str) -> str:
    return storage if "://" in storage else f"file://{Path(storage).resolve()}"


def upload_spec_code(spec: str | Path) -> tuple[JobSpec, bool]:
    """The spec with its code base uploaded to the job's storage (or found there already).

    Returns:
        The job spec naming the archive's URL, and whether anything was uploaded.

    Raises:
        SpecError: the spec has problems (all are listed); nothing was uploaded.
        CodeBaseError: the code base cannot be packed or uploaded.
    """
    from ultron.containerize.codebase import code_hash
    from ultron.containerize.remote import upload_code, upload_file
    from ultron.spec.loader import load_spec

    job = load_spec(spec, check_code=True)
    if job.code_is_remote:
        return job, False
    storage = _storage_url(job.storage)
    local = job.code_path
    if local.is_dir():
        url, uploaded = upload_code(local, storage)
    else:
        url, uploaded = upload_file(local, storage, name=code_hash(local))
    return job.model_copy(update={"code": url}), uploaded


def _api_url() -> str:
    from prefect.settings import PREFECT_API_URL

    api = PREFECT_API_URL.value()
    if not api:
        raise UsageError(
            "PREFECT_API_URL is not set; ultron submit starts a run on a Prefect server. "
            "Fix: export PREFECT_API_URL=http://<server>:4200/api (or `prefect config set`)"
        )
    return str(api)


def run_url(flow_run_id: str) -> str:
    """The flow run's page in the Prefect UI."""
    from prefect.settings import PREFECT_UI_URL

    ui = PREFECT_UI_URL.value() or _api_url().rstrip("/").removesuffix("/api")
    return f"{str(ui).rstrip('/')}/runs/flow-run/{flow_run_id}"


def start_run(job: JobSpec, *, deployment: str, job_id: str | None = None) -> SubmittedRun:
    """Create a flow run of ``deployment`` for ``job`` and return at once.

    Raises:
        UsageError: no Prefect server is set, or it has no such deployment.
        ServiceUnreachableError: the Prefect server did not create the run.
    """
    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound

    from ultron.paths import check_job_id, new_job_id
    from ultron.secrets import conceal

    api = _api_url()
    job_id = check_job_id(job_id) if job_id else new_job_id(job.name)
    # Prefect stores a run's parameters: the spec goes with its passwords masked.
    parameters = {"spec": conceal(job), "job_id": job_id}
    try:
        run: Any = run_deployment(deployment, parameters=parameters, timeout=0, as_subflow=False)
    except ObjectNotFound:
        raise UsageError(
            f"--deployment is {deployment!r}, which the Prefect server at {api} does not have. "
            "Fix: run `prefect deploy --all` in the ultron repository (prefect.yaml), or name "
            "one of `prefect deployment ls` as FLOW/DEPLOYMENT"
        ) from None
    except (OSError, RuntimeError) as exc:
        raise ServiceUnreachableError(
            [
                ConfigIssue(
                    "PREFECT_API_URL",
                    api,
                    f"the Prefect server there must create the run ({exc})",
                    "check PREFECT_API_URL and that the server runs (ultron server start)",
                )
            ],
            source="the environment",
            service="the Prefect server",
        ) from None
    return SubmittedRun(job_id, str(run.id), run_url(str(run.id)))


def watch_run(flow_run_id: str, *, every_s: float = 1.0) -> Iterator[tuple[str, float | None]]:
    """The run's state name and its progress artifact's percent, every ``every_s`` seconds,
    until the run ends (the last item is its final state)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        ArtifactFilterType,
    )

    run_id = uuid.UUID(flow_run_id)
    only_progress = ArtifactFilter(
        flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]),
        type=ArtifactFilterType(any_=["progress"]),
    )
    with get_client(sync_client=True) as client:
        while True:
            run = client.read_flow_run(run_id)
            found = client.read_artifacts(artifact_filter=only_progress)
            percent = max((float(a.data) for a in found if _number(a.data)), default=None)  # type: ignore[arg-type]
            state = str(run.state.name) if run.state else "Pending"
            yield state, percent
            if run.state is not None and run.state.type.value in _FINAL:
                return
            time.sleep(every_s)


def _number(value: Any) -> bool:
    return isinstance(value, int | float | str) and not isinstance(value, bool)
