"""A model that sleeps: each trial costs exactly ``sleep`` seconds of 'training'."""

import time


class Model:
    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> float:
        time.sleep(float(hyperparameters["sleep"]))
        return float(hyperparameters["x"])


class Timed:
    """The same sleep, with when it started and ended by this process's clock
    (``benchmarks/dispatch_path.py`` times the gap between two trials)."""

    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> dict:
        started_at = time.time()
        time.sleep(float(hyperparameters["sleep"]))
        score = float(hyperparameters["x"])
        return {"score": score, "started_at": started_at, "ended_at": time.time()}
