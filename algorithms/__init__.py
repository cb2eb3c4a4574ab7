"""Search strategies and stoppers: pure Python, no Prefect, Dask, Redis or TensorFlow."""

from algorithms.base import Direction, HPOAlgorithm, SearchAlgorithm
from algorithms.evolution import RegularizedEvolution
from algorithms.grid_search import GridSearch
from algorithms.optuna_sampler import OptunaSearch
from algorithms.random_search import RandomSearch
from algorithms.registry import BUILTIN_STRATEGIES, resolve_strategy
from algorithms.reinforce import ReinforceSearch
from algorithms.space import Choice, IntRange, LogUniform, SearchSpace, Uniform, canonical

__all__ = [
    "BUILTIN_STRATEGIES",
    "Choice",
    "Direction",
    "GridSearch",
    "HPOAlgorithm",
    "IntRange",
    "LogUniform",
    "OptunaSearch",
    "RandomSearch",
    "RegularizedEvolution",
    "ReinforceSearch",
    "SearchAlgorithm",
    "SearchSpace",
    "Uniform",
    "canonical",
    "resolve_strategy",
]
