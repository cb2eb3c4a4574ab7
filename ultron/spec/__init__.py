"""The job spec (paper Fig. 2): its typed model and the loader that reads files, mappings and
the paper's keys. Runs wherever a spec is read: the CLI, ``ultron.run`` and the flow process.
"""

from __future__ import annotations

from ultron.spec.job import EarlyStopping, JobSpec, Objective, Resources
from ultron.spec.loader import PAPER_KEYS, load_spec
from ultron.spec.space import DomainSpec, parse_entry

__all__ = [
    "PAPER_KEYS",
    "DomainSpec",
    "EarlyStopping",
    "JobSpec",
    "Objective",
    "Resources",
    "load_spec",
    "parse_entry",
]
