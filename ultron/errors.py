"""The one hierarchy of errors that ultron raises on purpose.

Every error meant for a user names the field, the value, the rule and the fix, e.g.
``parallelism is 0; it must be at least 1: set parallelism to 1 or more``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CodeBaseError",
    "ConfigIssue",
    "EnvironmentVariableError",
    "JobBusyError",
    "JobCancelledError",
    "JobFailedError",
    "ResourceTimeoutError",
    "ServiceUnreachableError",
    "SpecError",
    "TrialError",
    "UltronError",
    "UsageError",
    "printable",
]


def printable(text: str) -> str:
    r"""``text`` with every character that is not printable escaped as Python writes it
    (``\x1b``, ``\n``, ``\u202e``): control characters and bidi overrides in a name or a
    value cannot move the cursor, hide a line or reverse the text they are printed in.

    Example:
        >>> printable("job\u202egpj.exe\x1b[2J")
        'job\\u202egpj.exe\\x1b[2J'
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


class UltronError(Exception):
    """Base class of every error ultron raises on purpose."""


@dataclass(frozen=True)
class ConfigIssue:
    """One problem found in a user's input.

    Attributes:
        field: dotted path of the field, e.g. ``search_space.lr.low``.
        value: the offending value, as the user wrote it.
        rule: what the value must satisfy.
        fix: what to do about it.
    """

    field: str
    value: object
    rule: str
    fix: str

    def __str__(self) -> str:
        # The field, rule and fix may quote what the user wrote (an unknown key, a name).
        return printable(f"{self.field} is {self.value!r}; {self.rule}. Fix: {self.fix}")


class SpecError(UltronError):
    """A job spec with one or more problems; all of them are reported at once."""

    def __init__(self, issues: list[ConfigIssue], source: str = "job spec") -> None:
        self.issues = list(issues)
        self.source = source
        lines = [f"{source} has {len(self.issues)} problem(s):"]
        lines += [f"  - {issue}" for issue in self.issues]
        super().__init__("\n".join(lines))


class UsageError(UltronError):
    """A command was given what it cannot use (an option, an environment variable); the message
    names it, the rule and the fix. The command exits 2, as for a bad spec."""


class ServiceUnreachableError(SpecError):
    """A service the job needs (its Redis, its storage, the Prefect server) did not answer.

    A :class:`SpecError` too: its issue names the field the address came from, and the fix.
    Its message says what is unreachable (``Redis is unreachable:``), not that a spec has
    problems: the address may come from a command's option or the environment.
    """

    def __init__(
        self, issues: list[ConfigIssue], source: str = "job spec", *, service: str = "a service"
    ) -> None:
        super().__init__(issues, source)
        self.service = service
        self.args = ("\n".join([f"{service} is unreachable:", *(f"  - {i}" for i in issues)]),)


class EnvironmentVariableError(SpecError):
    """One or more ``ULTRON_*`` environment variables have bad values; all are reported."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        super().__init__(issues, source="the environment")


class CodeBaseError(UltronError):
    """The user's code base cannot be read, unpacked or installed."""


class ResourceTimeoutError(UltronError):
    """The resource limiter could not grant the requested units in time."""


class JobCancelledError(UltronError):
    """The job was asked to stop (SIGINT, SIGTERM, SIGHUP, ``ultron cancel``); it ended
    ``cancelled`` and can resume.

    Attributes:
        signal_number: the signal that asked, or ``None`` when asked otherwise.
        result: what the job had done (an ``HPOResult``), when ``ultron.run`` raises it.
    """

    def __init__(
        self, message: str, *, signal_number: int | None = None, result: object = None
    ) -> None:
        super().__init__(message)
        self.signal_number = signal_number
        self.result = result


class JobBusyError(UltronError):
    """Another live master holds the job (:mod:`ultron.master.heartbeat`): one runs it at a time."""


class JobFailedError(UltronError):
    """Too many trials of a job failed (more than the spec's ``max_failed_share``)."""


class TrialError(UltronError):
    """A trial could not be run at all (not a failure of the user's ``score``)."""
