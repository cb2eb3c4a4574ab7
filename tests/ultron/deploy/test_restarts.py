"""The restart automation's trigger, evaluated by the Prefect server's own matching: which crash
events start a restart (a crashed hpo-job run of a deployment, up to 3 runs) and which do not.
The whole job under a real server and worker is tests/flows/test_prefect_restart.py."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from prefect.server.events.schemas.automations import AutomationCore
from prefect.server.events.schemas.events import ReceivedEvent

from ultron.deploy.restarts import MAX_RESTARTS, QUIET_S, restart_automation


def _crash(run_count: int, *, flow: str = "hpo-job", deployment: bool = True) -> ReceivedEvent:
    """A flow run's Crashed event, labelled as Prefect's server labels it."""
    related = [
        {"prefect.resource.id": f"prefect.flow.{uuid.uuid4()}", "prefect.resource.role": "flow",
         "prefect.resource.name": flow},
    ]  # fmt: skip
    if deployment:
        related.append(
            {"prefect.resource.id": f"prefect.deployment.{uuid.uuid4()}",
             "prefect.resource.role": "deployment", "prefect.resource.name": "hpo-job"}
        )  # fmt: skip
    return ReceivedEvent(
        id=uuid.uuid4(),
        occurred=datetime.now(UTC),
        event="prefect.flow-run.Crashed",
        resource={
            "prefect.resource.id": f"prefect.flow-run.{uuid.uuid4()}",
            "prefect.run-count": str(run_count),
            "prefect.state-type": "CRASHED",
        },
        related=related,
    )


@pytest.fixture(scope="module")
def trigger():  # the server's model of what ultron creates through the API
    core = restart_automation()
    return AutomationCore.model_validate(core.model_dump(mode="json")).trigger


def test_a_crash_of_a_deployed_hpo_job_run_starts_a_restart_up_to_the_bound(trigger) -> None:
    for run_count in range(1, MAX_RESTARTS + 1):
        assert trigger.covers(_crash(run_count)) and trigger.starts_after(_crash(1).event)
    assert not trigger.covers(_crash(MAX_RESTARTS + 1))  # a loop of crashes ends
    assert not trigger.covers(_crash(0))  # never started: it would crash the same way


def test_other_flows_and_runs_without_a_deployment_are_left_alone(trigger) -> None:
    assert not trigger.covers(_crash(1, flow="benchmark"))
    assert not trigger.covers(_crash(1, deployment=False))  # ultron.run: nothing to schedule


def test_it_waits_for_the_run_to_stay_crashed(trigger) -> None:
    """Proactive: any state change of the run in the quiet time (a person ran it, Prefect's
    second crash report was refused) means no restart; it acts on the run it is about."""
    assert trigger.posture.value == "Proactive" and trigger.within == timedelta(seconds=QUIET_S)
    assert trigger.expects("prefect.flow-run.Running") and trigger.expects(
        "prefect.flow-run.Crashed"
    )
    assert trigger.for_each == {"prefect.resource.id"}
