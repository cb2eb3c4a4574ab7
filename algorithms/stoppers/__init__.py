"""Stoppers: decide from a trial's reports whether it continues, stops or is suspended."""

from ultron.algorithms.stoppers.asha import ASHA, AshaMode
from ultron.algorithms.stoppers.bandit import Bandit
from ultron.algorithms.stoppers.base import Command, Decision, Stopper, TrialId, TrialPlan
from ultron.algorithms.stoppers.budgets import Bracket, Rung, asha_rungs, hyperband_brackets
from ultron.algorithms.stoppers.earlyterm import EarlyTerm
from ultron.algorithms.stoppers.hyperband import Hyperband
from ultron.algorithms.stoppers.median import MedianStopping
from ultron.algorithms.stoppers.pbt import PBT
from ultron.algorithms.stoppers.pop import POP
from ultron.algorithms.stoppers.successive_halving import SuccessiveHalvingBracket

__all__ = [
    "ASHA",
    "PBT",
    "POP",
    "AshaMode",
    "Bandit",
    "Bracket",
    "Command",
    "Decision",
    "EarlyTerm",
    "Hyperband",
    "MedianStopping",
    "Rung",
    "Stopper",
    "SuccessiveHalvingBracket",
    "TrialId",
    "TrialPlan",
    "asha_rungs",
    "hyperband_brackets",
]
