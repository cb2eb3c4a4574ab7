"""A model that sleeps: each trial costs exactly ``sleep`` seconds of 'training'."""

import time


class Model:
    def score(self, hyperparameters: dict, checkpoint_path: str, resume: bool) -> float:
        time.sleep(float(hyperparameters["sleep"]))
        return float(hyperparameters["x"])
