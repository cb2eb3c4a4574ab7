"""A job's budget: how many trials it scores and how long it may run, whichever ends first.

Durations are written with units, as people write them: ``90s``, ``20 s``, ``2h``, ``1h30m``,
``1.5h``; a bare number is seconds. Each part is read by Dask's
:func:`dask.utils.parse_timedelta` (its units: s, m, h, d, w and their long names).

Example:
    >>> parse_duration("1h30m"), parse_duration("20 s"), parse_duration(90)
    (5400.0, 20.0, 90.0)
    >>> Budget(time="2h").time
    7200.0
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from ultron.spec.strict import Strict, not_a_bool, rule_error

__all__ = [
    "MAX_ITERATIONS",
    "MAX_TIME_S",
    "Budget",
    "check_num_iterations",
    "check_trials_once",
    "one_trial_budget",
    "parse_duration",
]

# A job keeps every trial in its trial table (Redis) and its result files; past this many
# trials a job is a mistake (a typo, an extra zero) more often than a plan.
MAX_ITERATIONS = 100_000
MAX_TIME_S = 365 * 24 * 3600  # a year: a longer time budget is a typo (an extra digit, d for h)

_PART = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)")


def parse_duration(value: Any) -> float:
    """Seconds in ``value``: a number (seconds) or a text of parts with units (``1h30m``).

    Raises:
        ValueError: ``value`` is not a duration (the message says what is wrong).
    """
    from dask.utils import parse_timedelta

    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"a duration is a number of seconds or a text like 90s, not {value!r}")
    if not isinstance(value, str):
        seconds = float(value)
    else:
        text, seconds, at = value.strip(), 0.0, 0
        while at < len(text):
            part = _PART.match(text, at)
            if part is None or part.end() == at:
                raise ValueError(f"{value!r} is not a duration")
            number, unit = part.groups()
            if not unit and (at > 0 or part.end() < len(text)):
                raise ValueError(f"{value!r} has a number without its unit")
            try:
                seconds += float(parse_timedelta(f"{number}{unit}", default="s"))
            except (KeyError, ValueError) as exc:
                raise ValueError(f"{value!r} has an unknown unit {unit!r}") from exc
            at = part.end()
        if not text:
            raise ValueError("the duration is empty")
    if not math.isfinite(seconds):
        raise ValueError(f"{value!r} is not a finite duration")
    return seconds


def _duration(value: Any) -> Any:
    """A ``mode="before"`` check of a duration field: its seconds, or an error with the fix."""
    if value is None:
        return None
    fix = "write e.g. 90s, 20 s, 45m, 2h or 1h30m (units: s, m, h, d, w)"
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise rule_error(
            f"it must be a duration: a number of seconds or a number with a unit ({exc})", fix
        ) from None
    if seconds <= 0:
        raise rule_error("it must be a duration longer than 0 s", f"{fix}, or leave it out")
    return seconds


class Budget(Strict):
    """What a job may spend. The job ends when the first of its limits is reached.

    ``trials`` is another way to write ``num_iterations`` (set one of them), which keeps the
    number: a validated spec has it there, and ``trials`` empty. ``time`` is the
    wall-clock time of the search, counted over all the runs of a job id: a resumed job has
    what its earlier runs left. When it runs out no trial starts, the running ones are asked
    to stop (``ultron.report`` answers ``STOP``; one that does not return within
    ``ULTRON_CANCEL_GRACE`` seconds is stopped) and are recorded ``stopped``, and the job ends
    ``completed`` with the reason ``time budget``.
    """

    trials: int | None = Field(
        default=None,
        ge=1,
        le=MAX_ITERATIONS,
        strict=True,
        description=f"Number of trials (1 to {MAX_ITERATIONS}); the same as num_iterations.",
    )
    time: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TIME_S,
        strict=True,  # after _duration: a text with units is read there, into seconds
        description="Wall-clock time of the search: 90s, 20 s, 45m, 2h, 1h30m (a bare number "
        "is seconds; at most 365 days), counted over the job's runs (a resumed job has what is "
        "left).",
    )

    _trials_not_bool = field_validator("trials", mode="before")(not_a_bool)
    _time_is_a_duration = field_validator("time", mode="before")(_duration)


def one_trial_budget(data: Any) -> Any:
    """``budget.trials`` is another way to write ``num_iterations``, which keeps the number
    (so a dumped spec with ``num_iterations`` overridden stays valid). A model validator
    of the raw spec."""
    if not isinstance(data, dict) or not isinstance(data.get("budget"), dict):
        return data
    trials = data["budget"].get("trials")
    if trials is None or data.get("num_iterations") is not None:
        return data  # both set: check_trials_once compares them
    budget = {k: v for k, v in data["budget"].items() if k != "trials"}
    return {**data, "num_iterations": trials, "budget": budget}


def check_trials_once(value: Budget, info: ValidationInfo) -> Budget:
    """``budget.trials`` and ``num_iterations`` both set: the same number, kept in
    ``num_iterations`` (a field validator of ``budget``)."""
    count = info.data.get("num_iterations")
    if value.trials is None or count is None:
        return value
    if value.trials != count:
        raise rule_error(
            f"it sets trials to {value.trials}, and num_iterations is {count}: they are one number",
            "set one of budget.trials and num_iterations, or both to the same value",
        )
    return value.model_copy(update={"trials": None})


def check_num_iterations(value: int) -> int:
    """``num_iterations`` at most :data:`MAX_ITERATIONS` (a field validator)."""
    if value > MAX_ITERATIONS:
        raise rule_error(
            f"it must be at most {MAX_ITERATIONS}: every trial stays in the job's trial "
            "table and result files",
            f"set num_iterations to {MAX_ITERATIONS} or less; for a longer search run "
            "several jobs (each with its own seed), or narrow the search space",
        )
    return value
