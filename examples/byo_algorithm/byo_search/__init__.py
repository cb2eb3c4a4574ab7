"""A user's own search algorithm: ``strategy: byo_search.hill_climbing:HillClimbing``."""

from byo_search.hill_climbing import HillClimbing

__all__ = ["HillClimbing"]
