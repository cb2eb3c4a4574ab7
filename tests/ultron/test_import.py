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
    """A trial process imports ultron.worker.process, ultron.report and ultron.data's client:
    not the rest of their packages (the cluster factory, the spec, Optuna, Prefect), and no
    Redis client at all (its reports go through its worker)."""
    code = (
        "import sys, ultron.worker.process, ultron.model, ultron.checkpoints, ultron.data\n"
        "heavy = ('prefect', 'distributed', 'optuna', 'ultron.spec', 'ultron.master', "
        "'ultron.cluster.factory', 'ultron.algorithms', 'redis', 'ultron.redis')\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _ultron_modules(imports: str) -> set[str]:
    """The ``ultron.*`` modules a fresh interpreter holds after ``imports``."""
    listing = "print('\\n'.join(m for m in sys.modules if m.startswith('ultron')))"
    code = f"import sys\n{imports}\n{listing}"
    out = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def test_no_package_of_ultron_mixes_trial_code_with_flow_only_code() -> None:
    """A room of ``ultron/`` holds code of one side: what the trial process imports (its entry
    point, ``ultron.report``, ``ultron.data``, the checkpoint helpers), or what only
    the flow imports; a package holding both would make one side load, and depend on, the
    other's code."""
    trial = _ultron_modules(
        "import ultron.worker.process, ultron.model, ultron.data, ultron.checkpoints"
    )
    # What a Dask worker runs: a trial's runner, and a hopper job's sub-epoch (in the worker).
    worker = _ultron_modules("import ultron.worker.runner, ultron.worker.hopper")
    flow = _ultron_modules(
        "import ultron.flows.hpo_job, ultron.flows.experiment, ultron.flows.benchmark\n"
        "import ultron.cli.main, ultron.api"
    )
    flow_only = flow - trial - worker
    assert "ultron.master.loops" in flow_only and "ultron.worker.process" in trial  # it looked

    def package(module: str) -> str | None:
        parts = module.split(".")
        return ".".join(parts[:2]) if len(parts) > 2 else None

    # The top-level folders installed as ultron.* (flows, tasks, algorithms, datamanager) are
    # rooms of their own process kinds (ARCHITECTURE.md); this rule is about ultron/'s packages.
    folders = {"ultron.flows", "ultron.tasks", "ultron.algorithms", "ultron.datamanager"}
    mixed = {
        name: (
            sorted(m for m in trial if package(m) == name),
            sorted(m for m in flow_only if package(m) == name),
        )
        for name in {package(m) for m in trial} - {None} - folders
        if any(package(m) == name for m in flow_only)
    }
    assert mixed == {}
