"""Errors of the Data Manager, part of the :mod:`ultron.errors` hierarchy."""

from __future__ import annotations

from dataclasses import dataclass

from ultron.errors import UltronError

__all__ = ["DataServiceError", "DataValidationError", "ExpectationFailure"]


@dataclass(frozen=True)
class ExpectationFailure:
    """One expectation the data did not meet.

    Attributes:
        expectation: the expectation as the spec wrote it, e.g. ``label in_set [0, 1]``.
        column: the column it checks (``None`` for table-wide expectations).
        observed: what the data showed, e.g. ``3 of 200 rows outside: [7, 9]``.
        fix: what to do about it.
    """

    expectation: str
    column: str | None
    observed: str
    fix: str

    def __str__(self) -> str:
        return f"{self.expectation}: {self.observed}. Fix: {self.fix}"


class DataValidationError(UltronError):
    """The job's data broke one or more expectations; no trial has run.

    Example:
        >>> failure = ExpectationFailure("y in_set [0, 1]", "y", "1 of 4 rows outside: [7]",
        ...                              "correct the labels or allow 7")
        >>> print(DataValidationError("file:///d", [failure]))
        data at file:///d failed 1 expectation(s):
          - y in_set [0, 1]: 1 of 4 rows outside: [7]. Fix: correct the labels or allow 7
    """

    def __init__(self, url: str, failures: list[ExpectationFailure]) -> None:
        self.url = url
        self.failures = list(failures)
        lines = [f"data at {url} failed {len(self.failures)} expectation(s):"]
        lines += [f"  - {failure}" for failure in self.failures]
        super().__init__("\n".join(lines))


class DataServiceError(UltronError):
    """The data service could not be started, reached or used."""
