"""The scaling benchmark's report (:mod:`benchmarks.scaling`): the machine a run measured, its
markdown table and its plot (the paper's Fig. 11: wall time, speed-up and efficiency against
P, one line per mode)."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent

MODES = ("ultron async", "ultron batch", "optuna threads", "optuna journal")
"""The modes, in the order the table and the plot show them."""


def machine() -> dict[str, Any]:
    """What the figures were measured on: cores, CPU, date, commit and the command."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=HERE,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):  # not a checkout: the commit is unknown
        commit = "unknown"
    return {
        "cores": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "command": "python -m benchmarks.scaling " + " ".join(sys.argv[1:]),
        "load_average": list(os.getloadavg()),
    }


def table(rows: Sequence[dict[str, Any]], about: dict[str, Any], configs: int, epochs: int) -> str:
    """The markdown table, headed by the machine and the command."""
    lines = [
        f"`{about['command']}`: {configs} configurations x {epochs} epochs, "
        f"{about['cores']} cores ({about['cpu']}), {about['date']}, commit {about['commit']}, "
        f"load average at the end {about['load_average'][0]:.1f}",
        "",
        "| mode | P | trials | search s | speed-up | efficiency | whole s | trials' span s "
        "| span efficiency | mean trial s | workers' start s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in sorted(rows, key=lambda r: (MODES.index(r["mode"]), r["parallelism"])):
        span, span_eff = row.get("span_s"), row.get("span_efficiency")
        trial, start = row.get("trial_s"), row.get("start_s")
        lines.append(
            f"| {row['mode']} | {row['parallelism']} | {row['trials']} | {row['search_s']:.2f} "
            f"| {row['speedup']:.2f} | {row['efficiency']:.1%} | {row['total_s']:.2f} "
            f"| {f'{span:.2f}' if span else '-'} | {f'{span_eff:.1%}' if span_eff else '-'} "
            f"| {f'{trial:.3f}' if trial else '-'} | {f'{start:.2f}' if start else '-'} |"
        )
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    """Wall time, speed-up and efficiency against P, one line per mode (Fig. 11's plot)."""
    import matplotlib

    matplotlib.use("Agg")  # a file only
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    ps = sorted({row["parallelism"] for row in rows})
    for mode in MODES:
        mine = sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["parallelism"])
        if not mine:
            continue
        x = [r["parallelism"] for r in mine]
        for ax, key in zip(axes, ("search_s", "speedup", "efficiency"), strict=True):
            ax.plot(x, [r[key] for r in mine], marker="o", label=mode)
        if all(r.get("span_efficiency") for r in mine):
            spans = [r["span_efficiency"] for r in mine]
            axes[2].plot(x, spans, marker="x", linestyle="--", label=f"{mode}, trials' span")
    axes[1].plot(ps, ps, color="grey", linestyle="--", label="linear")
    axes[2].axhline(1.0, color="grey", linestyle="--", label="linear")
    axes[2].axhline(0.9, color="grey", linestyle=":", label="90% of linear")
    labels = ("wall time of the search (s)", "speed-up T1 / TP", "efficiency T1 / (P TP)")
    for ax, label in zip(axes, labels, strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ps, [str(p) for p in ps])
        ax.set_xlabel("parallelism P (workers)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[2].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
