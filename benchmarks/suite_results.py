"""The LCBench suite's section of ``benchmarks/RESULTS.md`` from cached runs, in parts.

``python -m benchmarks.lcbench_suite --from-cache --write-results`` keeps only the tasks whose
runs are all cached at every worker count, so 64 and 256 workers half done would drop tasks
from the 8-worker tables too. Here each ``--part`` (worker counts and seeds) is its own suite
over the tasks complete in it, and the first is the section's main one; nothing runs.

    python -m benchmarks.suite_results --part 8:3 --part 64,256:1 --write-results
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import suite_tables
from benchmarks.data import DataMissing
from benchmarks.lcbench_suite import (
    METHODS,
    RESULTS,
    refuse_other_target,
    run_suite,
    target_quantile,
    tasks,
)
from benchmarks.suite_runs import RunCache, SuiteSettings


def _part(text: str) -> tuple[list[int], int]:
    """``--part``'s value, ``WORKERS:SEEDS`` (e.g. ``64,256:1``)."""
    workers, _, seeds = text.partition(":")
    try:
        counts = [int(w) for w in workers.split(",")]
        n = int(seeds)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not WORKERS:SEEDS (worker counts separated by commas, then the "
            "number of seeds; e.g. 64,256:1)"
        ) from None
    if n < 1 or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: worker counts and seeds must be at least 1")
    return counts, n


def parts_from_cache(
    parts: Sequence[tuple[list[int], int]],
    *,
    task_ids: Sequence[str],
    methods: Sequence[str],
    cache: RunCache,
    budget: float = 64.0,
    quantile: float = SuiteSettings.quantile,
) -> list[dict[str, Any]]:
    """One suite per part, each over the tasks all of whose runs in it are cached (runs of the
    target ``quantile``: those of another target are other runs)."""
    return [
        run_suite(
            SuiteSettings(seeds=seeds, budget=budget, quantile=quantile),
            task_ids=task_ids,
            methods=methods,
            workers=workers,
            cache=cache,
            from_cache=True,
        )
        for workers, seeds in parts
    ]


def main(argv: Sequence[str] | None = None) -> str:
    """Print (and with ``--write-results`` write) the section from the cached parts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", type=_part, action="append", required=True)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--budget", type=float, default=64.0)
    parser.add_argument(
        "--target-quantile",
        type=target_quantile,
        default=SuiteSettings.quantile,
        help="the runs' target quantile, as given to benchmarks.lcbench_suite",
    )
    parser.add_argument("--note", default="", help="a paragraph after the description")
    parser.add_argument("--cache", type=Path, default=RunCache.default_folder())
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--results", type=Path, default=RESULTS)
    arguments = parser.parse_args(argv)
    refuse_other_target(parser, arguments)
    try:
        task_ids = tasks()
    except DataMissing as error:
        print(str(error))
        return str(error)
    suites = parts_from_cache(
        arguments.part,
        task_ids=task_ids,
        methods=arguments.methods.split(","),
        cache=RunCache(arguments.cache),
        budget=arguments.budget,
        quantile=arguments.target_quantile,
    )
    given = list(argv if argv is not None else sys.argv[1:])
    if "--note" in given:  # the note is shown as itself, not inside the command
        at = given.index("--note")
        del given[at : at + 2]
    command = shlex.join(["python", "-m", "benchmarks.suite_results", *given])
    report = suite_tables.section(
        suites[0], command=command.strip(), parts=suites[1:], note=arguments.note
    )
    print(report)
    if arguments.write_results:
        suite_tables.write_section(arguments.results, report)
    return report


if __name__ == "__main__":
    main()
