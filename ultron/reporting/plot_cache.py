"""Plots drawn once: a report's PNG kept under ``ULTRON_HOME/cache/plots``, keyed by what it
was drawn from, so that a job whose every trial came from the score cache (the same scores,
configurations and curves as the run before) writes its report without importing matplotlib
or drawing anything (about 2 s of a 2-core machine's time).

The key is a SHA-256 of the plot function's name, its arguments and the source of
:mod:`ultron.reporting.plots`: a change to any of them draws the plot again. A cache that
cannot be read or written only means the plot is drawn.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ultron.paths import ultron_home
from ultron.reporting import plots

__all__ = ["cached_plot", "plot_cache_dir"]


def plot_cache_dir() -> Path:
    """Where drawn plots are kept: ``ULTRON_HOME/cache/plots``."""
    return ultron_home() / "cache" / "plots"


def cached_plot(draw: Callable[..., bytes], *args: Any) -> bytes:
    """``draw(*args)``'s PNG, from the cache when the same plot was drawn before."""
    path = plot_cache_dir() / f"{plot_key(draw.__name__, args)}.png"
    try:
        return path.read_bytes()
    except OSError:
        pass
    png = draw(*args)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
        partial.write_bytes(png)
        os.replace(partial, path)  # whole or absent: a reader never sees half a PNG
    except OSError:
        pass
    return png


def plot_key(name: str, args: Any) -> str:
    """The hex digest that names a plot: its function, its arguments and the drawing code."""
    digest = hashlib.sha256(Path(plots.__file__).read_bytes())
    digest.update(json.dumps([name, list(args)], sort_keys=True, default=str).encode())
    return digest.hexdigest()
