"""What a user's class (a strategy, a stopper) takes: the options a spec passes to its
``__init__`` are checked against its signature before the class is built, so a typo in an
option is an error that names it, not an option silently lost."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ultron.errors import ConfigIssue, SpecError

__all__ = ["accepted_names"]


def accepted_names(
    cls: Callable[..., Any],
    options: Mapping[str, Any],
    *,
    injected: Iterable[str],
    field: str,
    label: str,
) -> tuple[list[str], bool] | None:
    """The keyword names ``cls`` takes, and whether it takes any (``**kwargs``); ``None`` when
    it has no signature to read.

    Args:
        cls: the user's class.
        options: the spec's options for it (each must be taken).
        injected: the names ultron passes itself (not listed as options it takes).
        field: the spec's field of the options, for the error.
        label: how the error names the class (e.g. ``pkg.mod:Class (file.py)``).

    Raises:
        SpecError: an option the class does not take.
    """
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return None
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    named = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = [k for k in options if not takes_any and k not in named]
    if unknown:
        skip = set(injected)
        takes = ", ".join(n for n in named if n not in skip) or "none"
        raise SpecError(
            [
                ConfigIssue(
                    field,
                    dict(options),
                    f"{label} takes no option {', '.join(map(repr, unknown))}; "
                    f"the options it takes: {takes}",
                    "remove the unknown option or fix its spelling",
                )
            ]
        )
    return named, takes_any
