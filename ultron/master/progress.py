"""In-process progress events of a running job, for the CLI's progress bar and for tests."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ProgressEvent", "emit", "listening"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProgressEvent:
    """A snapshot after a change: trials done of the budget, the best so far, what runs."""

    job_id: str
    done: int
    budget: int
    running: int
    best_score: float | None = None
    best_config: dict[str, Any] | None = None
    last: dict[str, Any] = field(default_factory=dict)


Listener = Callable[[ProgressEvent], None]
_listeners: list[Listener] = []


def emit(event: ProgressEvent) -> None:
    """Tell every listener; a failing listener is logged, never breaks the job."""
    for listener in list(_listeners):
        try:
            listener(event)
        except Exception:
            logger.exception("progress listener failed")


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Call ``listener`` with every event emitted inside the block."""
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)
