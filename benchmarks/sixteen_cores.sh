#!/bin/bash
# Issue 30's figures on a machine of many cores, in one command: the overhead at P=8 and P=16
# (ours and Optuna's journal in one run each), scaling with real training at P = 1, 8, 16, and
# the dispatch path at P=8. Each step has its own limit, so one slow step leaves the others'
# figures; each step's output goes to $OUT/<step>.txt (default: ./sixteen-cores).
#
# It runs from a copy of benchmarks/ outside the checkout (the checkout's ultron/ folder is not
# the installed package), with `python3` holding ultron and its `torch` and `report` extras. On a
# machine that reaches no package registry, install wheels downloaded elsewhere first
# (docs/development.md, "Figures on a machine of many cores").
#
#     bash benchmarks/sixteen_cores.sh
set -u
OUT=${OUT:-$PWD/sixteen-cores}
PY=${PYTHON:-$(command -v python3)}
mkdir -p "$OUT" /tmp/ultron-16 && rm -rf /tmp/ultron-16/benchmarks || exit 1
cp -r "$(dirname "$0")" /tmp/ultron-16/benchmarks && cd /tmp/ultron-16 || exit 1
echo "python: $PY, $(nproc) cores"; uptime; date -u
# The heavy imports once first: a cold disk's first read is the machine's cost, not a job's.
"$PY" -c "import ultron.flows.hpo_job, prefect, distributed, torch, sklearn, matplotlib, optuna" ||
    exit 1
export PYTHONUNBUFFERED=1
step() {
    local name=$1 limit=$2
    shift 2
    date -u +%T
    timeout "$limit" "$PY" -m "$@" >"$OUT/$name.txt" 2>&1
    echo "$name: exit $?"
}
# The first job of a fresh machine also starts Prefect's temporary server (about 30 s there).
step overhead8 150 benchmarks.overhead --trials 200 --sleep 0.5 --parallelism 8
tail -6 "$OUT/overhead8.txt"
step overhead16 200 benchmarks.overhead --trials 640 --sleep 1 --parallelism 16
tail -6 "$OUT/overhead16.txt"
step scaling 300 benchmarks.scaling --parallelism 1 8 16 --epochs 4 \
    --modes ultron-async optuna-journal --out "$OUT/scaling"
grep -E "P=|^\|" "$OUT/scaling.txt"
step dispatch8 60 benchmarks.dispatch_path --loop async --trials 160 --sleep 0.2 --parallelism 8
tail -14 "$OUT/dispatch8.txt"
date -u; uptime
