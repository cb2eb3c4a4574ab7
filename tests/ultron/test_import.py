"""``import ultron`` works with the core alone and loads nothing heavy."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "tensorflow", "prefect", "distributed", "kubernetes", "s3fs")


def test_import_ultron_is_light() -> None:
    code = (
        "import sys, ultron; "
        f"print([m for m in {HEAVY!r} if m in sys.modules]); "
        "print(callable(ultron.report), ultron.__version__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loaded, info = out.stdout.splitlines()
    assert loaded == "[]"
    assert info.startswith("True ")


def test_report_outside_a_trial_is_harmless() -> None:
    import ultron

    assert ultron.report(0, loss=1.0) == ultron.ReportDecision.CONTINUE


def test_the_trial_process_and_the_report_path_stay_light() -> None:
    """A trial process imports ultron.worker.process, ultron.report's keys and ultron.data's
    client: not the rest of their packages (the cluster factory, the spec, Optuna, Prefect)."""
    code = (
        "import sys, ultron.worker.process, ultron.model, ultron.checkpoints\n"
        "from ultron.redis import keys\n"
        "heavy = ('prefect', 'distributed', 'optuna', 'ultron.spec', 'ultron.master', "
        "'ultron.cluster.factory', 'ultron.algorithms')\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
