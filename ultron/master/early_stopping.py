"""Drives a stopper (``algorithms/stoppers``) from the trials' reports, in the master.

Trials push each ``ultron.report`` to the job's report stream in Redis. A daemon thread pops
them, turns the trial's own step numbers into the stopper's (1, 2, 3, ... per trial, counting
across suspensions and ignoring steps a restarted attempt reports again), asks the stopper (or,
for a report that came after its decision, only tells it: :meth:`StopperDriver._late`), and
carries out a ``STOP`` or ``SUSPEND`` by setting the trial's stop flag: ``ultron.report`` then
tells the model to return (cooperative), and the worker kills a trial that does not return within
the grace period (forced). The master asks :meth:`outcome` when a trial returns.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from ultron.algorithms.stoppers.base import Command, Decision, Stopper
from ultron.redis import keys

__all__ = ["StopperDriver"]

logger = logging.getLogger(__name__)


class StopperDriver:
    """One job's stopper, fed from its report stream; thread-safe.

    Args:
        stopper: the stopper.
        client: a Redis client (``ultron.redis.client.connect``); ``None`` in a simulation,
            where the simulated workers call :meth:`feed` themselves and honour decisions at once.
        job_id: the job.
        metric: the reported metric the stopper judges.
    """

    def __init__(
        self,
        stopper: Stopper,
        client: Any | None,
        job_id: str,
        *,
        metric: str,
        namespace: str = keys.NAMESPACE,
    ) -> None:
        self.stopper = stopper
        self.client = client
        self.job_id = job_id
        self.namespace = namespace
        self.metric = metric
        self._lock = threading.Lock()
        self._steps: dict[str, int] = {}
        self._last_user_step: dict[str, float] = {}
        self._decided: dict[str, Decision] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"stopper-{job_id}", daemon=True)

    def start(self) -> StopperDriver:
        if self.client is not None:
            self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        key = keys.report_stream(self.job_id, namespace=self.namespace)
        assert self.client is not None  # started only with a client
        while not self._stop.is_set():
            try:
                item = self.client.blpop([key], timeout=0.5)
            except Exception:  # Redis away: the client retries; never let the thread die
                logger.exception("reading the report stream failed")
                time.sleep(0.5)
                continue
            if item is not None:
                self.feed(json.loads(item[1]))

    def drain(self) -> None:
        """Judge every report still in the stream (called before deciding a trial's outcome)."""
        if self.client is None:
            return
        key = keys.report_stream(self.job_id, namespace=self.namespace)
        while (raw := self.client.lpop(key)) is not None:
            self.feed(json.loads(raw))

    def feed(self, entry: dict[str, Any]) -> None:
        """Judge one report ``{"trial_id", "step", <metrics>}``."""
        trial_id, value = str(entry["trial_id"]), entry.get(self.metric)
        if value is None:
            return
        with self._lock:
            if entry["step"] <= self._last_user_step.get(trial_id, float("-inf")):
                return  # a restarted attempt reports a step again
            self._last_user_step[trial_id] = entry["step"]
            step = self._steps[trial_id] = self._steps.get(trial_id, 0) + 1
            if trial_id in self._decided:
                self._late(trial_id, step, float(value))
                return
            decision = self.stopper.on_report(trial_id, step, float(value))
            if decision in (Decision.STOP, Decision.SUSPEND) and step < self.stopper.max_resource:
                self._decided[trial_id] = decision
                self._flag(trial_id, json.dumps({"decision": str(decision), "at": time.time()}))

    def _late(self, trial_id: str, step: int, value: float) -> None:
        """A report after the trial's stop or suspension, counted but not judged.

        The worker answers each report with the stop flag as it is, so a trial hears a
        decision with its next report (later when the stopper was slow to decide): it trained
        this step, and the checkpoint it writes as it returns holds it, so a resumed attempt
        goes on after it. A trial that reached ``max_resource`` before it heard the decision
        is complete: nothing is left to resume or stop, and its stop flag goes, so that the
        worker does not kill it while it saves and returns.
        """
        self.stopper.on_late_report(trial_id, step, value)
        if step >= self.stopper.max_resource:
            del self._decided[trial_id]
            self._flag(trial_id, None)

    def start_trial(self, trial_id: str, config: dict[str, Any] | None = None) -> None:
        """A new trial starts, with ``config`` (what a stopper that explores perturbs)."""
        with self._lock:
            self.stopper.on_trial_start(trial_id)
            if config is not None:
                self.stopper.on_trial_config(trial_id, config)

    def lineage(self, trial_id: str) -> list[dict[str, Any]]:
        """The trial's exploit steps (population-based training), oldest first."""
        with self._lock:
            return self.stopper.lineage(trial_id)

    def resume_trial(self, trial_id: str) -> None:
        """A suspended trial runs again: clear its decision and its stop flag."""
        with self._lock:
            self._decided.pop(trial_id, None)
        self._flag(trial_id, None)

    def outcome(self, trial_id: str) -> Decision | None:
        """What the stopper decided for a trial that returned (None: it ran to its end)."""
        self.drain()
        with self._lock:
            return self._decided.get(trial_id)

    def decided(self, trial_id: str) -> Decision | None:
        """The pending decision for a trial, without reading the stream."""
        with self._lock:
            return self._decided.get(trial_id)

    def steps(self, trial_id: str) -> int:
        with self._lock:
            return self._steps.get(trial_id, 0)

    def complete(self, trial_id: str) -> None:
        with self._lock:
            self._decided.pop(trial_id, None)
            self.stopper.on_trial_complete(trial_id)
        self._flag(trial_id, None)

    def _flag(self, trial_id: str, value: str | None) -> None:
        """Set or clear the trial's stop flag (what ``ultron.report`` reads)."""
        if self.client is None:
            return
        if value is None:
            self.client.delete(keys.trial_stop(self.job_id, trial_id, namespace=self.namespace))
        else:
            self.client.set(keys.trial_stop(self.job_id, trial_id, namespace=self.namespace), value)

    def poll(self, *, free_slots: int, can_start_new: bool) -> list[Command]:
        with self._lock:
            return self.stopper.poll(free_slots=free_slots, can_start_new=can_start_new)

    def set_slots(self, slots: int) -> None:
        """The job now runs ``slots`` trials at once (``ultron scale``)."""
        with self._lock:
            self.stopper.set_slots(slots)

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "stopper": self.stopper.state_dict(),
                "steps": dict(self._steps),
                "last_user_step": dict(self._last_user_step),
                "decided": {k: str(v) for k, v in self._decided.items()},
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            self.stopper.load_state_dict(state["stopper"])
            self._steps = dict(state["steps"])
            self._last_user_step = dict(state["last_user_step"])
            self._decided = {k: Decision(v) for k, v in state["decided"].items()}
