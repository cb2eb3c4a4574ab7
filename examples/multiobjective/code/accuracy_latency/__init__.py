"""A toy with two objectives and a known Pareto front (see ``accuracy_latency.toy``)."""
