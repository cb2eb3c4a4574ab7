"""An experiment: N HPO jobs per strategy (and per stopper) that differ only in their seed, and
the mean and standard deviation of their best scores (the paper's section III and VIII-C).

    experiment(spec, seeds=3, strategies=["random", "tpe"])
      for each strategy (x stopper), for each seed: hpo_job as a subflow
      report: summary.json/.csv, best_vs_trials.png, best_vs_time.png, report.html

The jobs run one after the other, each with the spec's ``parallelism`` (its trials side by
side on the job's cluster): a job claims the process's module names for the user's code while
it runs (see ``ultron.run``), so two jobs in one process would collide. An experiment is as
wide as its jobs; for more, raise ``parallelism``.

An experiment resumes like a job: its id is stable (``experiment_id``), its jobs' ids derive
from it, a job that completed before is not run again (its result files are read back, after
checking that they were computed from the same spec and code base), and an unfinished one
resumes from its checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.runtime import flow_run

from ultron import strict_json
from ultron.containerize.codebase import code_hash
from ultron.errors import ConfigIssue, SpecError, UltronError
from ultron.flows.hpo_job import hpo_job
from ultron.paths import artifact_key, check_job_id, job_results_url, new_job_id
from ultron.reporting import (
    SeedRun,
    experiment_files,
    read_job,
    read_json,
    run_from_trials,
    summarize,
    summary_rows,
    write_files,
)
from ultron.reporting.plots import require_matplotlib
from ultron.secrets import conceal, redacted_spec, reveal
from ultron.spec.job import JobSpec
from ultron.spec.loader import load_spec

__all__ = ["Variant", "experiment", "plan_variants", "run_seeds"]

Variant = tuple[str, JobSpec]  # a label (strategy or strategy+stopper) and its job spec


@flow(name="experiment", validate_parameters=False)
def experiment(
    spec: dict[str, Any],
    seeds: int = 3,
    strategies: list[str] | None = None,
    stoppers: list[str] | None = None,
    experiment_id: str | None = None,
) -> dict[str, Any]:
    """Run ``seeds`` seeded jobs per strategy (and stopper) and report their best scores.

    Args:
        spec: the job spec every job starts from (its seed is the first seed).
        seeds: jobs per strategy; their seeds are ``spec.seed``, ``spec.seed + 1``, ...
        strategies: the strategies to compare (default: the spec's).
        stoppers: early stoppers to compare (``none`` for none; default: the spec's).
        experiment_id: a stable id; the id of an unfinished experiment resumes it.

    Returns:
        The experiment's id, the folder of its report, the summary rows and the files.
    """
    require_matplotlib()  # before any compute: the report is the point of an experiment
    base = load_spec(reveal(spec))  # the caller handed Prefect the spec with masked passwords
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        issue = ConfigIssue("seeds", seeds, "at least 1 job per strategy", "pass --seeds 3")
        raise SpecError([issue], source="experiment")
    variants = plan_variants(base, strategies, stoppers)
    if experiment_id is None:
        run_id = flow_run.get_id()
        experiment_id = new_job_id(f"{base.name}-exp", suffix=run_id[:8] if run_id else None)
    experiment_id = check_job_id(experiment_id)
    folder = job_results_url(base.storage, experiment_id)
    _check_manifest(folder, base, seeds=seeds, labels=[label for label, _ in variants])
    runs = run_seeds(experiment_id, variants, [base.seed + i for i in range(seeds)])
    metric, direction = base.objective.metric, base.objective.mode
    files = write_files(
        folder,
        experiment_files(
            f"Experiment {experiment_id}",
            runs,
            direction=direction,
            metric=metric,
            extra={"experiment_id": experiment_id},
        ),
    )
    rows = summary_rows(summarize(runs, direction))
    _artifacts(experiment_id, rows, files["report.html"], metric)
    get_run_logger().info("experiment report in %s", files["report.html"])
    return {"experiment_id": experiment_id, "folder": folder, "summary": rows, "files": files}


def plan_variants(
    base: JobSpec, strategies: Sequence[str] | None, stoppers: Sequence[str] | None
) -> list[Variant]:
    """One job spec per strategy x stopper, each checked before anything runs.

    A strategy other than the spec's gets no ``strategy_options`` (they belong to the spec's);
    a stopper other than ``none`` takes the spec's ``early_stopping`` with its ``type``
    replaced, so the spec must have one (it gives ``max_resource``).

    Raises:
        SpecError: naming the strategy or stopper and what to change.
    """
    fields = base.model_dump(mode="json")
    variants = []
    stopper_choices: list[str | None] = list(stoppers) if stoppers else [None]
    for strategy in strategies or [base.strategy]:
        for stopper in stopper_choices:
            changed = dict(fields, strategy=strategy)
            if strategy != base.strategy:
                changed["strategy_options"] = {}
            label = strategy
            if stopper is not None:
                label = f"{strategy}+{stopper}"
                changed["early_stopping"] = _stopper(base, stopper)
            variants.append((label, load_spec(changed)))
    return variants


def _stopper(base: JobSpec, stopper: str) -> dict[str, Any] | None:
    if stopper == "none":
        return None
    if base.early_stopping is None:
        issue = ConfigIssue(
            "stoppers",
            stopper,
            "a stopper needs the spec's early_stopping (its max_resource, the steps of a trial)",
            "add early_stopping: {type: asha, max_resource: 15} to the spec, or pass none",
        )
        raise SpecError([issue], source="experiment")
    return dict(base.early_stopping.model_dump(mode="json"), type=stopper)


def run_seeds(
    experiment_id: str, variants: Sequence[Variant], seeds: Sequence[int]
) -> list[SeedRun]:
    """Each variant's job for each seed, one after the other (see the module's docstring)."""
    runs = []
    for label, spec in variants:
        for seed in seeds:
            job = spec.model_copy(update={"seed": seed})
            job_id = check_job_id(f"{experiment_id}-{_safe(label)}-s{seed}")
            runs.append(_run_seed(label, seed, job, job_id))
    return runs


def _run_seed(label: str, seed: int, job: JobSpec, job_id: str) -> SeedRun:
    """The job of one seed: read back when it completed before with this spec, else run (or
    resume) it as a subflow."""
    url = job_results_url(job.storage, job_id)
    done = read_json(f"{url}/best.json")
    same = done is not None and done.get("spec") == redacted_spec(job)
    if not (same and done.get("status") == "completed"):
        state = hpo_job(conceal(job), job_id=job_id, return_state=True)
        if not state.is_completed():
            raise UltronError(
                f"job {job_id} ({label}, seed {seed}) ended {state.type.value}: {state.message}. "
                "Fix: see its trial table; run the experiment again with the same experiment "
                "id to resume it"
            )
    else:
        get_run_logger().info("job %s completed before: its results are read back", job_id)
    results = read_job(url)
    return run_from_trials(label, seed, job_id, results.trials, results.curves)


def _safe(label: str) -> str:
    return "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "-" for c in label)


_PER_JOB = ("name", "strategy", "strategy_options", "early_stopping", "num_iterations")


def _check_manifest(folder: str, base: JobSpec, *, seeds: int, labels: list[str]) -> None:
    """Store what the experiment computes; a later run of its id must compute the same.

    Seeds and strategies may be added (finished jobs are reused, new ones run); what each job
    runs with (strategy, stopper, budget) is checked job by job against its stored spec.
    """
    spec = {k: v for k, v in redacted_spec(base).items() if k not in _PER_JOB}
    # A code base in an object store is fetched by the jobs; here its URL stands for it.
    code = str(base.code) if base.code_is_remote else code_hash(base.code_path)
    manifest = {"spec": spec, "code_hash": code}
    stored = read_json(f"{folder}/experiment.json")
    if stored is not None and {k: stored.get(k) for k in manifest} != manifest:
        raise UltronError(
            f"experiment {folder} was run with another spec or code base, and its jobs' results "
            "would not be comparable. Fix: run with a new experiment id, or change it back"
        )
    text = strict_json.dumps(
        {**manifest, "seeds": seeds, "variants": labels}, indent=2, sort_keys=True
    )
    write_files(folder, {"experiment.json": text})


def _artifacts(experiment_id: str, rows: list[dict[str, Any]], report: str, metric: str) -> None:
    lines = [f"# Experiment {experiment_id}", "", f"Best {metric} per strategy over seeds.", ""]
    for row in rows:
        lines.append(
            f"- **{row['strategy']}**: {row['mean']:.6g} ± {row['std']:.6g} (n={row['seeds']})"
        )
    lines += ["", f"Report: {report}"]
    try:
        create_table_artifact(rows, key=artifact_key(experiment_id, "summary"))
        create_markdown_artifact("\n".join(lines), key=artifact_key(experiment_id, "report"))
    except Exception:  # artifacts are for the UI; their failure never fails an experiment
        get_run_logger().warning("could not write Prefect artifacts")
