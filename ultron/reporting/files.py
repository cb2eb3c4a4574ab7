"""Reading a finished job's result files and writing report files, through fsspec (a folder by
default, any object store with its extra)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import fsspec

from ultron.algorithms.base import Direction
from ultron.algorithms.objectives import Bound, Goal
from ultron.errors import UltronError
from ultron.trial_records import TrialResult

__all__ = ["JobFiles", "read_job", "read_json", "write_files"]


@dataclass(frozen=True)
class JobFiles:
    """What ``finalize`` wrote for a job (``best.json``, ``trials.json``, ``curves.json``)."""

    url: str
    best: dict[str, Any]
    trials: list[TrialResult]
    curves: dict[str, list[dict[str, Any]]]

    @property
    def direction(self) -> Direction:
        return Direction(self.best.get("mode", "minimize"))

    @property
    def metric(self) -> str:
        return str(self.best.get("metric", "score"))

    @property
    def goals(self) -> tuple[Goal, ...]:
        """The job's several objectives (``best.json``'s ``objectives``); empty with one."""
        entries = self.best.get("objectives") or []
        return tuple(Goal(e["metric"], Direction(e["mode"])) for e in entries)

    @property
    def bounds(self) -> tuple[Bound, ...]:
        """The job's constraints (``best.json``'s ``constraints``)."""
        entries = self.best.get("constraints") or []
        return tuple(Bound(e["metric"], e.get("min"), e.get("max")) for e in entries)


def read_json(url: str) -> Any:
    """The JSON document at ``url``, or ``None`` when there is none."""
    fs, path = fsspec.core.url_to_fs(url)
    if not fs.exists(path):
        return None
    with fs.open(path, "r") as handle:
        return json.load(handle)


def read_job(url: str) -> JobFiles:
    """The result files of the job whose results lie at ``url`` (``<storage>/<job_id>``).

    Raises:
        UltronError: the job has no results there (it never ran, or ran with another storage).
    """
    best = read_json(f"{url}/best.json")
    trials = read_json(f"{url}/trials.json")
    if best is None or trials is None:
        raise UltronError(
            f"no job results at {url} (best.json and trials.json are written when a job ends). "
            "Fix: check the job id (ultron jobs lists them) and pass the job's storage"
        )
    curves = read_json(f"{url}/curves.json") or {}
    return JobFiles(url, best, [TrialResult.from_dict(t) for t in trials], curves)


def write_files(url: str, files: Mapping[str, bytes | str]) -> dict[str, str]:
    """Write ``files`` (name -> content) under ``url``; returns name -> path or URL."""
    fs, root = fsspec.core.url_to_fs(url)
    fs.makedirs(root, exist_ok=True)
    written = {}
    for name, content in files.items():
        path = f"{root.rstrip('/')}/{name}"
        data = content.encode() if isinstance(content, str) else content
        with fs.open(path, "wb") as handle:
            handle.write(data)
        written[name] = path if "://" not in url else f"{url.rstrip('/')}/{name}"
    return written
