"""The simulator: the real master loop over a simulated cluster with known learning curves, on
a fake clock (HyperDrive section 7, Syne Tune's simulator backend).
"""

from __future__ import annotations

from ultron.simulation.benchmark import Benchmark, LearningCurve, SimulatedClock
from ultron.simulation.costs import SimulationCosts
from ultron.simulation.jobs import (
    MemoryCache,
    MemoryStore,
    SimulatedDispatcher,
    SimulatedJob,
    simulate_job,
)

__all__ = [
    "Benchmark",
    "LearningCurve",
    "MemoryCache",
    "MemoryStore",
    "SimulatedClock",
    "SimulatedDispatcher",
    "SimulatedJob",
    "SimulationCosts",
    "simulate_job",
]
