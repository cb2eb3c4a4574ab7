"""What a running job shows where its users look: progress events for the CLI, and in the
Prefect UI a progress artifact and a leaderboard table artifact (with the best configuration)
that follow the trials as they finish (paper VII: the portal shows progress and the best result
so far).

The master's loop must not wait on the Prefect API: :meth:`JobMonitor.update` only counts and
remembers (microseconds), and a background thread writes the artifacts at most every
``every_s`` seconds when something changed, and once more at :meth:`JobMonitor.close`. The
thread runs in a copy of the task's context, so the artifacts belong to the flow run.
"""

from __future__ import annotations

import contextvars
import threading
from typing import Any

from prefect import get_run_logger
from prefect.artifacts import (
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)

from ultron.master.job_state import JobState, JobStatus, trial_counts
from ultron.master.progress import ProgressEvent, emit
from ultron.master.results import best_trial, leaderboard
from ultron.paths import artifact_key
from ultron.secrets import redact
from ultron.spec.job import JobSpec
from ultron.spec.objectives import job_bounds, job_goals
from ultron.trial_records import TrialResult

__all__ = ["JobMonitor", "leaderboard_rows"]

ARTIFACT_EVERY_S = 2.0
_TOP = 10


def leaderboard_rows(trials: list[TrialResult], spec: JobSpec) -> list[dict[str, Any]]:
    """The top trials as rows of a table: rank, trial, the objective (each of several, and
    each constrained metric), status, configuration."""
    goals, bounds = (job_goals(spec) if spec.objectives else ()), job_bounds(spec)
    named = [g.metric for g in goals] + [b.metric for b in bounds]
    board = leaderboard(trials, spec.objective.mode, goals=goals, bounds=bounds)
    return [
        {
            "rank": rank,
            "trial": t.trial_id,
            spec.objective.metric: t.score,
            **{m: t.metrics.get(m) for m in named},
            "status": str(t.status),
            **t.hyperparameters,
        }
        for rank, t in enumerate(board[:_TOP], 1)
    ]


class JobMonitor:
    """Progress events for listeners, and the job's artifacts written from a thread.

    Counts each trial as it finishes (in batch mode the state only grows at the end of a
    round). Call :meth:`close` when the search ends, however it ends.
    """

    def __init__(
        self, spec: JobSpec, job_id: str, state: JobState, *, every_s: float = ARTIFACT_EVERY_S
    ) -> None:
        self.spec = spec
        self.job_id = job_id
        self.done = len(state.trials)
        self.trials: list[TrialResult] = list(state.trials)
        self._bounds = job_bounds(spec)  # the best shown so far is a feasible trial
        self.best = best_trial(state.trials, spec.objective.mode, bounds=self._bounds)
        self.every_s = every_s
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._closing = threading.Event()
        self._artifact: Any = None
        self._logger = get_run_logger()
        context = contextvars.copy_context()  # the task run's: artifacts land on the flow run
        self._thread = threading.Thread(
            target=context.run, args=(self._loop,), name=f"ultron-artifacts-{job_id}", daemon=True
        )
        self._changed.set()  # the first write shows the job at once
        self._thread.start()

    @property
    def percent(self) -> float:
        return 100.0 * self.done / self.spec.num_iterations

    def update(self, state: JobState, running: int, last: TrialResult | None = None) -> None:
        """A trial finished (``last``) or the running count changed: tell the listeners now;
        the artifacts follow from the thread."""
        with self._lock:
            if last is not None:
                self.done += 1
                self.trials.append(last)
                mode = self.spec.objective.mode
                seen = [t for t in (self.best, last) if t]
                self.best = best_trial(seen, mode, bounds=self._bounds)
        best = self.best
        emit(
            ProgressEvent(
                self.job_id,
                self.done,
                self.spec.num_iterations,
                running,
                best.score if best else None,
                best.hyperparameters if best else None,
                last.to_dict() if last else {},
            )
        )
        if last is not None:
            self._changed.set()
            if last.log_tail is not None:  # a trial that did not complete
                self._log_failure(last)

    def _log_failure(self, trial: TrialResult) -> None:
        """A trial that did not complete: its error and last lines of output in the flow
        run's log (the whole log is in the job's storage, ``ultron logs JOB TRIAL``)."""
        tail = trial.log_tail or []
        lines = "\n".join(f"  | {line}" for line in tail) if tail else "  (it printed nothing)"
        self._logger.warning(
            "trial %s %s: %s\nits last %d lines of output (all: ultron logs %s %s):\n%s",
            trial.trial_id,
            trial.status,
            redact(trial.error or "no error message"),
            len(tail),
            self.job_id,
            trial.trial_id,
            redact(lines),
        )

    def close(self) -> None:
        """Stop the thread after a last write of what changed; safe to call twice."""
        if not self._closing.is_set():
            self._closing.set()
            self._changed.set()
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        while True:
            self._changed.wait()
            closing = self._closing.is_set()
            self._changed.clear()
            self._write()
            if closing:
                return
            self._closing.wait(self.every_s)  # throttle: at most one write every every_s

    def _write(self) -> None:
        with self._lock:
            trials, percent, best = list(self.trials), self.percent, self.best
        try:
            if self._artifact is None:
                self._artifact = create_progress_artifact(
                    progress=percent,
                    key=artifact_key(self.job_id, "progress"),
                    description=self.spec.name,
                )
            else:
                update_progress_artifact(self._artifact, percent)
            if trials:
                metric = self.spec.objective.metric
                shown = (
                    f"best {metric} {best.score:.6g} with {best.hyperparameters}"
                    if best is not None and best.score is not None
                    else "no score yet"
                )
                create_table_artifact(
                    leaderboard_rows(trials, self.spec),
                    key=artifact_key(self.job_id, "leaderboard"),
                    description=redact(
                        f"{self.spec.name}: {JobStatus.RUNNING}, {len(trials)} of "
                        f"{self.spec.num_iterations} trials ({trial_counts(trials)}); {shown}"
                    ),
                )
        except Exception:  # the artifacts are for the UI; the job goes on without them
            self._logger.warning("could not update the job's artifacts", exc_info=True)
