"""Search strategies and stoppers: pure Python, no Prefect, Dask, Redis or TensorFlow."""

from ultron.algorithms.base import Direction, HPOAlgorithm, SearchAlgorithm
from ultron.algorithms.evolution import RegularizedEvolution
from ultron.algorithms.grid_search import GridSearch
from ultron.algorithms.optuna_sampler import (
    CmaEsSearch,
    GPSearch,
    MOTPESearch,
    NSGA2Search,
    NSGA3Search,
    OptunaSearch,
    QMCSearch,
    TPESearch,
)
from ultron.algorithms.random_search import RandomSearch
from ultron.algorithms.registry import BUILTIN_STRATEGIES, is_builtin, resolve_strategy
from ultron.algorithms.reinforce import ReinforceSearch
from ultron.algorithms.space import (
    Choice,
    Conditional,
    IntRange,
    LogUniform,
    Repeated,
    SearchSpace,
    Uniform,
    canonical,
)

__all__ = [
    "BUILTIN_STRATEGIES",
    "Choice",
    "CmaEsSearch",
    "Conditional",
    "Direction",
    "GPSearch",
    "GridSearch",
    "HPOAlgorithm",
    "IntRange",
    "LogUniform",
    "MOTPESearch",
    "NSGA2Search",
    "NSGA3Search",
    "OptunaSearch",
    "QMCSearch",
    "RandomSearch",
    "RegularizedEvolution",
    "ReinforceSearch",
    "Repeated",
    "SearchAlgorithm",
    "SearchSpace",
    "TPESearch",
    "Uniform",
    "canonical",
    "is_builtin",
    "resolve_strategy",
]
