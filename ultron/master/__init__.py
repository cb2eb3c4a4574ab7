"""The master side (paper V-E), in the flow process: the search loops, the trial dispatcher,
the early-stopping driver, the score cache, the job state, the results and progress events.
"""

from __future__ import annotations

from ultron.master.dispatcher import TrialDispatcher
from ultron.master.early_stopping import StopperDriver
from ultron.master.job_state import JobState, JobStatus, JobStore
from ultron.master.loops import Master, SearchSettings
from ultron.master.progress import ProgressEvent, emit, listening
from ultron.master.results import HPOResult, best_trial, leaderboard, write_results
from ultron.master.score_cache import ScoreCache
from ultron.master.strategy import build_stopper, build_strategy, check_options

__all__ = [
    "HPOResult",
    "JobState",
    "JobStatus",
    "JobStore",
    "Master",
    "ProgressEvent",
    "ScoreCache",
    "SearchSettings",
    "StopperDriver",
    "TrialDispatcher",
    "best_trial",
    "build_stopper",
    "build_strategy",
    "check_options",
    "emit",
    "leaderboard",
    "listening",
    "write_results",
]
