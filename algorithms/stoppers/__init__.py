"""Stoppers: decide from a trial's reports whether it continues, stops or is suspended."""

from algorithms.stoppers.asha import ASHA, AshaMode
from algorithms.stoppers.base import Command, Decision, Stopper, TrialId, TrialPlan
from algorithms.stoppers.budgets import Bracket, Rung, asha_rungs, hyperband_brackets
from algorithms.stoppers.hyperband import Hyperband
from algorithms.stoppers.median import MedianStopping
from algorithms.stoppers.pop import POP
from algorithms.stoppers.successive_halving import SuccessiveHalvingBracket

__all__ = [
    "ASHA",
    "POP",
    "AshaMode",
    "Bracket",
    "Command",
    "Decision",
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
