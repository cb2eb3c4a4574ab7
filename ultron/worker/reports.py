"""A running trial's reports, on the worker: each ``ultron.report`` the trial process sends
over its socket is written under the job's keys (the trial's reports and, with early stopping,
the job's report stream) and answered with the stop flag; a trial that ignores a stop is
killed after its grace period (:class:`ForcedStop`). The worker's Redis client is the caller's
(``ultron.worker.runner``): the trial process holds none.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ultron.redis import keys
from ultron.trial_records import TrialRequest
from ultron.worker.pool import ProcessDied, WarmProcess

__all__ = ["ForcedStop", "last_reported", "wait_for_answer"]


class ForcedStop(Exception):
    """The trial was asked to stop (early stopping, the job's goal) and did not return within
    its grace period."""


def _store_report(client: Any, request: TrialRequest, entry: dict[str, Any]) -> bool:
    """Write one report of the trial under the job's keys; whether the trial should stop."""
    pipe = client.pipeline(transaction=False)
    ns = request.namespace  # the job's tenant's
    pipe.rpush(
        keys.trial_reports(request.job_id, request.trial_id, namespace=ns), json.dumps(entry)
    )
    if request.stream_reports:
        stream_entry = json.dumps({"trial_id": request.trial_id, **entry})
        pipe.rpush(keys.report_stream(request.job_id, namespace=ns), stream_entry)
    pipe.exists(keys.trial_stop(request.job_id, request.trial_id, namespace=ns))
    *_, stop = pipe.execute()
    return bool(stop)


def _report_entry(message: dict[str, Any]) -> dict[str, Any]:
    """A report as the trial sent it, with only the fields a report has: a step, a time and
    metric values (numbers), so a trial cannot write anything else under the job's keys."""
    entry = message.get("entry")
    if not isinstance(entry, dict):
        raise ProcessDied(f"trial process sent an unknown message {str(message)[:80]!r}")
    clean: dict[str, Any] = {}
    for name, value in entry.items():
        if not isinstance(name, str) or isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            clean[name] = value
    return clean


def wait_for_answer(process: WarmProcess, request: TrialRequest, client: Any) -> dict[str, Any]:
    """The trial's answer, storing its reports as they come and answering each with the stop
    flag; a trial that ignores a stop (early stopping, the job's goal reached, a cancellation)
    is killed after its grace period (ForcedStop)."""
    deadline = None if request.timeout is None else time.monotonic() + request.timeout
    stop_key = keys.trial_stop(request.job_id, request.trial_id, namespace=request.namespace)
    checked = time.monotonic()
    while True:
        left = 1.0 if deadline is None else min(1.0, max(deadline - time.monotonic(), 0.0))
        try:
            message: dict[str, Any] | None = process.receive(left)
        except TimeoutError:
            if deadline is not None and time.monotonic() >= deadline:
                raise
            message = None
        if message is not None and message.get("op") != "report":
            return message
        if message is not None:
            stop = _store_report(client, request, _report_entry(message))
            process.send({"op": "decision", "stop": stop})
            if time.monotonic() - checked < 1.0:
                continue  # a trial reporting fast: its stop flag is looked at once a second
        checked = time.monotonic()
        raw = client.get(stop_key)
        if raw:
            asked = json.loads(raw)
            if time.time() - asked["at"] > asked.get("grace", request.grace_period):
                raise ForcedStop(asked["decision"])


def last_reported(client: Any, request: TrialRequest) -> float | None:
    """The trial's last reported value of its metric, if it reported one."""
    for raw in reversed(
        client.lrange(
            keys.trial_reports(request.job_id, request.trial_id, namespace=request.namespace),
            -50,
            -1,
        )
    ):
        entry = json.loads(raw)
        if request.metric in entry:
            return float(entry[request.metric])
    return None
