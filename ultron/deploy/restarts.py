"""What runs a crashed HPO job again under Prefect: an automation of Prefect's own.

A flow run whose process dies (SIGKILL, the OOM killer, an evicted pod, a lost node) never
reaches its own ``finally``: the worker that started it sees the process exit and marks the run
``Crashed``. Prefect's flow retries do not apply (they retry a run whose code raised). This
automation, evaluated by the Prefect server's triggers and actions services, moves a crashed
run of the ``hpo-job`` flow that came from a deployment back to ``Scheduled``; its worker
runs the same flow run again, so the job keeps its id (``ultron.flows.hpo_job`` derives a new
job's id from the flow run id) and resumes from its stored state.

It waits :data:`QUIET_S` after the crash, and acts only if the run stayed ``Crashed`` that
long: a process worker reports the crash twice, once when its process exits and again when the
worker is done with that process (16 s later in a test on a loaded machine). A run scheduled
at once could meet that second report while the new process starts (``Crashed`` again, so
scheduled again: two masters); a run still ``Crashed`` meets it as a transition Prefect
refuses. A person who runs it again within that time wins.

The restarts are bounded: the trigger matches only the crashes whose ``prefect.run-count``
(the runs so far, a label of Prefect's state-change event) is at most :data:`MAX_RESTARTS`, so
a run that crashes every time ends ``Crashed`` after ``MAX_RESTARTS + 1`` runs. A run that
crashed before its flow started (run count 0: a worker that could not start the process) is
not restarted: it would crash the same way.

``prefect deploy`` creates the automation (the build step of ``prefect.yaml`` calls
:func:`deploy_step`), and ``ultron serve`` does; both replace the automation of the same name,
so deploying again updates it.

Example:
    >>> automation = restart_automation()
    >>> automation.actions[0].type, automation.trigger.after, automation.trigger.posture.value
    ('change-flow-run-state', {'prefect.flow-run.Crashed'}, 'Proactive')
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from prefect.client.schemas.objects import StateType
from prefect.events.actions import ChangeFlowRunState
from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture

__all__ = [
    "AUTOMATION_NAME",
    "MAX_RESTARTS",
    "QUIET_S",
    "deploy_step",
    "ensure_restart_automation",
    "restart_automation",
]

logger = logging.getLogger(__name__)

AUTOMATION_NAME = "ultron: run a crashed hpo-job again"
FLOW_NAME = "hpo-job"  # ultron.flows.hpo_job's @flow(name=...)
MAX_RESTARTS = 3
"""How many times one flow run of ``hpo-job`` is restarted after a crash, at most."""
QUIET_S = 30
"""Seconds a run must stay ``Crashed`` before it is scheduled again."""


def restart_automation(
    max_restarts: int = MAX_RESTARTS, quiet_s: float = QUIET_S
) -> AutomationCore:
    """The automation: a crashed ``hpo-job`` run of a deployment that stays ``Crashed`` for
    ``quiet_s`` seconds goes back to ``Scheduled``."""
    return AutomationCore(
        name=AUTOMATION_NAME,
        description=(
            f"Schedules a crashed run of the {FLOW_NAME} flow (from a deployment) again, up to "
            f"{max_restarts} times; the job resumes with its id. Created by ultron."
        ),
        # Proactive: fires when a run that crashed has no other state change in ``quiet_s``.
        trigger=EventTrigger(
            after={"prefect.flow-run.Crashed"},
            expect={"prefect.flow-run.*"},
            match={
                "prefect.resource.id": "prefect.flow-run.*",
                "prefect.run-count": [str(n) for n in range(1, max_restarts + 1)],
            },
            # Every listed resource must be related: the hpo-job flow, and a deployment (a
            # run with none cannot be scheduled again: Prefect refuses that transition).
            match_related=[
                {"prefect.resource.role": "flow", "prefect.resource.name": FLOW_NAME},
                {"prefect.resource.role": "deployment"},
            ],
            for_each={"prefect.resource.id"},  # each crashed run on its own
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=quiet_s),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.SCHEDULED,
                name="Scheduled",
                message="crashed: scheduled again by ultron's restart automation",
                force=False,  # Prefect's rules decide (a run with no deployment is refused)
            )
        ],
    )


def ensure_restart_automation(max_restarts: int = MAX_RESTARTS, quiet_s: float = QUIET_S) -> str:
    """Create the automation on the current Prefect API, replacing one of the same name.

    Returns:
        The automation's id.
    """
    from prefect.client.orchestration import get_client

    automation = restart_automation(max_restarts, quiet_s)
    with get_client(sync_client=True) as client:
        existing = client.read_automations_by_name(AUTOMATION_NAME)
        if existing:
            client.update_automation(existing[0].id, automation)
            for extra in existing[1:]:  # two deploys at once may each have created one
                client.delete_automation(extra.id)
            automation_id = str(existing[0].id)
        else:
            automation_id = str(client.create_automation(automation))
    logger.info("Prefect automation %r: %s", AUTOMATION_NAME, automation_id)
    return automation_id


def deploy_step(
    max_restarts: int = MAX_RESTARTS, quiet_s: float = QUIET_S, **_: Any
) -> dict[str, str]:
    """``prefect deploy``'s build step (``prefect.yaml``): :func:`ensure_restart_automation`.

    Returns:
        The step's output: ``{"restart_automation_id": ID}``.
    """
    automation_id = ensure_restart_automation(int(max_restarts), float(quiet_s))
    return {"restart_automation_id": automation_id}
