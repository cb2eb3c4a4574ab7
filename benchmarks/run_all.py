"""Run every benchmark and print its table: ``python -m benchmarks.run_all [--out FILE]``.

Benchmarks whose data is absent print why they were skipped. ``--out`` also writes the tables
as Markdown (``benchmarks/RESULTS.md`` holds the last recorded run).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import time
from pathlib import Path

from benchmarks import curves_check, lcbench, tabular


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="write the tables here too")
    parser.add_argument("--seeds", type=int, default=20, help="seeds of the tabular benchmarks")
    parser.add_argument("--lcbench-seeds", type=int, default=3)
    arguments = parser.parse_args()
    started = time.perf_counter()
    sections = [
        tabular.main(seeds=arguments.seeds, trials=100),
        lcbench.main(seeds=arguments.lcbench_seeds),
        curves_check.main([]),
    ]
    footer = (
        f"\nTotal {time.perf_counter() - started:.0f} s on {platform.machine()} "
        f"({platform.python_implementation()} {platform.python_version()}), "
        f"{os.cpu_count()} cores, {dt.date.today().isoformat()}."
    )
    print(footer)
    if arguments.out is not None:
        arguments.out.write_text(
            "# Benchmark results\n\n" + "\n\n".join(sections) + "\n" + footer + "\n"
        )


if __name__ == "__main__":
    main()
