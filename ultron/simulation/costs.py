"""What the real system pays around a trial's steps, which the simulator charges.

A learning curve gives the seconds of each step; a real job pays more than that (HyperDrive
section 7 charges the same): the dispatch of each trial (the master's submit to the first step,
and the trial's end to the master's next submit), each report's round trip, a checkpoint written
as a trial returns and read back when it resumes, and the one step a trial still trains after
the report a stop was decided on (:mod:`ultron.worker.runner` answers each report with the stop
flag as it is when the report arrives; the stopper decides on that report a moment later, so the
trial hears it with its next report).

The defaults are measured on the project's 2-core machine (the measurements are in
``benchmarks/RESULTS.md``):

- ``start_s`` and ``return_s``: the hand-off between two trials traced under
  ``python -m benchmarks.overhead`` (quiet machine, 2026-11-24, 47c0ca6: a median 10 ms from one
  trial's end to the next one's start on the freed worker). ``start_s``, 3.2 ms: submit to the
  task's start on the worker (1.5-2.5 ms) and ``run_trial``'s start to ``score`` (1.2 ms).
  ``return_s``, 6.8 ms: ``score``'s end to ``run_trial``'s return (1.3 ms), the answer back to
  the master (2.2-2.3 ms), the master's answer to its next submit (1.0 ms), and the 2.2 ms of
  the measured gap these pieces leave unexplained.
- ``checkpoint_write_s`` and ``checkpoint_read_s``: ``python -m benchmarks.checkpoint_overhead
  --epochs 3 --rounds 3`` (a 7.8 MB PyTorch model with its Adam state; 2 cores under load 5-19,
  2026-11-27): the median ``save s`` of ``local`` (``torch.save`` into a new epoch folder and its
  marker: 0.020 s) and the median ``resume s`` of ``local`` (loading the newest checkpoint into
  a fresh model on the same machine, as a local job's resume does: 0.019 s). A resume from an
  S3 store on another worker took 0.086 s (``s3-side``).
- ``report_s``: the median time per epoch beyond the model's sleep in the live job of
  ``python -m benchmarks.sim_vs_live`` (2,399 epochs; the report's round trip through the worker
  and Redis, and ``time.sleep``'s overshoot; 2 cores under load 19, 2026-11-27): 2.5 ms. The
  mean was 9.3 ms: under load a report waits for a core.
- ``decision_lag``: 1, by construction: the worker answers a report with the trial's stop flag
  in the same Redis round trip that hands the report on (``ultron.worker.runner``).

A benchmark whose model checkpoints differently, or a machine that is busier, passes its own
measured values: ``simulate_job(..., costs=SimulationCosts(start_s=0.02, ...))``.

Example:
    >>> SimulationCosts.free().dispatch_s
    0.0
    >>> SimulationCosts(start_s=0.004, return_s=0.006).dispatch_s
    0.01
    >>> SimulationCosts(decision_lag=-1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: decision_lag is -1; it must be a whole number of steps, 0 or more (0: a trial ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

__all__ = ["SimulationCosts"]


@dataclass(frozen=True)
class SimulationCosts:
    """Seconds the simulator charges around each trial's steps (defaults: measured, see the
    module's docstring).

    Attributes:
        start_s: dispatch latency before a trial's first step: the master's submit to the
            moment the model's ``score`` starts.
        return_s: dispatch latency after a trial's last step: ``score`` returns to the
            master's next submit (the worker stays busy until then).
        checkpoint_write_s: a trial writes its checkpoint as it returns (told to stop or
            suspend, or finished), so that a suspended trial can resume and the finished model
            is kept; an attempt that trained nothing writes none.
        checkpoint_read_s: a resumed attempt (after a suspension, a retry or population-based
            training's exploit) restores its checkpoint before its next step.
        report_s: each step's report: ``ultron.report`` to the trial's worker, into Redis, and
            the answer back, before the next step begins.
        decision_lag: steps a trial still trains after the report a stop or suspend was
            decided on (1: the real system's; 0: the trial stops at that report).
    """

    start_s: float = 0.0032
    return_s: float = 0.0068
    checkpoint_write_s: float = 0.020
    checkpoint_read_s: float = 0.019
    report_s: float = 0.0025
    decision_lag: int = 1

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name == "decision_lag":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ValueError(
                        f"decision_lag is {value!r}; it must be a whole number of steps, 0 or "
                        "more (0: a trial stops at the report the decision is made on)"
                    )
            elif isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{item.name} is {value!r}; it must be a number of seconds")
            elif not math.isfinite(value) or value < 0:
                raise ValueError(
                    f"{item.name} is {value!r}; it must be a finite number of seconds, 0 or more"
                )

    @classmethod
    def free(cls) -> SimulationCosts:
        """Nothing charged: steps take their curve's seconds and decisions act at once."""
        return cls(
            start_s=0.0,
            return_s=0.0,
            checkpoint_write_s=0.0,
            checkpoint_read_s=0.0,
            report_s=0.0,
            decision_lag=0,
        )

    @property
    def dispatch_s(self) -> float:
        """The dispatch latency of one trial, both ends together."""
        return self.start_s + self.return_s
