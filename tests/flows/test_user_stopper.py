"""A stopper the user brings drives a real job: ``early_stopping.type: stoppers.cut:Cutoff``
from a code base whose package is named ``stoppers``, like ultron's own
``ultron.algorithms.stoppers`` (which the user's stopper imports its base class from)."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import pytest

import ultron
from ultron.trial_records import TrialStatus

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]

CODE = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "own-stopper"
        version = "0.1.0"

        [tool.setuptools]
        packages = ["pkg", "stoppers"]
    """,
    "pkg/__init__.py": "",
    "pkg/train.py": """
        import time

        import ultron


        class Model:
            def score(self, hyperparameters, checkpoint_path, resume):
                x = float(hyperparameters["x"])
                for step in range(1, 5):
                    if not ultron.report(step, loss=x):
                        break  # stopped: its last report is its score
                    # The master judges a report a moment after it arrived, and a stop heard
                    # only at the last step leaves the trial complete: a trial the Cutoff is
                    # to stop (from step 2) waits for its word, read back by reporting the
                    # step again (a repeated step is not judged twice), for 120 s at most.
                    since = time.monotonic()
                    while step >= 2 and x > 5 and time.monotonic() - since < 120:
                        if not ultron.report(step, loss=x):
                            return x
                        time.sleep(0.05)
                return x
    """,
    "stoppers/__init__.py": "",
    "stoppers/cut.py": """
        from ultron.algorithms.stoppers import Decision, Stopper


        class Cutoff(Stopper):
            # Stops a trial whose loss is above limit from step 2 on.
            def __init__(self, *, direction, max_resource, limit):
                super().__init__(direction=direction, max_resource=max_resource)
                self.limit = limit

            def on_report(self, trial_id, step, value):
                if step >= self.max_resource or (step >= 2 and self.loss(value) > self.limit):
                    return Decision.STOP
                return Decision.CONTINUE
    """,
}


def test_a_user_stopper_from_a_stoppers_package_stops_a_trial(
    tmp_path: Path, redis_url: str
) -> None:
    code = tmp_path / "code"
    for name, text in CODE.items():
        (code / name).parent.mkdir(parents=True, exist_ok=True)
        (code / name).write_text(textwrap.dedent(text).lstrip())
    result = ultron.run(
        {
            "name": "own-stopper",
            "code": str(code),
            "model": "pkg.train:Model",
            "search_space": {"x": [1.0, 9.0], "tag": [uuid.uuid4().hex]},
            "strategy": "grid",
            "num_iterations": 2,
            "parallelism": 2,
            "objective": {"metric": "loss"},
            "early_stopping": {
                "type": "stoppers.cut:Cutoff",
                "max_resource": 4,
                "options": {"limit": 5.0},
            },
            "storage": str(tmp_path / "runs"),
            "redis_url": redis_url,
        }
    )
    by_x = {t.hyperparameters["x"]: t for t in result.trials}
    assert by_x[1.0].status is TrialStatus.COMPLETED
    assert by_x[9.0].status is TrialStatus.STOPPED
    assert result.best_config is not None and result.best_config["x"] == 1.0
