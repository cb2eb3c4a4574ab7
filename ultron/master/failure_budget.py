"""A job's failure budget: the job fails as soon as more than ``max_failed_share`` of its trial
budget has failed (failed, crashed, timed out or out of memory), with the first failure's error.

The master counts the trial table's failures once, as the table is loaded (a resumed job's
earlier failures count), and then only the rows each update adds.

Example:
    >>> from ultron.trial_records import TrialStatus
    >>> def failed(n):
    ...     return TrialResult(f"{n:04d}", {}, TrialStatus.FAILED, error="ValueError: bad lr")
    >>> budget, table = FailureBudget(), [failed(0)]
    >>> budget.check(table, trials=4, max_failed_share=0.5)  # as loaded: 1 of 4, within it
    >>> new = [failed(1), failed(2)]
    >>> budget.check(table + new, new, trials=4, max_failed_share=0.5)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ultron.errors.JobFailedError: 3 of 4 trials failed (failed; first: trial 0000: ValueError: ...
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ultron.errors import JobFailedError
from ultron.trial_records import TrialResult, TrialStatus

__all__ = ["FailureBudget"]

_FAILURES = frozenset(
    {TrialStatus.FAILED, TrialStatus.CRASHED, TrialStatus.TIMEOUT, TrialStatus.OUT_OF_MEMORY}
)


@dataclass
class FailureBudget:
    """Counts a job's failed trials as its table grows; raises once they are too many."""

    _failed: list[TrialResult] | None = field(default=None, repr=False)

    def check(
        self,
        table: Sequence[TrialResult],
        new: Sequence[TrialResult] = (),
        *,
        trials: int,
        max_failed_share: float,
    ) -> None:
        """Count the failures among the ``new`` rows (on the first call, among the whole
        ``table``, which holds ``new``) and fail the job past the share.

        Args:
            table: the job's trial table.
            new: the rows the last update added to it.
            trials: the job's trial budget (``num_iterations``).
            max_failed_share: the share of ``trials`` that may fail.

        Raises:
            JobFailedError: more than ``max_failed_share`` of ``trials`` failed; it names how
                many, of which kinds, the first failure's error and the fix.
        """
        if self._failed is None:  # once: the table as loaded; then only the new rows
            self._failed = [t for t in table if t.status in _FAILURES]
        else:
            self._failed.extend(t for t in new if t.status in _FAILURES)
        failed = self._failed
        if len(failed) > max_failed_share * trials:
            kinds = sorted({str(t.status) for t in failed})
            raise JobFailedError(
                f"{len(failed)} of {trials} trials failed ({', '.join(kinds)}; "
                f"first: trial {failed[0].trial_id}: {failed[0].error}), more than "
                f"max_failed_share={max_failed_share}. Fix: see the tracebacks in the "
                "trial table and the trial logs; raise max_failed_share to tolerate more"
            )
