"""Where the benchmark data lives, and a clear message when it does not.

The data sets are the project's shared ones (``../shared/data`` next to the repository, see its
README); ``ULTRON_BENCHMARK_DATA`` points elsewhere.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

__all__ = ["DataMissing", "data_dir", "read_csv"]

_DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data"


class DataMissing(RuntimeError):
    """A benchmark's data folder is absent; the message says what to provide."""


def data_dir(folder: str) -> Path:
    """The data folder ``folder``, or :class:`DataMissing` naming where it was looked for."""
    root = Path(os.environ.get("ULTRON_BENCHMARK_DATA", _DEFAULT))
    path = root / folder
    if not path.is_dir():
        raise DataMissing(
            f"skipped: benchmark data {folder!r} not found under {root}; set "
            "ULTRON_BENCHMARK_DATA to the folder holding it (see ../shared/data/README.md)"
        )
    return path


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))
