"""Measured comparisons of ultron's strategies and stoppers; ``python -m benchmarks.run_all``."""
